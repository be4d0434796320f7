"""Small agents the runtime and pipeline tests run by reference ("tests.agents:NAME")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import zlib

from beam_agents.memory import Memory
from beam_agents.runtime import AgentContext, ToolUnavailable, agent, tool


def counter(ctx: AgentContext) -> None:
    """Counts events per entity in memory and emits the count; fails on payload "fail"."""
    count = int(ctx.memory.get("count") or b"0") + 1
    ctx.memory.set("count", str(count).encode())
    ctx.memory.append("seen", ctx.event.event_id.encode(), max_items=3)
    if ctx.payload == b"fail":
        raise RuntimeError(f"asked to fail at {ctx.event.event_id}")
    ctx.emit("count", {"count": count, "seq": ctx.seq, "seen": len(ctx.memory.ring("seen"))})


def chatty(ctx: AgentContext) -> None:
    """Calls the model twice with the same request and once with another."""
    first = ctx.model.complete([{"role": "user", "content": ctx.payload.decode()}])
    again = ctx.model.complete([{"role": "user", "content": ctx.payload.decode()}])
    other = ctx.model.complete([{"role": "user", "content": "something else"}])
    ctx.emit("reply", {"a": first.text, "b": again.text, "c": other.text,
                       "cached": [first.cached, again.cached, other.cached]})


async def async_counter(ctx: AgentContext) -> None:
    """The counter, written async, awaiting the model."""
    reply = await ctx.model.acomplete([{"role": "user", "content": "hi"}])
    count = int(ctx.memory.get("count") or b"0") + 1
    ctx.memory.set("count", str(count).encode())
    ctx.emit("count", json.dumps({"count": count, "reply": reply.text}))


def sleepy(ctx: AgentContext) -> None:
    """Blocks far longer than any test timeout."""
    import threading  # noqa: PLC0415

    threading.Event().wait(30)


#: What `unwinding` saw: whether its cleanup ran after the cancel.
UNWOUND: list[str] = []


async def unwinding(ctx: AgentContext) -> None:
    """Awaits far past any test timeout, and records that its cleanup ran when cancelled."""
    try:
        await asyncio.sleep(30)
    finally:
        UNWOUND.append(ctx.event.event_id)


async def stubborn(ctx: AgentContext) -> None:
    """Swallows the cancel its timeout sends, and emits as if nothing had happened."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(30)
    ctx.emit("done", {"late": True})


async def own_timeout(ctx: AgentContext) -> None:
    """Raises a TimeoutError of its own, long before its activation's timeout."""
    raise TimeoutError("the agent's own deadline")


def overflow(ctx: AgentContext) -> None:
    """Writes past the hard cap."""
    ctx.memory.set("huge", b"x" * (1_048_576 + 1))


def big_intent(ctx: AgentContext) -> None:
    """Emits a payload larger than the configured bound."""
    ctx.emit("blob", b"x" * 2_000_000)


def emit_kinds(ctx: AgentContext) -> None:
    """Emits bytes, str and JSON payloads."""
    ctx.emit("bytes", b"\x00\x01")
    ctx.emit("text", "héllo")
    ctx.emit("json", {"b": [1, 2.5], "a": None})


def remember(ctx: AgentContext) -> None:
    """Saves a profile and a note per event, reads them back, emits what it saw.

    Follows the replay discipline (seed 000): every save is computed from the
    event and working memory, never from a same-activation long-term read.
    """
    note = ctx.payload.decode()
    count = int(ctx.memory.get("n") or b"0") + 1
    ctx.memory.set("n", str(count).encode())
    longterm = ctx.memory.longterm
    longterm.save("profile", json.dumps({"last": note, "n": count}, sort_keys=True).encode())
    longterm.save(f"note/{count:04d}", note.encode())
    profile = longterm.load("profile")
    notes = longterm.search("note/", limit=1000)
    if note.startswith("fail"):
        raise RuntimeError("failing after staging long-term saves")
    ctx.emit("saved", {"n": count, "notes": len(notes),
                       "profile": json.loads(profile.value) if profile else None})


def working_only(ctx: AgentContext) -> None:
    """Touches only working memory, enough to cross the soft cap."""
    ctx.memory.set("a", b"x" * 500_000)
    ctx.memory.set("b", b"y" * 400_000)
    ctx.memory.get("a")
    ctx.memory.append("log", b"z")
    ctx.emit("done", "ok")


