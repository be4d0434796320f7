"""Whatever bytes arrive, each element ends as an event or one precise DECODE record (invariant 8).

Every bad line a new user's events file held, one per case, plus the two
that used to escape: bytes that are not UTF-8, and an element over
``max_event_bytes``. Also the size limit's range, its flag, the records'
JSON round trip and redrive of a record cut to a prefix.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from beam_agents.cli import redrivable, redrive_lines
from beam_agents.errors import ConfigError
from beam_agents.hosting import (
    InputDecoder,
    agent_config_from_flags,
    decode_input,
    error_from_json,
    error_to_json,
)
from beam_agents.runtime import MAX_EVENT_BYTES, AgentConfig, AgentEvent, ErrorRecord
from beam_agents.runtime._lines import OVERSIZE_PREFIX_BYTES
from beam_agents.testing import make_event
from tests._hostile import BAD_LINES

AGENT = "tests.agents:counter"

class Counts:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def inc(self, namespace: str, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def peak(self, namespace: str, name: str, value: int) -> None:
        pass

    def observe(self, namespace: str, name: str, value: int) -> None:
        pass

    def note(self, namespace: str, name: str, text: str) -> None:
        pass


@pytest.mark.parametrize("line", list(BAD_LINES), ids=range(len(BAD_LINES)))
def test_each_bad_line_is_a_decode_record_carrying_its_bytes(line: bytes) -> None:
    record = decode_input(line, "json", max_event_bytes=MAX_EVENT_BYTES)
    assert isinstance(record, ErrorRecord)
    assert record.stage == ErrorRecord.STAGE_DECODE
    assert BAD_LINES[line] in record.message
    assert record.event == line and not record.event_bytes  # whole: it can be redriven
    # The record survives its own JSON line, bytes included.
    assert error_from_json(error_to_json(record)) == record


def test_an_element_of_exactly_the_limit_is_decoded_and_one_byte_more_is_refused() -> None:
    limit = 2048
    head = b'{"entity_key": "c1", "event_time_ms": 1, "payload": "'
    exact = head + b"x" * (limit - len(head) - 2) + b'"}'
    assert len(exact) == limit
    assert isinstance(decode_input(exact, "json", max_event_bytes=limit), AgentEvent)
    over = exact[:-2] + b'x"}'
    record = decode_input(over, "json", max_event_bytes=limit)
    assert isinstance(record, ErrorRecord) and record.stage == ErrorRecord.STAGE_DECODE


def test_an_oversize_element_keeps_its_size_digest_and_a_bounded_prefix() -> None:
    data = b'{"entity_key": "c1", "payload": "' + b"y" * 5_000_000 + b'"}'
    record = decode_input(data, "json", max_event_bytes=MAX_EVENT_BYTES)
    assert isinstance(record, ErrorRecord)
    assert record.stage == ErrorRecord.STAGE_DECODE
    assert f"event of {len(data)} bytes exceeds max_event_bytes {MAX_EVENT_BYTES}" in (
        record.message)
    assert record.event == data[:OVERSIZE_PREFIX_BYTES]
    assert record.event_bytes == len(data)
    assert record.event_sha256 == hashlib.sha256(data).digest()
    line = error_to_json(record)
    assert len(line) < 3 * OVERSIZE_PREFIX_BYTES  # the errors output stays small
    assert json.loads(line)["event_sha256"] == hashlib.sha256(data).hexdigest()
    assert error_from_json(line) == record


def test_the_decoder_counts_every_element_and_each_oversize_one() -> None:
    metrics = Counts()
    decode = InputDecoder("json", metrics, max_event_bytes=1024)
    decode(b"x" * 1025)
    decode(b"\xff")
    decode(make_event("c1", b"ok").SerializeToString())  # not JSON: a DECODE record too
    assert metrics.counts == {"events": 3, "errors_decode": 3, "oversize_events": 1}


def test_a_record_cut_to_a_prefix_is_not_redriven_and_a_whole_one_is() -> None:
    cut = decode_input(b"z" * 2000, "json", max_event_bytes=1024)
    whole = decode_input(b"not json", "json", max_event_bytes=1024)
    assert isinstance(cut, ErrorRecord) and isinstance(whole, ErrorRecord)
    assert not redrivable(cut) and redrivable(whole)
    assert redrive_lines([cut, whole]) == [b"not json"]


@pytest.mark.parametrize(("value", "ok"), [(1023, False), (1024, True), (1 << 26, True),
                                           ((1 << 26) + 1, False)])
def test_max_event_bytes_accepts_1024_to_64_mib(value: int, ok: bool) -> None:
    if ok:
        assert AgentConfig(agent=AGENT, max_event_bytes=value).max_event_bytes == value
    else:
        with pytest.raises(ConfigError, match=r"max_event_bytes \(--max_event_bytes\)") as info:
            AgentConfig(agent=AGENT, max_event_bytes=value)
        assert info.value.field == "AgentConfig.max_event_bytes"


def test_the_flag_sets_the_limit_and_the_default_is_one_mib() -> None:
    assert AgentConfig(agent=AGENT).max_event_bytes == 1_048_576
    config = agent_config_from_flags({"agent": AGENT, "max_event_bytes": 4096})
    assert config.max_event_bytes == 4096


def test_text_elements_decode_from_the_bytes_their_source_read() -> None:
    """A source that hands over text: latin-1 gives back the file's bytes; nothing raises."""
    metrics = Counts()
    latin = InputDecoder("json", metrics, charset="latin-1")
    record = latin(b'{"entity_key": "c1", "event_time_ms": 7, "payload": "caf\xe9"}'.decode(
        "latin-1"))
    assert isinstance(record, ErrorRecord) and "not UTF-8: byte 0xe9" in record.message
    text = InputDecoder("json", metrics)
    assert isinstance(text('{"entity_key": "c1", "event_time_ms": 1}'), AgentEvent)
    lone = text('{"entity_key": "c1", "event_time_ms": 1, "payload": "\ud800"}')
    assert isinstance(lone, ErrorRecord) and lone.stage == ErrorRecord.STAGE_DECODE
