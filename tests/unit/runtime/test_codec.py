"""JSON forms of events, intents and error records: lossless, canonical, typed errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_agents.errors import EventDecodeError
from beam_agents.hosting import (
    decode_event_json,
    error_from_json,
    error_to_json,
    event_to_json,
    intent_to_json,
)
from beam_agents.runtime import AgentEvent, ErrorRecord, Intent
from beam_agents.runtime._codec import decode_event

events = st.builds(
    AgentEvent, entity_key=st.binary(min_size=1, max_size=20), event_id=st.text(max_size=10),
    event_time_ms=st.integers(min_value=0, max_value=2**62), payload=st.binary(max_size=40),
    attributes=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))


@given(events)
def test_event_json_round_trips_any_bytes(event: AgentEvent) -> None:
    assert decode_event_json(event_to_json(event)) == event


def test_a_json_payload_object_is_encoded_canonically() -> None:
    event = decode_event_json('{"entity_key":"u","event_time_ms":1,"payload":{"b":1,"a":[2]}}')
    assert event.payload == b'{"a":[2],"b":1}'


@pytest.mark.parametrize(("line", "field"), [
    ('{"event_time_ms": 1}', "entity_key"),
    ('{"entity_key": "u", "event_time_ms": "1"}', "event_time_ms"),
    ('{"entity_key": "u", "event_time_ms": -1}', "event_time_ms"),
    ('{"entity_key": "u", "event_time_ms": 1, "colour": "red"}', "colour"),
    ('{"entity_key": "u", "event_time_ms": 1, "attributes": {"a": 1}}', "attributes"),
    ('{"entity_key": "u", "event_time_ms": 1, "payload_b64": "%%%"}', "payload_b64"),
    ('{"entity_key": "", "event_time_ms": 1}', "entity_key"),
    ('{"entity_key": "u", "event_time_ms": 1, "payload": NaN}', "payload"),
])
def test_a_bad_event_names_the_field(line: str, field: str) -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode_event_json(line)
    assert caught.value.field == field


@pytest.mark.parametrize("data", [b"not json", b"[1]", b"\xff\xfe"])
def test_undecodable_input_is_an_event_decode_error(data: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode_event(data, "json")


def test_a_proto_event_decodes_and_garbage_does_not() -> None:
    event = AgentEvent(entity_key=b"k", event_time_ms=5)
    assert decode_event(event.SerializeToString(), "proto") == event
    with pytest.raises(EventDecodeError):
        decode_event(b"\xff\xff", "proto")


def test_intent_json_is_canonical_and_binary_safe() -> None:
    intent = Intent(entity_key=b"\xff", seq=3, index=1, kind="k", payload=b"hi", event_id="e")
    assert json.loads(intent_to_json(intent)) == {
        "entity_key_b64": "/w==", "seq": 3, "index": 1, "kind": "k", "payload": "hi",
        "event_id": "e"}


def test_error_records_round_trip_through_json() -> None:
    record = ErrorRecord(stage=ErrorRecord.STAGE_TIMEOUT, error_type="x.Y", message="m",
                         traceback="tb", retriable=True, entity_key=b"u", seq=4,
                         event=b"\x00raw", event_id="e")
    assert error_from_json(error_to_json(record)) == record
    with pytest.raises(EventDecodeError):
        error_from_json(b'{"stage": "STAGE_NOPE"}')
