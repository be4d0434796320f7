"""Regenerate examples/events.jsonl and examples/orders.csv, deterministically.

About 1,000 events over 50 customers. They include a few malformed lines
(each a different kind of bad input), two ``/crash`` messages that the example
agent rejects, one heavy customer whose attachments push working memory across
the soft cap, questions about orders (which the agent looks up with its tool),
refund requests (large ones wait for a person's approval) and the approvals
that answer some of them: in time, too late, or never.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "examples" / "events.jsonl"
ORDERS = OUT.with_name("orders.csv")
STATUSES = ["shipped", "delivered", "packed", "returned"]
HOUR_MS = 3_600_000
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
NAMES = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Leslie",
         "Margaret"]
PLANS = ["free", "pro", "team"]
TOPICS = ["my invoice is wrong", "how do I reset my password", "the export is slow",
          "can I add a teammate", "the app crashes on login", "where is my order",
          "please cancel my subscription", "I want to upgrade", "the API returns 429",
          "thanks, that worked"]
MALFORMED = [
    "this line is not JSON",
    json.dumps({"event_id": "bad-1", "event_time_ms": START_MS, "payload": {"text": "hi"}}),
    json.dumps({"entity_key": "customer-01", "event_id": "bad-2", "event_time_ms": -5,
                "payload": {"text": "time travel"}}),
    json.dumps({"entity_key": "customer-02", "event_id": "bad-3", "event_time_ms": START_MS,
                "payload": {"text": "hi"}, "priority": "high"}),
    json.dumps(["an", "array"]),
]


def main() -> None:
    rng = random.Random(20260101)
    lines: list[str] = []
    clock = START_MS
    for n in range(1000):
        clock += rng.randint(500, 30_000)
        customer = 49 if n % 10 == 0 else rng.randint(0, 48)  # customer-49 is the heavy one
        payload: dict[str, object] = {"text": rng.choice(TOPICS)}
        if rng.random() < 0.1:
            payload["name"] = rng.choice(NAMES)
            payload["plan"] = rng.choice(PLANS)
        if n % 40 == 0:
            payload["attachment"] = f"log-{n}:" + "".join(
                rng.choice("abcdef0123456789") for _ in range(9_000)) * 4
        if n in (333, 777):
            payload["text"] = "/crash now"
        lines.append(json.dumps({"entity_key": f"customer-{customer:02d}",
                                 "event_id": f"evt-{n:04d}", "event_time_ms": clock,
                                 "payload": payload}, sort_keys=True))
    orders = {f"A{1000 + n}": (f"customer-{rng.randint(0, 48):02d}", rng.choice(STATUSES),
                                  rng.choice([1_999, 4_500, 8_900, 12_500, 24_000, 39_900]))
              for n in range(200)}
    ORDERS.write_text("order_id,customer,status,total_cents\n" + "".join(
        f"{order},{customer},{status},{total}\n"
        for order, (customer, status, total) in sorted(orders.items())))
    approvals: list[str] = []
    for n, (order, (customer, _, total)) in enumerate(sorted(orders.items())[:60]):
        asked_at = START_MS + (n + 1) * 250_000
        wants = "refund" if n % 3 == 0 else "where is"
        text = (f"I want a refund for order {order}, it arrived broken" if wants == "refund"
                else f"where is my order {order}?")
        lines.append(json.dumps({"entity_key": customer, "event_id": f"ord-{n:03d}",
                                 "event_time_ms": asked_at, "payload": {"text": text}},
                                sort_keys=True))
        if wants == "refund" and total > 10_000 and n % 2 == 0:
            # A person approves most large refunds within the hour; one too late.
            late = n == 12
            approvals.append(json.dumps({
                "entity_key": customer, "event_id": f"approve-{n:03d}",
                "answers": f"refund-{order}",
                "event_time_ms": asked_at + (2 * HOUR_MS if late else 600_000),
                "payload": {"approved": n % 4 == 0, "by": "ops@example.com"}}, sort_keys=True))
    lines.extend(approvals)
    rng.shuffle(lines)  # arrival order says nothing: each customer runs in event time
    for offset, bad in enumerate(MALFORMED):
        lines.insert(100 + offset * 180, bad)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} lines to {OUT} and {len(orders)} orders to {ORDERS}")


if __name__ == "__main__":
    main()
