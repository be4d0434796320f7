"""A customer-support agent: the main job's example.

Per customer (the entity key) it keeps:

* ``conversation``: a bounded ring of the last 20 turns (user and assistant);
* ``profile``: a scalar JSON profile (name, plan, message count);
* ``doc:<event id>``: attachments a customer sends, which is what makes a
  heavy customer's memory cross the soft cap, where the default
  `LruCompactor` evicts the oldest attachments.

Each message is answered through ``ctx.model`` (replay-cached, so a retried
activation never pays twice) and emitted as a ``reply`` intent. With
long-term memory configured, the profile is also saved there, so it outlives
the bounded working memory. The save is computed from the event and working
memory only, never from a long-term read of the same key (the replay
discipline of seed 000).

It also acts:

* a message that names an order (``order A1042``) makes it look the order up
  with its tool, `lookup_order`, in the shop's table (``examples/orders.csv``,
  loaded into SQLite); the call is recorded, so a retry never runs it again;
* a refund request for that order is triaged with structured output (a
  `RefundTriage` the model must answer in); up to $100 it is granted at once,
  above it the agent waits for a person's approval, an event whose
  ``answers`` is ``refund-<order>``, for up to an hour of event time.

Input payloads are JSON objects: ``{"text": "...", "name": "...",
"plan": "...", "attachment": "..."}``; all but ``text`` are optional, and an
approval's is ``{"approved": true}``. The text ``/crash`` makes the agent
raise, to show a dead letter.
"""

from __future__ import annotations

import csv
import json
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any, Literal

import pydantic

from beam_agents.runtime import AgentContext, agent, tool

HISTORY_TURNS = 20
#: Refunds above this wait for a person's approval.
AUTO_REFUND_CENTS = 10_000
APPROVAL_WAIT_MS = 3_600_000
ORDER = re.compile(r"\border\s+#?(A\d{4})\b", re.IGNORECASE)
ORDERS_CSV = Path(__file__).with_name("orders.csv")

_shop: sqlite3.Connection | None = None
_shop_lock = threading.Lock()


def _orders() -> sqlite3.Connection:
    """The shop's order table, loaded once per worker into an in-memory SQLite database."""
    global _shop  # noqa: PLW0603 - one read-only table per worker process
    with _shop_lock:
        if _shop is None:
            shop = sqlite3.connect(":memory:", check_same_thread=False)
            shop.execute("CREATE TABLE orders (order_id TEXT PRIMARY KEY, customer TEXT, "
                         "status TEXT, total_cents INTEGER)")
            with ORDERS_CSV.open(encoding="utf-8") as rows:
                shop.executemany("INSERT INTO orders VALUES (:order_id, :customer, :status, "
                                 ":total_cents)", csv.DictReader(rows))
            _shop = shop
        return _shop


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order in the shop's database.

    Args:
        order_id: The order's id, like A1042.
    """
    shop = _orders()
    with _shop_lock:
        row = shop.execute("SELECT customer, status, total_cents FROM orders WHERE "
                                "order_id = ?", (order_id.upper(),)).fetchone()
    if row is None:
        return {"order_id": order_id, "status": "unknown"}
    return {"order_id": order_id.upper(), "customer": row[0], "status": row[1],
            "total_cents": int(row[2])}


class RefundTriage(pydantic.BaseModel):
    """How the model reads a refund request."""

    reason: Literal["damaged", "late", "changed_mind", "other"]
    urgent: bool


class UnsupportedCommandError(ValueError):
    """The customer sent a command this agent does not handle."""


def _profile(ctx: AgentContext) -> dict[str, Any]:
    raw = ctx.memory.get("profile")
    return json.loads(raw) if raw else {"messages": 0}


@agent(tools=[lookup_order])
def agent(ctx: AgentContext) -> None:
    """Answer one customer message, settle a refund, or take an approval."""
    if ctx.timed_out is not None:
        ctx.emit("refund", {**ctx.timed_out.request_json(), "approved": False,
                            "why": "no approval within the hour"})
        return
    if ctx.answer is not None:
        approved = bool(ctx.answer.payload_json().get("approved"))
        kind = "refund" if not ctx.answer.late else "late_approval"
        ctx.emit(kind, {**(ctx.answer.request_json() or {}), "approved": approved,
                        "by": ctx.answer.payload_json().get("by")})
        return
    message = ctx.payload_json()
    text = str(message.get("text", ""))
    if text.startswith("/crash"):
        raise UnsupportedCommandError(f"command {text!r} is not supported")

    profile = _profile(ctx)
    for field in ("name", "plan"):
        if field in message:
            profile[field] = message[field]
    profile["messages"] += 1
    ctx.memory.set("profile", json.dumps(profile, sort_keys=True).encode())
    if "attachment" in message:
        ctx.memory.set(f"doc:{ctx.event.event_id}", str(message["attachment"]).encode())

    ctx.memory.append("conversation", json.dumps({"role": "user", "content": text}).encode(),
                      max_items=HISTORY_TURNS)
    history = [json.loads(turn) for turn in ctx.memory.ring("conversation")]
    who = profile.get("name", "a customer")
    facts = _act_on_order(ctx, text)
    system = {"role": "system",
              "content": f"You are a support agent helping {who} on the "
                         f"{profile.get('plan', 'free')} plan. Be brief.{facts}"}
    reply = ctx.model.complete([system, *history], temperature=0.2, max_tokens=200)
    ctx.memory.append("conversation",
                      json.dumps({"role": "assistant", "content": reply.text}).encode(),
                      max_items=HISTORY_TURNS)

    if ctx.memory.has_longterm:
        ctx.memory.longterm.save("profile", json.dumps(profile, sort_keys=True).encode())
    ctx.emit("reply", {"customer": ctx.entity_key.decode(errors="replace"), "text": reply.text,
                       "turns": len(history)})


def _act_on_order(ctx: AgentContext, text: str) -> str:
    """Look up an order the message names and settle a refund it asks for; what to tell."""
    found = ORDER.search(text)
    if found is None or ctx.tools is None:
        return ""
    order = ctx.tools.call("lookup_order", {"order_id": found.group(1)})
    if order["status"] == "unknown" or "refund" not in text.lower():
        return f" Order {order['order_id']} is {order['status']}."
    triage = ctx.model.complete(
        [{"role": "system", "content": "Classify this refund request."},
         {"role": "user", "content": text}], response_schema=RefundTriage, temperature=0)
    request = {"order_id": order["order_id"], "amount_cents": order["total_cents"],
               "reason": triage.parsed.reason}
    if order["total_cents"] <= AUTO_REFUND_CENTS:
        ctx.emit("refund", {**request, "approved": True, "by": "policy"})
        return f" A refund of order {order['order_id']} was granted."
    ctx.wait_for(f"refund-{order['order_id']}", deadline_ms=ctx.now_ms + APPROVAL_WAIT_MS,
                 request=request)
    return f" A refund of order {order['order_id']} awaits approval."
