"""Fuzz `redrive_lines` (``cli.py``) over records parsed from fuzzed dead-letter lines.

``beam-agents errors redrive`` turns dead letters back into input lines. The
input is split into lines, each parsed with `error_from_json` (lines that do
not parse are what the `error_json` target covers, and are dropped here);
`redrive_lines` then either returns lines or raises a `BeamAgentsError`
(a record whose event is not an AgentEvent). What it returns must be
input again: a DECODE record's raw element as it was, and for every other
record a JSON line that decodes to the very event the record carried
(less any unknown fields, which a JSON line cannot hold).
"""

from __future__ import annotations

import atheris  # type: ignore[import-untyped]

from fuzz._harness import check, fuzz

with atheris.instrument_imports(include=["beam_agents"]):
    from beam_agents._proto.error_record_pb2 import ErrorRecord
    from beam_agents._proto.event_pb2 import AgentEvent
    from beam_agents.cli import redrivable, redrive_lines
    from beam_agents.errors import BeamAgentsError, EventDecodeError
    from beam_agents.runtime._codec import error_from_json
    from beam_agents.runtime._errors import decode_input
    from fuzz._events import known_fields


def test_one_input(data: bytes) -> None:
    """Redrive the records `data`'s lines hold; check each line is the input it stood for."""
    records = []
    for line in data.split(b"\n"):
        try:
            records.append(error_from_json(line))
        except EventDecodeError:
            continue
    try:
        lines = redrive_lines(records)
    except BeamAgentsError:
        return
    kept = [record for record in records if redrivable(record)]
    check(len(lines) == len(kept), f"{len(lines)} lines for {len(kept)} records")
    for record, line in zip(kept, lines, strict=True):
        if record.stage == ErrorRecord.STAGE_DECODE:
            check(line == record.event.rstrip(b"\n"), "a DECODE record's element changed")
            continue
        original = decode_input(record.event, "proto")
        redriven = decode_input(line, "json")
        if isinstance(original, AgentEvent):
            check(redriven == known_fields(original),
                  "the redriven line decodes to another event")
        else:
            check(isinstance(redriven, ErrorRecord),
                  "an event the proto decoder refuses decodes from its redriven line")


if __name__ == "__main__":
    fuzz(test_one_input)
