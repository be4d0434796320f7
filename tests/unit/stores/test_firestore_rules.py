"""Firestore's id, layout and size rules, checked as pure functions (no ``google.cloud``).

The store applies these before any I/O; tests/firestore runs the same store
against a Firestore-protocol server.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_agents.errors import ConfigError, MemoryContractError, ScopeViolation, StoreLimitError
from beam_agents.memory._store import MAX_KEY_BYTES, LongtermRecord
from beam_agents.stores.firestore._rules import (
    LONG_ENTITY_ID_PREFIX,
    MAX_DOCUMENT_BYTES,
    MAX_HEX_ID_ENTITY_BYTES,
    MAX_ID_BYTES,
    MAX_REQUEST_BYTES,
    MAX_WRITES_PER_COMMIT,
    ORDER_FIELD,
    check_commit,
    check_entity_key,
    decode_document_id,
    document_fields,
    document_path,
    document_size,
    encode_document_id,
    entity_document_id,
    order_range,
    record_from_fields,
    require_collection_id,
)

ENTITY = b"\x00entity\xff"
COLLECTION = "beam_agents"


def _is_key(text: str) -> bool:
    return not any(0xD800 <= ord(c) < 0xE000 for c in text) and (
        len(text.encode("utf-8")) <= MAX_KEY_BYTES)


#: Valid record keys: any text, and text made of the characters the escapes touch.
record_keys = st.one_of(
    st.text(min_size=1),
    st.text(alphabet="%/._sdux", min_size=1, max_size=12),
).filter(_is_key)


def rec(key: str, value: bytes = b"v", *, entity: bytes = ENTITY) -> LongtermRecord:
    return LongtermRecord(entity_key=entity, key=key, value=value, seq=1,
                          updated_at_ms=1_700_000_000_000)


def is_valid_document_id(document_id: str) -> bool:
    """Firestore's documented constraints on document ids."""
    return (
        bool(document_id)
        and "/" not in document_id
        and document_id not in (".", "..")
        and re.fullmatch(r"__.*__", document_id, re.DOTALL) is None
        and len(document_id.encode("utf-8")) <= MAX_ID_BYTES
    )