def probe_longterm(ctx: AgentContext) -> None:
    """Reaches for long-term memory whether or not it is configured."""
    ctx.memory.longterm.load("anything")


def journal(ctx: AgentContext) -> None:
    """Keeps a long-term journal per entity, replay-safe by construction (seed 004).

    Every save and every intent is computed from the event and working memory
    only, never from a long-term read, so a replayed activation writes and
    emits the same bytes however far the store has moved on.
    """
    count = int(ctx.memory.get("n") or b"0") + 1
    ctx.memory.set("n", str(count).encode())
    note = ctx.payload.decode()
    longterm = ctx.memory.longterm
    longterm.save("profile", json.dumps({"last": note, "n": count}, sort_keys=True).encode())
    longterm.save(f"note/{count:04d}", note.encode())
    ctx.emit("journaled", {"n": count, "note": note})


#: (entity_key, seq, event_id, start_s, end_s) of every `timed` activation, in end order.
TIMED: list[tuple[bytes, int, str, float, float]] = []


async def timed(ctx: AgentContext) -> None:
    """Sleeps a latency derived from the event and records when it ran (engine order tests)."""
    start = time.monotonic()
    await asyncio.sleep((zlib.crc32(ctx.event.event_id.encode() + ctx.entity_key) % 20) / 1000)
    TIMED.append((ctx.entity_key, ctx.seq, ctx.event.event_id, start, time.monotonic()))
    ctx.emit("ran", {"seq": ctx.seq, "event": ctx.event.event_id, "t": ctx.now_ms})


async def steady(ctx: AgentContext) -> None:
    """`timed` with one fixed 40 ms latency, like a model call: spans overlap if run at once."""
    start = time.monotonic()
    await asyncio.sleep(0.04)
    TIMED.append((ctx.entity_key, ctx.seq, ctx.event.event_id, start, time.monotonic()))
    ctx.emit("ran", {"seq": ctx.seq, "event": ctx.event.event_id, "t": ctx.now_ms})


async def ask(ctx: AgentContext) -> None:
    """Asks the model about the event and emits the answer (suspension tests)."""
    who, text = ctx.entity_key.decode(), ctx.payload.decode()
    reply = await ctx.model.acomplete([{"role": "user", "content": f"{who}: {text}"}])
    ctx.emit("answer", {"seq": ctx.seq, "text": reply.text})


async def two_calls(ctx: AgentContext) -> None:
    """Two model calls per activation (a retry after the second must replay the first)."""
    text = ctx.payload.decode()
    first = await ctx.model.acomplete([{"role": "user", "content": f"first {text}"}])
    second = await ctx.model.acomplete([{"role": "user", "content": f"second {text}"}])
    ctx.emit("answers", [first.text, second.text])


#: Entities whose `paced_journal` agent is running in this process (read by the Flink faults).
RUNNING: set[bytes] = set()


async def paced_journal(ctx: AgentContext) -> None:
    """`journal`, after asking the model about the note, so activations overlap for its latency.

    Keeps `RUNNING` current, so a fault injected in the same worker can tell
    which other entities have an activation in flight.
    """
    RUNNING.add(ctx.entity_key)
    try:
        note = ctx.payload.decode()
        reply = await ctx.model.acomplete([{"role": "user", "content": note}])
        count = int(ctx.memory.get("n") or b"0") + 1
        ctx.memory.set("n", str(count).encode())
        longterm = ctx.memory.longterm
        longterm.save("profile", json.dumps({"last": note, "n": count}, sort_keys=True).encode())
        longterm.save(f"note/{count:04d}", note.encode())
        ctx.emit("journaled", {"n": count, "note": note, "reply": reply.text})
    finally:
        RUNNING.discard(ctx.entity_key)


async def ask_size(ctx: AgentContext) -> None:
    """Asks the model once and emits only the answer's length (large-response tests)."""
    reply = await ctx.model.acomplete([{"role": "user", "content": ctx.payload.decode()}])
    ctx.emit("size", {"chars": len(reply.text)})


