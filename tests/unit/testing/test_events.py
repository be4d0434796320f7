"""Event builders: a built event is exactly what the pipeline decodes from the same line."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_agents.hosting import decode_event_json
from beam_agents.runtime import AgentEvent, encode_payload
from beam_agents.testing import DEFAULT_EVENT_TIME_MS, make_event, make_events

pytestmark = pytest.mark.timeout(60)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10)


def test_a_bytes_payload_is_kept_as_it_is() -> None:
    event = make_event(b"user-1", b"\x00\xffraw", event_id="e-9", event_time_ms=5)
    assert event == AgentEvent(entity_key=b"user-1", event_id="e-9", event_time_ms=5,
                               payload=b"\x00\xffraw")


def test_a_str_payload_and_key_are_utf8() -> None:
    event = make_event("kunde-ü", "grüß dich")
    assert event.entity_key == "kunde-ü".encode()
    assert event.payload == "grüß dich".encode()


def test_a_json_payload_is_canonical_as_the_decoder_makes_it() -> None:
    payload = {"text": "hi", "b": [1, 2.5, None, True], "a": {"z": "ü", "y": 0}}
    line = json.dumps({"entity_key": "user-7", "event_id": "e-1", "event_time_ms": 17,
                       "payload": payload, "attributes": {"channel": "web"}})

    event = make_event("user-7", payload, event_id="e-1", event_time_ms=17,
                       attributes={"channel": "web"})

    assert event == decode_event_json(line)
    assert event.payload == b'{"a":{"y":0,"z":"\xc3\xbc"},"b":[1,2.5,null,true],"text":"hi"}'


@given(json_values)
def test_any_json_payload_encodes_as_the_pipeline_encodes_it(payload: Any) -> None:
    line = json.dumps({"entity_key": "k", "event_time_ms": 1, "payload": payload})
    event = make_event("k", payload, event_time_ms=1)
    assert event == decode_event_json(line)
    if not isinstance(payload, str):
        assert event.payload == encode_payload(payload)


def test_a_key_that_is_not_utf8_round_trips_as_bytes() -> None:
    assert make_event(b"\xfe\xff").entity_key == b"\xfe\xff"


def test_defaults_are_fixed_and_match_a_minimal_line() -> None:
    event = make_event("k")
    assert event == decode_event_json(
        json.dumps({"entity_key": "k", "event_time_ms": DEFAULT_EVENT_TIME_MS}))
    assert (event.event_id, event.payload, dict(event.attributes)) == ("", b"", {})


@pytest.mark.parametrize(("kwargs", "error", "names"), [
    ({"entity_key": 7}, TypeError, "entity_key"),
    ({"entity_key": ""}, ValueError, "entity_key"),
    ({"entity_key": b""}, ValueError, "entity_key"),
    ({"entity_key": "k", "payload": {1, 2}}, TypeError, "payload"),
    ({"entity_key": "k", "payload": {"x": math.nan}}, ValueError, "payload"),
    ({"entity_key": "k", "payload": "\ud800"}, ValueError, "payload"),
    ({"entity_key": "k", "payload": ["\ud800"]}, ValueError, "payload"),
    ({"entity_key": "k", "event_id": 3}, TypeError, "event_id"),
    ({"entity_key": "k", "event_time_ms": -1}, ValueError, "event_time_ms"),
    ({"entity_key": "k", "event_time_ms": 1.5}, TypeError, "event_time_ms"),
    ({"entity_key": "k", "event_time_ms": True}, TypeError, "event_time_ms"),
    ({"entity_key": "k", "attributes": ["a"]}, TypeError, "attributes"),
    ({"entity_key": "k", "attributes": {"a": 1}}, TypeError, "attributes"),
])
def test_bad_arguments_raise_an_error_naming_the_argument(
        kwargs: dict[str, Any], error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=names):
        make_event(**kwargs)


def test_make_events_numbers_ids_and_spaces_times() -> None:
    events = make_events("user-1", ["a", {"text": "b"}, b"c"], start_ms=1_000, step_ms=250)

    assert [e.event_id for e in events] == ["e-1", "e-2", "e-3"]
    assert [e.event_time_ms for e in events] == [1_000, 1_250, 1_500]
    assert [e.payload for e in events] == [b"a", b'{"text":"b"}', b"c"]
    assert {e.entity_key for e in events} == {b"user-1"}


def test_make_events_equals_make_event_per_payload() -> None:
    events = make_events(b"k", ["x", "y"], attributes={"src": "test"})
    assert events == (
        make_event(b"k", "x", event_id="e-1", event_time_ms=DEFAULT_EVENT_TIME_MS,
                   attributes={"src": "test"}),
        make_event(b"k", "y", event_id="e-2", event_time_ms=DEFAULT_EVENT_TIME_MS + 1_000,
                   attributes={"src": "test"}),
    )


def test_make_events_of_nothing_is_empty() -> None:
    assert make_events("k", []) == ()


@pytest.mark.parametrize(("kwargs", "error", "names"), [
    ({"payloads": "hello"}, TypeError, "payloads"),
    ({"payloads": b"hello"}, TypeError, "payloads"),
    ({"payloads": 3}, TypeError, "payloads"),
    ({"payloads": ["ok", object()]}, TypeError, r"payloads\[1\]"),
    ({"payloads": [], "start_ms": -5}, ValueError, "start_ms"),
    ({"payloads": [], "step_ms": 0}, ValueError, "step_ms"),
    ({"payloads": [], "step_ms": 1.0}, TypeError, "step_ms"),
])
def test_make_events_rejects_bad_arguments_by_name(
        kwargs: dict[str, Any], error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=names):
        make_events("k", **kwargs)
