"""A new user's events file at its worst: every kind of bad line, beside good ones.

Shared by the unit, Beam and Flink tests of invariant 8, so each engine is
held to the same file: lines read = intents + dead letters, whatever the bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from beam_agents.hosting import decode_input, error_to_json
from beam_agents.runtime import MAX_EVENT_BYTES

__all__ = ["BAD_LINES", "HUGE_LINE_BYTES", "expected_dead_letters", "write_hostile_file"]

#: line -> what its DECODE record's message must name
BAD_LINES = {
    b'{"entity_key": "c1", "event_time_ms": "soon"}': "event_time_ms",
    b'{"event_time_ms": 5}': "entity_key",
    b"not json at all": "not JSON",
    b'{"entity_key_b64": "%%%", "event_time_ms": 5}': "entity_key_b64 is not valid base64",
    b'{"entity_key": "", "event_time_ms": 5}': "entity_key must be non-empty",
    b'{"entity_key": "c1", "event_time_ms": 5, "colour": "red"}': "unknown event field(s): colour",
    b"[1, 2, 3]": "must be a JSON object, got list",
    b'{"entity_key": "c1", "event_time_ms": -5}': "event_time_ms",
    b'{"entity_key": "c1", "event_time_ms": 1e400}': "event_time_ms",
    b'{"entity_key": "c1", "event_time_ms": 7, "payload": "caf\xe9"}':
        "not UTF-8: byte 0xe9 at offset 56",
    b"\xff\xfe{}": "not UTF-8: byte 0xff at offset 0",
    b"": "not JSON",
}
#: The size of the one huge line: 50 MB, far over the 1 MiB default limit.
HUGE_LINE_BYTES = 50 * 1024 * 1024


def _good(n: int) -> bytes:
    return json.dumps({"entity_key": f"customer-{n % 3}", "event_id": f"e{n}",
                       "event_time_ms": 1_700_000_000_000 + n, "payload": f"note {n}"}).encode()


def _huge() -> bytes:
    head = b'{"entity_key": "customer-0", "event_time_ms": 1, "payload": "'
    return head + b"x" * (HUGE_LINE_BYTES - len(head) - 2) + b'"}'


def write_hostile_file(path: Path, *, good: int = 12, huge: bool = True) -> list[bytes]:
    """Write good lines interleaved with every bad one (and the huge one); returns the bad."""
    bad = [*BAD_LINES, *([_huge()] if huge else [])]
    lines = [_good(n) for n in range(good)]
    for index, line in enumerate(bad):
        lines.insert(1 + index * 2 % max(len(lines), 1), line)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return bad


def expected_dead_letters(bad: list[bytes]) -> list[bytes]:
    """The DECODE records every engine must write for `bad`, as sorted JSON lines."""
    return sorted(error_to_json(decode_input(line, "json", max_event_bytes=MAX_EVENT_BYTES))
                  for line in bad)
