"""Regenerate examples/events.jsonl: ~1,000 events over 50 customers, deterministically.

It includes a few malformed lines (each a different kind of bad input), two
``/crash`` messages that the example agent rejects, and one heavy customer
whose attachments push working memory across the soft cap.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "examples" / "events.jsonl"
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
    for offset, bad in enumerate(MALFORMED):
        lines.insert(100 + offset * 180, bad)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} lines to {OUT}")


if __name__ == "__main__":
    main()
