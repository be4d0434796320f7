"""The shared primitives: canonical JSON, varints and the int range check."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_agents._canonical import canonical_json
from beam_agents._checks import require_int
from beam_agents._proto.memory_pb2 import MemoryEntry
from beam_agents._varint import MAX_VARINT_BYTES, decode_varint, encode_varint, varint_size
from beam_agents.errors import ConfigError

INT64 = st.integers(-(2**63), 2**63 - 1)
UINT64 = st.integers(0, 2**64 - 1)
EDGES = [0, 1, 127, 128, 16_383, 16_384, 2**35 - 1, 2**35, 2**63 - 1, 2**64 - 1]

json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _reference(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


# -- canonical JSON -----------------------------------------------------------


def test_canonical_json_sorts_keys_at_every_depth() -> None:
    assert canonical_json({"b": 1, "a": {"d": 2, "c": 3}}) == b'{"a":{"c":3,"d":2},"b":1}'


def test_canonical_json_is_compact() -> None:
    assert canonical_json({"a": [1, 2], "b": None}) == b'{"a":[1,2],"b":null}'


def test_canonical_json_keeps_non_ascii_text_as_utf8() -> None:
    assert canonical_json({"ключ": "日本 é"}) == '{"ключ":"日本 é"}'.encode()


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_canonical_json_rejects_nan_and_infinity(number: float) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json({"x": [number]})


@given(json_data)
def test_canonical_json_is_the_reference_json_dumps_form(value: object) -> None:
    assert canonical_json(value) == _reference(value)
    assert canonical_json(value, check_circular=False) == _reference(value)


@given(st.dictionaries(st.text(), st.integers(), max_size=8))
def test_canonical_json_ignores_insertion_order(mapping: dict[str, int]) -> None:
    reversed_mapping = dict(reversed(list(mapping.items())))
    assert canonical_json(reversed_mapping) == canonical_json(mapping)


# -- varints ------------------------------------------------------------------


@pytest.mark.parametrize("value", EDGES)
def test_varint_edges_round_trip_in_their_minimal_size(value: int) -> None:
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0) == (value, len(encoded))
    assert len(encoded) == varint_size(value) == max(1, math.ceil(value.bit_length() / 7))


@given(UINT64, st.binary(max_size=3), st.binary(max_size=3))
def test_varint_round_trips_at_any_position(value: int, before: bytes, after: bytes) -> None:
    encoded = encode_varint(value)
    data = before + encoded + after
    assert decode_varint(data, len(before)) == (value, len(before) + len(encoded))
    assert varint_size(value) == len(encoded)


@given(INT64)
def test_varint_is_what_protobuf_writes_for_an_int64(value: int) -> None:
    wire = MemoryEntry(last_access_ms=value).SerializeToString()
    assert (b"\x18" + encode_varint(value) if value else b"") == wire
    assert varint_size(value) == len(encode_varint(value))


@given(st.integers(-(2**63), -1))
def test_a_negative_int64_takes_ten_bytes_and_reads_back_unsigned(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == varint_size(value) == MAX_VARINT_BYTES
    assert decode_varint(encoded, 0) == (value + 2**64, MAX_VARINT_BYTES)


def test_decoding_a_truncated_varint_raises_index_error() -> None:
    with pytest.raises(IndexError):
        decode_varint(b"\x80\x80", 0)


def test_decoding_a_varint_longer_than_the_limit_raises_value_error() -> None:
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        decode_varint(b"\xff" * 11, 0)
    with pytest.raises(ValueError, match="longer than 2 bytes"):
        decode_varint(b"\x80\x80\x01", 0, max_bytes=2)


def test_decoding_accepts_a_padded_varint_and_says_where_it_ends() -> None:
    assert decode_varint(b"\x85\x00\x07", 0) == (5, 2)


# -- require_int --------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 1000])
def test_require_int_accepts_both_bounds(value: int) -> None:
    assert require_int(value, name="X.n", low=1, high=1000) == value


@pytest.mark.parametrize("value", [0, 1001])
def test_require_int_rejects_just_outside_either_bound(value: int) -> None:
    with pytest.raises(ConfigError) as caught:
        require_int(value, name="X.n", low=1, high=1000, field="n")
    assert str(caught.value) == f"X.n must be an int in [1, 1000], got {value}"
    assert caught.value.field == "n"


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None])
def test_require_int_rejects_bools_and_non_ints(value: object) -> None:
    with pytest.raises(ConfigError, match=r"X\.n must be an int in \[0, 1\]"):
        require_int(value, name="X.n", low=0, high=1)


def test_require_int_without_a_high_bound_says_so() -> None:
    assert require_int(10**30, name="X.n", low=0) == 10**30
    with pytest.raises(ConfigError, match=r"^X\.n must be an int >= 0, got -1$"):
        require_int(-1, name="X.n", low=0)


def test_require_int_raises_the_callers_error_and_wording() -> None:
    with pytest.raises(ValueError, match=r"^Handle seq must be an int >= 0, got -1$") as caught:
        require_int(-1, name="Handle seq", low=0, error=ValueError)
    assert type(caught.value) is ValueError
    with pytest.raises(ConfigError, match=r"^--size must be >= 1, got 0$"):
        require_int(0, name="--size", low=1, noun="", field="size")