async def spender(ctx: AgentContext) -> None:
    """Asks the model as many times as the payload says (``"3"``), each turn a new question.

    An agent that loops on the model, for the token budget tests; ``max_tokens``
    is set so that each call's estimate is known. A payload that is not a
    number asks nothing, so a key can run without the model.
    """
    text = ctx.payload.decode()
    turns = int(text) if text.isdigit() else 0
    answers = [(await ctx.model.acomplete(
        [{"role": "user", "content": f"{ctx.entity_key.decode()} turn {turn}"}],
        max_tokens=10)).text for turn in range(turns)]
    ctx.emit("spent", {"turns": turns, "answers": answers})


def reply_once(ctx: AgentContext) -> None:
    """One model call and exactly one intent per event: outcomes count events one to one."""
    reply = ctx.model.complete([{"role": "user", "content": ctx.payload.decode()}])
    ctx.emit("reply", {"text": reply.text, "seq": ctx.seq})


def profile_v1(ctx: AgentContext) -> None:
    """Keeps the customer's name under ``name``: version 1 of a profile agent (no version)."""
    ctx.memory.set("name", ctx.payload)
    ctx.emit("hello", {"name": ctx.payload.decode()})


def _profile_migrate(old_version: int, memory: Memory) -> None:
    """Version 0 kept ``name``; version 2 keeps ``profile.name`` and a visit count."""
    MIGRATED.append(old_version)
    if old_version == 0:
        name = memory.get("name")
        memory.delete("name")
        if name is not None:
            memory.set("profile.name", name)
        memory.set("profile.visits", b"0")


#: The old versions `profile_v2.migrate` was called with, in order.
MIGRATED: list[int] = []


def profile_v2(ctx: AgentContext) -> None:
    """Version 2: reads ``profile.name``, counts visits; a payload "fail" fails after migrating."""
    visits = int(ctx.memory.get("profile.visits") or b"0") + 1
    ctx.memory.set("profile.visits", str(visits).encode())
    if ctx.payload == b"fail":
        raise RuntimeError("fails after the migration ran")
    name = (ctx.memory.get("profile.name") or b"?").decode()
    ctx.emit("hello", {"name": name, "visits": visits})


profile_v2.memory_version = 2  # type: ignore[attr-defined]
profile_v2.migrate = _profile_migrate  # type: ignore[attr-defined]


def profile_v1_declared(ctx: AgentContext) -> None:
    """Version 1 declared: too old for memory that `profile_v2` wrote."""
    profile_v1(ctx)


profile_v1_declared.memory_version = 1  # type: ignore[attr-defined]
profile_v1_declared.migrate = _profile_migrate  # type: ignore[attr-defined]


def _answer(ctx: AgentContext, system: str) -> str:
    return ctx.model.complete([{"role": "system", "content": system},
                               {"role": "user", "content": ctx.payload.decode()}]).text


def replay_v1(ctx: AgentContext) -> None:
    """The deployed agent of the replay tests: one model call per event."""
    ctx.emit("reply", {"text": _answer(ctx, "You are brief.")})


def replay_new_prompt(ctx: AgentContext) -> None:
    """`replay_v1` with a new system prompt for keys ending in 1: those requests change."""
    prompt = "You are brief and kind." if ctx.entity_key.endswith(b"1") else "You are brief."
    ctx.emit("reply", {"text": _answer(ctx, prompt)})


def replay_new_intent(ctx: AgentContext) -> None:
    """`replay_v1` asking the same, emitting one more field: its intents differ."""
    ctx.emit("reply", {"text": _answer(ctx, "You are brief."), "v": 2})


#: The system prompt of `savepoint_v1`, which `savepoint_v2` still asks with.
SAVEPOINT_PROMPT = "You are brief."
#: The system prompt `savepoint_v2` adds: a request `savepoint_v1` never made.
SAVEPOINT_NEW_PROMPT = "You are brief. Name the customer's mood."


async def _ask_about(ctx: AgentContext, system: str) -> str:
    reply = await ctx.model.acomplete([
        {"role": "system", "content": system},
        {"role": "user", "content": f"{ctx.entity_key.decode()}: {ctx.payload.decode()}"}])
    return reply.text