def test_the_rules_import_no_google_client() -> None:
    probe = ("import sys, beam_agents.stores.firestore._rules, beam_agents.stores._config; "
             "print(','.join(sorted(m for m in sys.modules if m.startswith(('google.cloud.', "
             "'google.api_core', 'google.auth')))))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ""


# -- document ids -----------------------------------------------------------------------


@given(key=record_keys)
def test_a_key_encodes_to_a_valid_id_that_decodes_back(key: str) -> None:
    document_id = encode_document_id(key)

    assert is_valid_document_id(document_id)
    assert decode_document_id(document_id) == key


@given(pair=st.lists(record_keys, min_size=2, max_size=2, unique=True))
def test_distinct_keys_get_distinct_ids(pair: list[str]) -> None:
    first, second = pair

    assert encode_document_id(first) != encode_document_id(second)


@pytest.mark.parametrize(("key", "document_id"), [
    (".", "%d"), ("..", "%d."), ("/", "%s"), ("a/b", "a%sb"), ("__x__", "%u_x__"),
    ("%", "%%"), ("_", "%u"), ("plain", "plain"),
])
def test_ids_firestore_refuses_are_escaped(key: str, document_id: str) -> None:
    assert encode_document_id(key) == document_id


@pytest.mark.parametrize("key", ["%" * MAX_KEY_BYTES, "/" * MAX_KEY_BYTES, "é" * 256])
def test_the_longest_keys_stay_within_the_id_limit(key: str) -> None:
    assert len(encode_document_id(key).encode("utf-8")) <= 2 * MAX_KEY_BYTES < MAX_ID_BYTES


@pytest.mark.parametrize("key", ["", "\ud800", "x" * (MAX_KEY_BYTES + 1)])
def test_an_invalid_key_has_no_document_id(key: str) -> None:
    with pytest.raises(ValueError, match="long-term key"):
        encode_document_id(key)


@pytest.mark.parametrize("document_id", [".", "..", "/", "a/b", "__x__", "", "%", "%x", "a%d"])
def test_decoding_refuses_ids_the_encoding_never_produces(document_id: str) -> None:
    with pytest.raises(ValueError, match="not an encoded long-term key"):
        decode_document_id(document_id)


@pytest.mark.parametrize(("entity_key", "document_id"),
                         [(b"", "-"), (b"\x00\xff", "00ff"), (b"-", "2d")])
def test_entity_ids_are_hex_with_a_marker_for_the_empty_key(entity_key: bytes,
                                                            document_id: str) -> None:
    assert entity_document_id(entity_key) == document_id


def test_a_record_lives_under_its_entity_in_the_records_collection() -> None:
    assert document_path("c", b"\x01", "a/b") == ("c", "01", "records", "a%sb")


def test_entity_ids_are_hex_up_to_750_bytes_and_a_digest_past_them() -> None:
    """Keys that had a hex id keep it; longer ones, refused before, get a digest id."""
    longest_hex = b"\xab" * MAX_HEX_ID_ENTITY_BYTES
    assert entity_document_id(longest_hex) == longest_hex.hex()
    assert len(entity_document_id(longest_hex)) == MAX_ID_BYTES

    for length in (MAX_HEX_ID_ENTITY_BYTES + 1, 10_000, 1 << 20):
        entity = b"\xab" * length
        document_id = entity_document_id(entity)
        assert document_id == LONG_ENTITY_ID_PREFIX + hashlib.sha256(entity).hexdigest()
        assert is_valid_document_id(document_id)
        assert re.fullmatch(r"[0-9a-f]*", document_id) is None  # never a hex id
        check_entity_key(entity)  # no length is refused
    with pytest.raises(TypeError):
        check_entity_key("text")  # type: ignore[arg-type]


def test_long_entity_keys_sharing_a_prefix_get_distinct_ids() -> None:
    base = b"p" * 5_000
    ids = {entity_document_id(base + tail) for tail in (b"", b"a", b"b", b"ab")}

    assert len(ids) == 4


def test_a_document_of_a_long_entity_counts_its_digest_id_and_the_full_key() -> None:
    entity = b"e" * 1_000
    record = LongtermRecord(entity_key=entity, key="k", value=b"xyz", seq=1, updated_at_ms=2)
    # As test_document_size_follows_firestores_size_rules, with the 71-character id
    # (72 bytes) for "01" (3) and the 1,000-byte key for b"\x01" (1).
    assert document_size("c", record) == 140 + (72 - 3) + (1_000 - 1)
    assert document_path("c", entity, "k")[1] == entity_document_id(entity)


def test_a_document_too_large_for_its_entity_key_says_so() -> None:
    entity = b"e" * MAX_DOCUMENT_BYTES
    with pytest.raises(StoreLimitError, match=f"{MAX_DOCUMENT_BYTES}-byte entity key"):
        check_commit(COLLECTION, {"k": rec("k", entity=entity)})


# -- collection ids ---------------------------------------------------------------------


@pytest.mark.parametrize("collection", [
    "", "/", "a/b", ".", "..", "____", "__x__", "__\n__", "\ud800", "x" * (MAX_ID_BYTES + 1),
    "é" * (MAX_ID_BYTES // 2 + 1), 5, None,
])
def test_collection_ids_firestore_refuses_are_a_config_error(collection: object) -> None:
    with pytest.raises(ConfigError, match=r"FirestoreLongtermConfig\.collection") as caught:
        require_collection_id(collection)

    assert caught.value.field == "collection"


@pytest.mark.parametrize("collection", [
    "beam_agents", "__", "_x_", "...", "x" * MAX_ID_BYTES, "é" * (MAX_ID_BYTES // 2)])
def test_collection_ids_within_the_rules_are_accepted(collection: str) -> None:
    require_collection_id(collection)


# -- documents --------------------------------------------------------------------------


@given(key=record_keys, value=st.binary(max_size=64))
def test_a_document_reads_back_as_the_record_it_was_written_from(key: str, value: bytes) -> None:
    record = rec(key, value)

    read = record_from_fields(ENTITY, encode_document_id(key), document_fields(record),
                              where="doc")

    assert read.SerializeToString(deterministic=True) == record.SerializeToString(
        deterministic=True)


def test_a_document_of_another_entity_is_a_scope_violation() -> None:
    fields = document_fields(rec("k", entity=b"other"))

    with pytest.raises(ScopeViolation):
        record_from_fields(ENTITY, "k", fields, where="doc")


@pytest.mark.parametrize("fields", [
    None,
    {"entity_key": ENTITY},
    {**document_fields(rec("k")), ORDER_FIELD: "zz"},
    {**document_fields(rec("k")), ORDER_FIELD: "6a"},  # "j": not the key of id "k"
])
def test_a_document_that_is_not_a_record_is_a_contract_error(fields: object) -> None:
    with pytest.raises(MemoryContractError, match="doc"):
        record_from_fields(ENTITY, "k", fields, where="doc")  # type: ignore[arg-type]


@given(prefix=st.text(max_size=4).filter(_is_key), key=record_keys)
def test_the_order_range_holds_exactly_the_keys_with_the_prefix(prefix: str, key: str) -> None:
    low, high = order_range(prefix)

    assert (low <= document_fields(rec(key))[ORDER_FIELD] < high) == key.startswith(prefix)


# -- sizes ------------------------------------------------------------------------------


def test_document_size_follows_firestores_size_rules() -> None:
    # Name: "c" 2 + "01" 3 + "records" 8 + "k" 2 + 16 = 31. Fields: entity_key 11+1,
    # key 4+2, key_utf8_hex 13+3, value 6+3, seq 4+8, updated_at_ms 14+8 = 77. Plus 32.
    record = LongtermRecord(entity_key=b"\x01", key="k", value=b"xyz", seq=1, updated_at_ms=2)

    assert document_size("c", record) == 140


@given(key=record_keys, value=st.binary(max_size=64))
def test_each_value_byte_adds_one_byte_to_the_document(key: str, value: bytes) -> None:
    base = document_size(COLLECTION, rec(key, b""))

    assert document_size(COLLECTION, rec(key, value)) == base + len(value)


def filling(key: str, size: int) -> LongtermRecord:
    """A record of `key` whose document is exactly `size` bytes."""
    return rec(key, b"x" * (size - document_size(COLLECTION, rec(key, b""))))


def test_a_document_of_exactly_the_limit_is_accepted_and_one_byte_more_is_refused() -> None:
    check_commit(COLLECTION, {"big": filling("big", MAX_DOCUMENT_BYTES)})

    with pytest.raises(StoreLimitError) as caught:
        check_commit(COLLECTION, {"a": rec("a"), "big": filling("big", MAX_DOCUMENT_BYTES + 1)})

    assert (caught.value.limit, caught.value.attempted) == (MAX_DOCUMENT_BYTES,
                                                           MAX_DOCUMENT_BYTES + 1)
    message = str(caught.value)
    assert "'big'" in message and str(MAX_DOCUMENT_BYTES) in message
    assert str(MAX_DOCUMENT_BYTES + 1) in message


def test_500_writes_fit_one_commit_and_501_do_not() -> None:
    batch = {f"k{i}": rec(f"k{i}") for i in range(MAX_WRITES_PER_COMMIT + 1)}
    check_commit(COLLECTION, dict(list(batch.items())[:MAX_WRITES_PER_COMMIT]))

    with pytest.raises(StoreLimitError) as caught:
        check_commit(COLLECTION, batch)

    assert (caught.value.limit, caught.value.attempted) == (MAX_WRITES_PER_COMMIT,
                                                           MAX_WRITES_PER_COMMIT + 1)
    assert f"{MAX_WRITES_PER_COMMIT + 1} pending upserts" in str(caught.value)


def per_write_overhead() -> int:
    """What a commit counts per write beyond its document, read off a refused commit."""
    count = 11
    batch = {f"k{i:02d}": filling(f"k{i:02d}", MAX_DOCUMENT_BYTES) for i in range(count)}
    with pytest.raises(StoreLimitError) as caught:
        check_commit(COLLECTION, batch)
    assert caught.value.limit == MAX_REQUEST_BYTES
    assert caught.value.attempted % count == 0
    return caught.value.attempted // count - MAX_DOCUMENT_BYTES


def test_a_commit_of_exactly_the_request_limit_is_accepted_and_one_byte_more_is_refused() -> None:
    count = 11
    room = MAX_REQUEST_BYTES - count * per_write_overhead()
    sizes = [room // count] * (count - 1) + [room - room // count * (count - 1)]
    batch = {f"k{i:02d}": filling(f"k{i:02d}", size) for i, size in enumerate(sizes)}
    check_commit(COLLECTION, batch)

    batch["k10"] = filling("k10", sizes[-1] + 1)
    with pytest.raises(StoreLimitError) as caught:
        check_commit(COLLECTION, batch)

    assert (caught.value.limit, caught.value.attempted) == (MAX_REQUEST_BYTES,
                                                           MAX_REQUEST_BYTES + 1)
    assert str(MAX_REQUEST_BYTES + 1) in str(caught.value)
