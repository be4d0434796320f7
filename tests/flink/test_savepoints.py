"""Day-two operations on a standalone cluster: stop with a savepoint, rescale, upgrade, restore.

A production job is stopped with a savepoint and restored at another
parallelism, or with a changed agent, and must lose no memory and pay no
model call twice. These tests do that to the native job on the two-task-
manager cluster of ``conftest``, as an operator would: ``flink run -d`` to
submit, the stop-with-savepoint that ``flink stop --savepointPath`` sends
(the REST call itself, so the stop lands where the test means it to), and
``flink run -s <savepoint>`` to restore.

The model is an OpenAI-compatible server in the test process with 200 ms of
latency: what it counts outlives every worker, stop and restore, so it counts
exactly what was paid. Events run as they arrive (``--event_order arrival``),
and each key's backpressure (`KeyedEngine.wait_for_room`, holding the input
once a key has ``HOLD_INPUT_AT`` = 2 events queued) paces the file source, so
the source is still reading when a stop comes: each event carries 32 KiB of
attributes, so the network buffers between the source and the agent hold a
few events, not the file. (Without them the source reads the whole file at
once, its end fires the end-of-input drain, and a stop waits behind it.)

Each stop has one activation in flight with its call already paid: the
event's ``gate`` attribute names a file, and while it exists the agent
(`tests.agents.savepoint_v1`) waits after its call (see `_wait_at_gate`). The
gated event is the last of its key, so no later event of the key waits
behind it. Other activations in flight at a stop are cut off mid-call or
not, as the stop finds them; the assertions bound those by what was in
flight.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from beam_agents.flink import build_job, environment, parse_args
from beam_agents.flink._job import UIDS
from tests._http import LocalServer, chat_completion, send_json
from tests.agents import SAVEPOINT_NEW_PROMPT, SAVEPOINT_PROMPT
from tests.flink.conftest import (
    FLINK_HOME,
    REPO,
    _cluster_post_mortem,
    _run_to_end,
    flink_run,
    part_lines,
    replace_lost_task_managers,
)
from tests.flink.test_journal_failover import _peer_closed

pytestmark = pytest.mark.timeout(400)

JOB = REPO / "templates" / "flink" / "agent_job.py"
MODEL_LATENCY_MS = 200
#: Activations a subtask runs at once: small, so the input is read slowly and
#: the bound on calls in flight at a stop is tight.
MAX_IN_FLIGHT = 2
#: Each event's padding: large enough that the network buffers hold few events.
PAD_BYTES = 32 * 1024
_STOP_TIMEOUT_S = 120


@dataclass
class _Call:
    """One request the provider was paid for: what it asked and when, and if it was answered."""

    system: str
    user: str
    started: float
    ended: float = float("inf")
    delivered: bool = False


class _Provider:
    """An OpenAI-compatible model answering ``ok <question>`` after `MODEL_LATENCY_MS`.

    Every request is a paid call. An answer whose worker hung up while it
    waited (a stop closed the operator) is not delivered: that call is paid
    and its activation will ask again after the restore.
    """

    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self._lock = threading.Lock()
        self._server = LocalServer(self._handle)
        self.url = self._server.url

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        messages = json.loads(body)["messages"]
        call = _Call(system=messages[0]["content"], user=messages[-1]["content"],
                     started=time.monotonic())
        with self._lock:
            self.calls.append(call)
        time.sleep(MODEL_LATENCY_MS / 1000)
        try:
            if not _peer_closed(handler.connection):
                send_json(handler, chat_completion(f"ok {call.user}", model="fake"))
                call.delivered = True
        except OSError:  # BrokenPipeError, ConnectionResetError
            pass
        call.ended = time.monotonic()

    def paid(self) -> Counter[tuple[str, str]]:
        """Calls paid, by request (system prompt, question)."""
        with self._lock:
            return Counter((call.system, call.user) for call in self.calls)

    def snapshot(self) -> list[_Call]:
        with self._lock:
            return list(self.calls)

    def __enter__(self) -> _Provider:
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)


# --- the input --------------------------------------------------------------------------------

ENTITIES = [f"customer-{n}" for n in range(8)]
#: Events a key holds queued before it holds the file source (``--hold_input_at``).
HOLD_INPUT_AT = 2


@dataclass(frozen=True)
class _Input:
    """An input file: events per key, and the gated events (each the last of its key)."""

    path: Path
    events: dict[str, int]  # key -> events
    gates: dict[str, tuple[str, Path]]  # gate name -> (the gated event's key, its gate file)

    @property
    def total(self) -> int:
        return sum(self.events.values())


def _write_input(path: Path, events: dict[str, int], gates: dict[str, str]) -> _Input:
    """Events in rounds, one per key per round; `gates` names the keys whose last event is gated.

    Each key's ``n``-th event says ``note n``. A gated event carries its gate
    file's path; the test creates the file to hold the event in flight.
    """
    gate_files = {name: (key, path.parent / f"gate-{name}") for name, key in gates.items()}
    gated = {key: gate for key, gate in gate_files.values()}
    with path.open("w", encoding="utf-8") as out:
        for n in range(max(events.values())):
            for key in ENTITIES:
                if n >= events[key]:
                    continue
                attributes = {"pad": "x" * PAD_BYTES}
                if key in gated and n == events[key] - 1:
                    attributes["gate"] = str(gated[key])
                out.write(json.dumps({"entity_key": key, "event_id": f"{key}-{n}",
                                      "event_time_ms": 1_700_000_000_000 + n,
                                      "payload": f"note {n}", "attributes": attributes}) + "\n")
    return _Input(path=path, events=events, gates=gate_files)


def _question(key: str, n: int) -> str:
    """What the agents ask the model about a key's ``n``-th event."""
    return f"{key}: note {n}"