async def _wait_at_gate(ctx: AgentContext) -> None:
    """Hold the activation, its model call paid, while the event's ``gate`` file exists.

    A test creates the file to have this activation in flight when it stops
    the job, and ``<gate>.reached`` (holding the event id) tells it that the
    call is paid; the stop cancels the wait. Without the file nothing waits.
    """
    import os  # noqa: PLC0415

    gate = ctx.event.attributes.get("gate")
    if not gate or not os.path.exists(gate):
        return
    with open(f"{gate}.reached", "w", encoding="utf-8") as reached:
        reached.write(ctx.event.event_id)
    while os.path.exists(gate):
        await asyncio.sleep(0.02)


async def savepoint_v1(ctx: AgentContext) -> None:
    """The deployed agent of the savepoint tests: one model call per event, a count in memory."""
    reply = await _ask_about(ctx, SAVEPOINT_PROMPT)
    await _wait_at_gate(ctx)
    count = int(ctx.memory.get("n") or b"0") + 1
    ctx.memory.set("n", str(count).encode())
    ctx.emit("answer", {"n": count, "seq": ctx.seq, "reply": reply})


async def savepoint_v2(ctx: AgentContext) -> None:
    """The upgrade of `savepoint_v1`: it counts on in v1's ``n``, keeps a new key, adds a prompt.

    Its first call is v1's request unchanged, so for an event v1 had paid for
    (in flight at the savepoint) it replays; its second, with a new system
    prompt, is a new request, paid once.
    """
    count = int(ctx.memory.get("n") or b"0") + 1
    ctx.memory.set("n", str(count).encode())
    upgraded = int(ctx.memory.get("v2.events") or b"0") + 1
    ctx.memory.set("v2.events", str(upgraded).encode())
    reply = await _ask_about(ctx, SAVEPOINT_PROMPT)
    mood = await _ask_about(ctx, SAVEPOINT_NEW_PROMPT)
    ctx.emit("answer", {"n": count, "seq": ctx.seq, "reply": reply, "mood": mood,
                        "v2_events": upgraded})


# -- tools: a side effect the tests can count --------------------------------------------

#: Where `lookup_order` appends a line per run ("<order> <idempotency key>"); set by a test.
TOOL_LOG_ENV = "BEAM_AGENTS_TEST_TOOL_LOG"
#: Orders whose lookups answer ToolUnavailable until a test clears them.
DOWN_ORDERS: set[str] = set()


def tool_runs(path: str) -> list[tuple[str, str]]:
    """The runs `lookup_order` logged to `path`: ``(order, idempotency key)`` each."""
    with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8") as handle:
        return [tuple(line.split()) for line in handle if line.strip()]  # type: ignore[misc]
    return []


