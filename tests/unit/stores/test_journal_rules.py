"""The Firestore journal's entity fields and query, as pure functions (no ``google.cloud``).

A read filters on the entity's hex while Firestore can query it (keys of up
to 749 bytes, the layout every version wrote) and on its digest past that;
either way the full stored key must be the one asked for. tests/contract runs
the journal itself on the official emulator.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from beam_agents.errors import JournalCorruptError, StoreLimitError
from beam_agents.model._journal import JournalEntry
from beam_agents.stores._journal_rules import (
    DIGEST_FIELD,
    HEX_FIELD,
    KEY_FIELD,
    MAX_HEX_QUERY_ENTITY_BYTES,
    check_firestore_entry,
    entity_key_digest,
    entry_from_document,
    firestore_max_entity_key_bytes,
    journal_document_fields,
    journal_document_size,
    journal_query,
)
from beam_agents.stores.firestore._rules import MAX_DOCUMENT_BYTES, MAX_QUERY_VALUE_BYTES

STORE = "firestore call journal p/(default)/beam_agents_calls"
COLLECTION = "beam_agents_calls"


def entry(entity: bytes, *, response: bytes = b"answer", digest_only: bool = False) -> JournalEntry:
    return JournalEntry(cache_key=hashlib.sha256(entity + response).hexdigest(),
                        entity_key=entity, seq=3, response=b"" if digest_only else response,
                        sha256=hashlib.sha256(response).digest(), digest_only=digest_only,
                        created_at_ms=1, expire_at_ms=2)


def decode(fields: dict[str, Any] | None, written: JournalEntry, *,
           asked: bytes | None = None) -> JournalEntry:
    return entry_from_document(fields, store=STORE, document_id=written.cache_key,
                               entity_key=written.entity_key if asked is None else asked,
                               seq=written.seq)


def test_749_bytes_is_the_longest_key_whose_hex_a_query_may_filter_on() -> None:
    # A string's size is its UTF-8 bytes + 1; a query value may be 1,500 bytes.
    assert 2 * MAX_HEX_QUERY_ENTITY_BYTES + 1 <= MAX_QUERY_VALUE_BYTES
    assert 2 * (MAX_HEX_QUERY_ENTITY_BYTES + 1) + 1 > MAX_QUERY_VALUE_BYTES
    assert MAX_HEX_QUERY_ENTITY_BYTES == 749


@pytest.mark.parametrize("length", [0, 1, MAX_HEX_QUERY_ENTITY_BYTES])
def test_short_keys_are_queried_and_kept_by_their_hex(length: int) -> None:
    entity = b"\xfe" * length
    fields = journal_document_fields(entry(entity))

    assert journal_query(entity) == (HEX_FIELD, entity.hex())
    assert fields[HEX_FIELD] == entity.hex() and KEY_FIELD not in fields
    assert fields[DIGEST_FIELD] == hashlib.sha256(entity).hexdigest()


@pytest.mark.parametrize("length", [MAX_HEX_QUERY_ENTITY_BYTES + 1, 1_500, 1 << 20])
def test_long_keys_are_queried_by_digest_and_kept_as_bytes(length: int) -> None:
    entity = b"\xfe" * length
    fields = journal_document_fields(entry(entity))

    assert journal_query(entity) == (DIGEST_FIELD, entity_key_digest(entity))
    assert len(journal_query(entity)[1]) == 64
    assert fields[KEY_FIELD] == entity and HEX_FIELD not in fields
    assert fields[DIGEST_FIELD] == hashlib.sha256(entity).hexdigest()


@pytest.mark.parametrize("length", [0, MAX_HEX_QUERY_ENTITY_BYTES,
                                    MAX_HEX_QUERY_ENTITY_BYTES + 1, 100_000])
def test_a_document_reads_back_as_the_entry_it_was_written_from(length: int) -> None:
    written = entry(bytes(range(256)) * (length // 256) + b"k" * (length % 256))

    assert decode(journal_document_fields(written), written) == written


def test_a_document_of_an_earlier_version_without_the_digest_reads_back() -> None:
    written = entry(b"tenant-alice")
    legacy = journal_document_fields(written)
    del legacy[DIGEST_FIELD]

    assert decode(legacy, written) == written


def test_a_digest_match_is_not_enough_the_full_key_must_be_the_one_asked_for() -> None:
    """Invariant 7: a (hypothetical) sha256 collision still hands no entry to another entity."""
    written = entry(b"L" * 1_000)
    fields = journal_document_fields(written)

    with pytest.raises(JournalCorruptError, match="belongs to entity"):
        decode(fields, written, asked=b"M" * 1_000)


def _damaged(entity: bytes, **changes: Any) -> tuple[dict[str, Any], JournalEntry]:
    written = entry(entity)
    fields = journal_document_fields(written)
    for name, value in changes.items():
        if value is None:
            fields.pop(name, None)
        else:
            fields[name] = value
    return fields, written


LONG = b"L" * 1_000


@pytest.mark.parametrize(("entity", "changes", "named"), [
    (b"a", {DIGEST_FIELD: "0" * 64}, "entity_key_digest '000"),
    (b"a", {DIGEST_FIELD: "A" * 64}, "entity_key_digest 'AAA"),
    (b"a", {DIGEST_FIELD: b"\x00" * 32}, "entity_key_digest b'"),
    (b"a", {KEY_FIELD: b"a"}, "both entity_key_hex and entity_key"),
    (b"a", {HEX_FIELD: None}, "entity_key_hex None"),
    (b"a", {HEX_FIELD: "6A"}, "entity_key_hex '6A'"),
    (LONG, {KEY_FIELD: "L" * 1_000}, "entity_key is str, not bytes"),
    (LONG, {KEY_FIELD: b"M" * 1_000}, "is not the sha256 of its entity key"),
    (LONG, {DIGEST_FIELD: None}, "entity_key_digest is missing"),
], ids=["digest-of-another-key", "digest-uppercase", "digest-as-bytes", "hex-and-bytes",
        "no-key", "hex-uppercase", "key-as-text", "key-of-another-entity", "digest-missing"])
def test_a_damaged_entity_field_is_corrupt_naming_the_field(
    entity: bytes, changes: dict[str, Any], named: str
) -> None:
    fields, written = _damaged(entity, **changes)

    with pytest.raises(JournalCorruptError, match=named) as caught:
        decode(fields, written)
    assert (caught.value.store, caught.value.key) == (STORE, written.cache_key)


def test_no_entity_key_is_refused_for_its_length_only_the_document_bounds_it() -> None:
    longest = firestore_max_entity_key_bytes(COLLECTION)
    assert longest == 1_048_238
    fits = entry(b"e" * longest, digest_only=True)
    assert journal_document_size(COLLECTION, fits) == MAX_DOCUMENT_BYTES
    check_firestore_entry(COLLECTION, fits)

    with pytest.raises(StoreLimitError, match=f"{longest + 1}-byte entity key") as caught:
        check_firestore_entry(COLLECTION, entry(b"e" * (longest + 1), digest_only=True))
    assert (caught.value.limit, caught.value.attempted) == (MAX_DOCUMENT_BYTES,
                                                           MAX_DOCUMENT_BYTES + 1)


def test_a_long_key_costs_its_length_once_and_a_short_one_its_hex() -> None:
    short, long = entry(b"e" * MAX_HEX_QUERY_ENTITY_BYTES), entry(b"e" * 1_000)
    empty = entry(b"")

    # hex: 2 characters a byte; bytes: 1, and "entity_key" is 4 bytes shorter a name.
    assert journal_document_size(COLLECTION, short) - journal_document_size(COLLECTION, empty) \
        == 2 * MAX_HEX_QUERY_ENTITY_BYTES
    assert journal_document_size(COLLECTION, long) - journal_document_size(COLLECTION, empty) \
        == 1_000 - 4 - 1
