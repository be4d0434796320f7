"""Fuzz `error_from_json`, the reader of dead-letter lines (``runtime/_codec.py``).

``beam-agents errors show`` and ``errors redrive`` read files people may
have edited by hand. A line either parses or raises `EventDecodeError`; a
line that parses re-encodes (`error_to_json`) to a canonical line that reads
back as the same record.
"""

from __future__ import annotations

import atheris  # type: ignore[import-untyped]

from fuzz._harness import check, fuzz

with atheris.instrument_imports(include=["beam_agents"]):
    from beam_agents.errors import EventDecodeError
    from beam_agents.runtime._codec import error_from_json, error_to_json


def test_one_input(data: bytes) -> None:
    """Parse `data` as one errors-output line; re-encode what parses and read it back."""
    try:
        record = error_from_json(data)
    except EventDecodeError:
        return
    line = error_to_json(record)
    again = error_from_json(line)
    check(again == record, "the re-encoded line reads back as another record")
    check(error_to_json(again) == line, "the re-encoded line is not canonical")


if __name__ == "__main__":
    fuzz(test_one_input)