@tool
def lookup_order(order_id: str, idempotency_key: str) -> dict[str, str]:
    """Look up an order's status (and log the run where a test can count it).

    Args:
        order_id: The order's id, as the customer wrote it.
    """
    import os  # noqa: PLC0415

    if order_id in DOWN_ORDERS:
        raise ToolUnavailable("the order service is down")
    if order_id == "explode":
        raise KeyError(order_id)
    log = os.environ.get(TOOL_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{order_id} {idempotency_key}\n")
    return {"order_id": order_id, "status": "shipped" if len(order_id) % 2 else "packed"}


@agent(tools=[lookup_order])
async def order_agent(ctx: AgentContext) -> None:
    """Looks the order up with a tool, then asks the model about it."""
    order_id = ctx.payload.decode()
    assert ctx.tools is not None
    order = await ctx.tools.acall("lookup_order", {"order_id": order_id})
    reply = await ctx.model.acomplete([{"role": "user",
                                        "content": f"order {order_id} is {order['status']}"}])
    ctx.emit("reply", {"order": order, "text": reply.text})


@agent(tools=[lookup_order])
async def paced_tool_journal(ctx: AgentContext) -> None:
    """`paced_journal`, after looking the note up as an order with `lookup_order`.

    The failover tests count the tool's runs, one line per run with its
    idempotency key, in the file `TOOL_LOG_ENV` names.
    """
    assert ctx.tools is not None
    order_id = ctx.payload.decode().replace(" ", "_")
    await ctx.tools.acall("lookup_order", {"order_id": order_id})
    await paced_journal(ctx)


@agent(tools=[lookup_order])
def sync_order_agent(ctx: AgentContext) -> None:
    """A sync agent calling a sync tool: its thread waits while the tool runs."""
    assert ctx.tools is not None
    order = ctx.tools.call("lookup_order", {"order_id": ctx.payload.decode()})
    ctx.emit("order", order)


@agent(tools=[lookup_order])
def order_loop_agent(ctx: AgentContext) -> None:
    """Lets the model call the tool in a loop (sync agent)."""
    result = ctx.model.run_tools([{"role": "user", "content": ctx.payload.decode()}],
                                 max_steps=3)
    ctx.emit("answer", {"text": result.text, "steps": result.steps})


#: The idempotency keys `reconciling_agent`'s reconcile hook was asked about.
RECONCILED: list[str] = []


def _reconcile(key: str) -> dict[str, str]:
    RECONCILED.append(key)
    return {"order_id": "A00", "status": "reconciled"}


@agent(tools=[tool(lookup_order.function, name="lookup_order", reconcile=_reconcile)])
async def reconciling_agent(ctx: AgentContext) -> None:
    """Looks an order up with a tool that can say whether a cut-off call happened."""
    assert ctx.tools is not None
    ctx.emit("order", await ctx.tools.acall("lookup_order", {"order_id": ctx.payload.decode()}))


@agent(tools=[lookup_order])
async def two_lookups_agent(ctx: AgentContext) -> None:
    """Looks the same order up twice (a bound on calls stops the second)."""
    assert ctx.tools is not None
    for _ in range(2):
        await ctx.tools.acall("lookup_order", {"order_id": ctx.payload.decode()})
    ctx.emit("done", {})


def journal_or_fail(ctx: AgentContext) -> None:
    """`journal`, failing (after staging its saves) on a payload that is exactly "fail"."""
    journal(ctx)
    if ctx.payload == b"fail":
        raise RuntimeError(f"asked to fail at {ctx.event.event_id}")


class Crash(BaseException):
    """Not an agent failure: escapes the activation core, so the whole run fails."""


def crash_the_bundle(ctx: AgentContext) -> None:
    """`counter`, but a payload "crash" takes the run down (a worker lost, in a test)."""
    if ctx.payload == b"crash":
        raise Crash("asked to crash the run")
    counter(ctx)


def replay_kinder(ctx: AgentContext) -> None:
    """`replay_v1` with a kinder prompt for keys c1 and c2: their requests change."""
    kind = ctx.entity_key in (b"c1", b"c2")
    ctx.emit("reply", {"text": _answer(ctx, "You are brief and kind." if kind else
                                       "You are brief.")})


def replay_warm(ctx: AgentContext) -> None:
    """`replay_v1` asking with another temperature: every request changes, its prompt does not."""
    reply = ctx.model.complete([{"role": "system", "content": "You are brief."},
                                {"role": "user", "content": ctx.payload.decode()}],
                               temperature=0.9)
    ctx.emit("reply", {"text": reply.text})


# -- waits: a refund waits for a person's approval ---------------------------------------------


def approval_agent(ctx: AgentContext) -> None:
    """A refund request waits 10 s (event time) for approval; answers and timeouts settle it."""
    if ctx.timed_out is not None:
        ctx.emit("refund", {"approved": False, "why": "no answer",
                            "request": ctx.timed_out.request_json()})
    elif ctx.answer is not None:
        ctx.emit("late_answer" if ctx.answer.late else "refund",
                 {"approved": ctx.answer.payload_json().get("approved"),
                  "request": ctx.answer.request_json()})
    else:
        amount = int(ctx.payload.decode())
        ctx.wait_for("approval", deadline_ms=ctx.now_ms + 10_000, request={"amount": amount})


@agent(tools=[lookup_order])
async def order_agent_v2(ctx: AgentContext) -> None:
    """`order_agent` after a change: it looks the order up under another id."""
    assert ctx.tools is not None
    order = await ctx.tools.acall("lookup_order", {"order_id": ctx.payload.decode().lower()})
    reply = await ctx.model.acomplete([{"role": "user",
                                        "content": f"order {order['order_id']} is "
                                                   f"{order['status']}"}])
    ctx.emit("reply", {"order": order, "text": reply.text})