# --- the cluster ------------------------------------------------------------------------------

#: Why Flink refuses a stop-with-savepoint for a moment, and a second ask succeeds: a
#: task of the job is not running yet (still deployed on a loaded machine), or a
#: bounded source's task is between reading its last split and finishing (a
#: finished task takes part in checkpoints again).
_TRANSIENT_REFUSALS = ("Not all required tasks are currently running",
                       "Checkpoint was declined (task is closing)")


def _rest(address: str, path: str, body: object | None = None) -> dict:
    request = urllib.request.Request(
        f"http://{address}{path}", method="GET" if body is None else "POST",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def _job_state(address: str, job_id: str) -> str:
    return str(_rest(address, f"/jobs/{job_id}")["state"])


def _root_cause(address: str, job_id: str) -> str:
    try:
        history = _rest(address, f"/jobs/{job_id}/exceptions").get("exceptionHistory", {})
        return "\n".join(entry.get("stacktrace", "")[:3000] for entry in history.get("entries", []))
    except OSError as exc:
        return f"(no exceptions: {exc})"


@dataclass
class _Cluster:
    """Submits, stops and restores jobs on the `flink_cluster`; a failure shows its logs."""

    address: str
    env: dict[str, str]
    submitted: list[str] = field(default_factory=list)

    def submit(self, args: Sequence[str], *, savepoint: str | None = None,
               dynamic: Sequence[str] = ()) -> str:
        """``flink run -d [-s savepoint] [-D key=value] --python agent_job.py args``; the job id."""
        replace_lost_task_managers(self.address, self.env)
        command = [str(FLINK_HOME / "bin" / "flink"), "run", "-d", "-m", self.address,
                   *(["-s", savepoint] if savepoint else []),
                   *(item for pair in dynamic for item in ("-D", pair)),
                   "--python", str(JOB), "-pyexec", sys.executable, *args]
        code, output = _run_to_end(command, env=self.env)
        found = re.search(r"JobID ([0-9a-f]{32})", output)
        if code != 0 or found is None:
            raise AssertionError(f"flink run exited {code}:\n{output[-6000:]}\n"
                                 f"{_cluster_post_mortem(self.address, self.env)}")
        self.submitted.append(found.group(1))
        return found.group(1)

    def fail(self, job_id: str, why: str) -> AssertionError:
        return AssertionError(f"{why}\nJob {job_id} is {_job_state(self.address, job_id)}; "
                              f"its exceptions:\n{_root_cause(self.address, job_id)}\n"
                              f"{_cluster_post_mortem(self.address, self.env)}")

    def wait_for(self, job_id: str, path: Path, timeout_s: float = 120) -> None:
        """Wait until `path` exists while the job runs."""
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            state = _job_state(self.address, job_id)
            if state in {"FAILED", "CANCELED", "FINISHED"} or time.monotonic() > deadline:
                raise self.fail(job_id, f"{path.name} did not appear (job {state})")
            time.sleep(0.05)

    def stop(self, job_id: str, directory: Path) -> str:
        """Stop the job with a savepoint into `directory`, as ``flink stop --savepointPath`` does.

        Returns the savepoint's path once the job has finished. A stop asked
        for while one of the job's tasks is still being deployed (a loaded
        machine), or while a bounded source's task is closing, is refused and
        leaves the job running; it is asked again.
        """
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        trigger = self._trigger_stop(job_id, directory)
        while True:
            status = _rest(self.address, f"/jobs/{job_id}/savepoints/{trigger}")
            if status["status"]["id"] == "COMPLETED":
                operation = status.get("operation", {})
                if "location" in operation:
                    break
                refused = str(operation)
                if not any(why in refused for why in _TRANSIENT_REFUSALS) \
                        or time.monotonic() > deadline:
                    raise self.fail(job_id, f"the savepoint failed: {operation}")
                time.sleep(0.5)
                trigger = self._trigger_stop(job_id, directory)
                continue
            if time.monotonic() > deadline:
                raise self.fail(job_id, f"the savepoint did not complete in {_STOP_TIMEOUT_S} s")
            time.sleep(0.1)
        self.wait_finished(job_id)
        return str(operation["location"])

    def _trigger_stop(self, job_id: str, directory: Path) -> str:
        return str(_rest(self.address, f"/jobs/{job_id}/stop",
                         {"targetDirectory": str(directory), "drain": False})["request-id"])

    def wait_finished(self, job_id: str, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while (state := _job_state(self.address, job_id)) != "FINISHED":
            if state in {"FAILED", "CANCELED"} or time.monotonic() > deadline:
                raise self.fail(job_id, f"the job did not finish (it is {state})")
            time.sleep(0.2)


@pytest.fixture
def cluster(flink_cluster: tuple[str, dict[str, str]]) -> Iterator[_Cluster]:
    address, env = flink_cluster
    runs = _Cluster(address, env)
    yield runs
    for job_id in runs.submitted:  # a failed test leaves no job holding slots
        if _job_state(address, job_id) not in {"FINISHED", "FAILED", "CANCELED"}:
            _cluster_post_mortem(address, env)
            break


def _job_args(events: _Input, out: Path, provider: _Provider, *, agent: str,
              parallelism: int) -> list[str]:
    return ["--input_files", str(events.path), "--output_path", str(out / "intents"),
            "--errors_path", str(out / "errors"), "--agent", f"tests.agents:{agent}",
            "--model_provider", "openai", "--model_id", "fake",
            "--model_base_url", provider.url,
            "--call_journal", "sqlite", "--call_journal_path", str(out / "calls.sqlite"),
            "--event_order", "arrival", "--max_in_flight", str(MAX_IN_FLIGHT),
            "--hold_input_at", str(HOLD_INPUT_AT), "--bundle_size", "1",
            "--checkpointing_interval_ms", "1000",
            "--restart_attempts", "0", "--parallelism", str(parallelism),
            "--python_executable", sys.executable]


def _intents(out: Path) -> list[dict]:
    return [json.loads(line) for line in part_lines(out / "intents")]


def _journal_rows(out: Path) -> int:
    with sqlite3.connect(out / "calls.sqlite") as db:
        return int(db.execute("SELECT COUNT(*) FROM call_journal").fetchone()[0])


def _assert_seqs_run_one_to_n(intents: list[dict], events: _Input) -> None:
    """Each key's intents have seqs 1..N, one each: no event lost, none applied twice."""
    seqs: dict[str, list[int]] = {}
    for intent in intents:
        seqs.setdefault(intent["entity_key"], []).append(intent["seq"])
    assert {key: sorted(found) for key, found in seqs.items()} == {
        key: list(range(1, n + 1)) for key, n in events.events.items()}


@dataclass(frozen=True)
class _Stop:
    """What a stop found: when it was asked for and ended, and its savepoint."""

    requested: float
    finished: float
    savepoint: str
    committed: int  # intents committed when the job had stopped
    parallelism: int


def _stop_at_gate(cluster: _Cluster, job_id: str, gate: Path, savepoints: Path, out: Path,
                  parallelism: int) -> _Stop:
    """Wait until the gated activation has paid its call, then stop the job with a savepoint."""
    cluster.wait_for(job_id, Path(f"{gate}.reached"))
    requested = time.monotonic()
    savepoint = cluster.stop(job_id, savepoints)
    return _Stop(requested=requested, finished=time.monotonic(), savepoint=savepoint,
                 committed=len(part_lines(out / "intents")), parallelism=parallelism)


def _repaid_by_stop(provider: _Provider, stops: Sequence[_Stop]) -> list[list[_Call]]:
    """The calls paid twice, each under the stop whose window its first call overlapped.

    A stop's window runs from the stop request to the job's end: a call that
    overlapped none of them is in the last list (and fails the test).
    """
    first: dict[tuple[str, str], _Call] = {}
    repaid: list[list[_Call]] = [[] for _ in range(len(stops) + 1)]
    for call in sorted(provider.snapshot(), key=lambda c: c.started):
        ident = (call.system, call.user)
        if ident not in first:
            first[ident] = call
            continue
        earlier = first[ident]
        windows = [i for i, stop in enumerate(stops)
                   if earlier.started <= stop.finished and earlier.ended >= stop.requested]
        repaid[windows[0] if windows else len(stops)].append(earlier)
    return repaid


def _in_flight(provider: _Provider, stop: _Stop) -> int:
    """Calls open when the stop was asked for: started, and not yet answered."""
    return sum(1 for call in provider.snapshot()
               if call.started <= stop.requested <= call.ended)


# --- the tests --------------------------------------------------------------------------------

def test_every_operator_has_a_uid_and_the_fixed_max_parallelism() -> None:
    """Each node of the job's graph has its uid (savepoints map state by uid) and 128 key groups."""
    options, config = parse_args(["--input_files", "in.jsonl", "--output_path", "out/i",
                                  "--errors_path", "out/e", "--agent", "tests.agents:counter",
                                  "--parallelism", "2"])
    env = environment(options)
    build_job(env, options, config)
    graph = env._generate_stream_graph(False)
    nodes = graph.getStreamNodes().iterator()
    found = []
    while nodes.hasNext():
        node = nodes.next()
        found.append((str(node.getOperatorName()), str(node.getTransformationUID()),
                      node.getMaxParallelism()))
    assert sorted(found) == sorted([
        ("Source: ReadJsonl", UIDS["source"], 128),
        ("Decode", UIDS["decode"], 128),
        ("_stream_key_by_map_operator", UIDS["key_by"], 128),
        ("Activate", UIDS["activate"], 128),
        ("Map", UIDS["decode_errors"], 128),
        ("Map", UIDS["activate_errors"], 128),
        ("WriteIntents: Writer", UIDS["intents_sink"], 128),
        ("WriteIntents: Committer", f"Sink Committer: {UIDS['intents_sink']}", 128),
        ("WriteErrors: Writer", UIDS["errors_sink"], 128),
        ("WriteErrors: Committer", f"Sink Committer: {UIDS['errors_sink']}", 128),
    ])
    assert len(set(UIDS.values())) == len(UIDS)


#: The rescale test's input: six keys of 16 events, one of 4 whose last is the first
#: stop's gate, one of 8 whose last is the second's.
RESCALE_EVENTS = {**dict.fromkeys(ENTITIES[:6], 16), ENTITIES[6]: 4, ENTITIES[7]: 8}


def test_savepoints_rescale_from_1_to_2_and_back_losing_and_repaying_nothing(
        tmp_path: Path, cluster: _Cluster) -> None:
    """Stop at parallelism 1, restore at 2, stop, restore at 1: as if never stopped.

    - The intents of the three runs, as a sorted list of lines, are
      byte-identical to one run of the same input without a stop, and each
      key's seqs run 1..N: memory, replay cache, queue and timers moved with
      their keys to the other subtask and back.
    - The restored source read on where the savepoint stopped: the runs after
      each stop applied more events than keyed state can hold queued.
    - Calls: each event was asked about once, except calls cut off in flight
      at a stop, which are asked again; at most ``max_in_flight`` per subtask
      minus the gated one, which was paid and so replayed from the journal.
    """
    events = _write_input(tmp_path / "events.jsonl", RESCALE_EVENTS,
                          {"first": ENTITIES[6], "second": ENTITIES[7]})
    reference = tmp_path / "reference"
    with _Provider() as provider:
        started = time.monotonic()
        flink_run(cluster.address, cluster.env, JOB,
                  _job_args(events, reference, provider, agent="savepoint_v1", parallelism=2))
        reference_s = time.monotonic() - started
        reference_paid = provider.paid()
    assert part_lines(reference / "errors") == []
    assert len(part_lines(reference / "intents")) == events.total
    assert set(reference_paid.values()) == {1} and len(reference_paid) == events.total

    out, savepoints = tmp_path / "savepointed", tmp_path / "savepoints"
    (_, first), (_, second) = events.gates["first"], events.gates["second"]
    with _Provider() as provider:
        started = time.monotonic()
        first.touch()
        job = cluster.submit(_job_args(events, out, provider, agent="savepoint_v1",
                                       parallelism=1))
        stop_1 = _stop_at_gate(cluster, job, first, savepoints, out, parallelism=1)
        first.unlink()
        second.touch()
        job = cluster.submit(_job_args(events, out, provider, agent="savepoint_v1",
                                       parallelism=2), savepoint=stop_1.savepoint)
        stop_2 = _stop_at_gate(cluster, job, second, savepoints, out, parallelism=2)
        second.unlink()
        job = cluster.submit(_job_args(events, out, provider, agent="savepoint_v1",
                                       parallelism=1), savepoint=stop_2.savepoint)
        cluster.wait_finished(job)
        savepointed_s = time.monotonic() - started
        paid = provider.paid()
        stops = (stop_1, stop_2)
        repaid = _repaid_by_stop(provider, stops)
        in_flight = [_in_flight(provider, stop) for stop in stops]
        cut_off = sum(not call.delivered for call in provider.snapshot())
    print(f"reference: {sum(reference_paid.values())} calls in {reference_s:.0f} s; "
          f"stopped twice: {sum(paid.values())} calls in {savepointed_s:.0f} s; committed at "
          f"the stops: {[stop.committed for stop in stops]} of {events.total}; calls in flight "
          f"at the stops: {in_flight}; answers cut off: {cut_off}; paid again: "
          f"{[len(calls) for calls in repaid[:-1]]}")

    # The same intents, byte for byte, with no event lost or applied twice.
    assert part_lines(out / "errors") == []
    assert part_lines(out / "intents") == part_lines(reference / "intents")
    _assert_seqs_run_one_to_n(_intents(out), events)
    # Mid-input: each stop left events for the next run, more than keyed state
    # can hold queued (HOLD_INPUT_AT per key), so the restored source read on.
    queued_at_most = HOLD_INPUT_AT * len(ENTITIES)
    assert stop_1.committed + queued_at_most < stop_2.committed
    assert stop_2.committed + queued_at_most < events.total

    # No call paid twice but those cut off in flight at a stop.
    assert set(paid) == set(reference_paid)
    assert set(paid.values()) <= {1, 2}
    assert repaid[-1] == [], "a call was paid again outside any stop"
    for stop, calls, open_calls in zip(stops, repaid, in_flight, strict=False):
        # The gated activation holds a slot with its call answered.
        assert open_calls <= MAX_IN_FLIGHT * stop.parallelism - 1
        assert len(calls) <= MAX_IN_FLIGHT * stop.parallelism - 1, calls
    assert sum(paid.values()) == events.total + sum(len(calls) for calls in repaid)
    # The gated activations had paid their calls; restored, they replayed them.
    for key in (ENTITIES[6], ENTITIES[7]):
        assert paid[(SAVEPOINT_PROMPT, _question(key, events.events[key] - 1))] == 1
    assert _journal_rows(out) == events.total


#: The upgrade test's input: seven keys of 8 events and one of 3, whose last is the gate.
UPGRADE_EVENTS = {**dict.fromkeys(ENTITIES[:7], 8), ENTITIES[7]: 3}


def test_an_upgraded_agent_keeps_memory_pays_its_new_requests_once_and_replays_the_rest(
        tmp_path: Path, cluster: _Cluster) -> None:
    """Stop `savepoint_v1` with a savepoint; restore `savepoint_v2`, in a graph chained otherwise.

    - Memory carries over: v2 counts on from the ``n`` v1 wrote (every
      intent's ``n`` equals its seq, 1..N per key across the upgrade), and
      its own new key counts only the events v2 ran.
    - The changed request is paid: v2's new system prompt is a new cache key,
      asked exactly once for each event v2 ran.
    - The unchanged request replays: v2 also asks v1's request as it was.
      For the gated event, which v1 had paid for when the stop came, it is
      served from the journal, not paid again; for any other event v2 ran it
      is paid once, or not at all if v1 had paid for it too.
    - Restored with operator chaining off, every operator's position-derived
      id would differ: the savepoint restores because each has a uid.
    """
    events = _write_input(tmp_path / "events.jsonl", UPGRADE_EVENTS, {"upgrade": ENTITIES[7]})
    out, savepoints = tmp_path / "upgraded", tmp_path / "savepoints"
    gated_key, gate = events.gates["upgrade"]
    gated_question = _question(gated_key, events.events[gated_key] - 1)
    started = time.monotonic()
    with _Provider() as old:
        gate.touch()
        job = cluster.submit(_job_args(events, out, old, agent="savepoint_v1", parallelism=2))
        stop = _stop_at_gate(cluster, job, gate, savepoints, out, parallelism=2)
        gate.unlink()
        in_flight = _in_flight(old, stop)
        cut_off = sum(not call.delivered for call in old.snapshot())
    with _Provider() as new:
        job = cluster.submit(_job_args(events, out, new, agent="savepoint_v2", parallelism=2),
                             savepoint=stop.savepoint,
                             dynamic=["pipeline.operator-chaining.enabled=false"])
        cluster.wait_finished(job)
    seconds = time.monotonic() - started
    old_paid, new_paid = old.paid(), new.paid()

    assert part_lines(out / "errors") == []
    intents = _intents(out)
    _assert_seqs_run_one_to_n(intents, events)
    answers = [(intent["entity_key"], json.loads(intent["payload"])) for intent in intents]
    upgraded = [(key, answer) for key, answer in answers if "mood" in answer]
    print(f"upgrade: {len(answers) - len(upgraded)} events ran on v1 ({sum(old_paid.values())} "
          f"calls), {len(upgraded)} on v2 ({sum(new_paid.values())} calls), committed at the "
          f"stop: {stop.committed}, calls in flight at the stop: {in_flight}, answers cut off: "
          f"{cut_off}; {seconds:.0f} s")
    # Memory: v2's count goes on from v1's, and its own key starts at 1.
    assert all(answer["n"] == answer["seq"] for _, answer in answers)
    for key in ENTITIES:
        mine = sorted(answer["v2_events"] for k, answer in upgraded if k == key)
        assert mine == list(range(1, len(mine) + 1)), key
    # Mid-input: v1 had committed some events of every key, v2 ran the rest.
    assert 0 < stop.committed == len(answers) - len(upgraded) < events.total
    assert all(any(k == key and answer["n"] > 1 for k, answer in upgraded) for key in ENTITIES)

    questions = [_question(key, answer["seq"] - 1) for key, answer in upgraded]
    # The new prompt: paid once for each event v2 ran, and never by v1.
    assert Counter({(system, q): n for (system, q), n in new_paid.items()
                    if system == SAVEPOINT_NEW_PROMPT}) == Counter(
        (SAVEPOINT_NEW_PROMPT, q) for q in questions)
    assert all(system == SAVEPOINT_PROMPT for system, _ in old_paid)
    # v1's request: the gated event's was paid before the stop and replays;
    # none is paid more than once by each version, and v2 pays again only
    # what v1 had in flight at the stop.
    assert gated_question in questions
    assert old_paid[(SAVEPOINT_PROMPT, gated_question)] == 1
    assert new_paid[(SAVEPOINT_PROMPT, gated_question)] == 0
    unchanged = {q for (system, q) in new_paid if system == SAVEPOINT_PROMPT}
    assert set(old_paid.values()) == {1} and set(new_paid.values()) == {1}
    assert unchanged <= set(questions)
    replayed = set(questions) - unchanged
    assert gated_question in replayed and replayed <= {q for _, q in old_paid}
    assert in_flight <= MAX_IN_FLIGHT * stop.parallelism - 1
    paid_twice = unchanged & {q for _, q in old_paid}
    assert len(paid_twice) <= MAX_IN_FLIGHT * stop.parallelism - 1, paid_twice
    assert sum(new_paid.values()) == 2 * len(questions) - len(replayed)
