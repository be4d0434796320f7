"""The exact edges of seed 002's bounds: the TTL as `put` applies it, and the 100 KiB cap.

`get` and `put` both expire an entry once ``now_ms - created_at_ms`` exceeds
21 600 000 ms. A recent read re-stamps ``last_access_ms`` but must not keep an
old entry alive (C11), on the purge `put` runs before enforcing its bounds
(C09) as much as on a lookup. Each test pins one side of one edge, so a purge
keyed on the wrong stamp, or an off-by-one at the boundary, fails a test.
"""

from __future__ import annotations

import hashlib

import pytest

from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob
from beam_agents.errors import StateCorruptError, UnsupportedSchemaVersionError
from beam_agents.model._replay_cache import MAX_BLOB_BYTES, TTL_MS, ReplayCache

NOW = 1_700_000_000_000


def k(name: str) -> str:
    """A realistic 64-hex cache key, derived from a readable name."""
    return hashlib.sha256(name.encode()).hexdigest()


def keys(cache: ReplayCache) -> list[str]:
    return [entry.cache_key for entry in cache.to_blob().entries]


def test_the_ttl_is_six_hours() -> None:
    """Entries live 21 600 000 ms from creation."""
    assert TTL_MS == 6 * 60 * 60 * 1000 == 21_600_000


@pytest.mark.spec("C11")
@pytest.mark.spec("C09")
def test_put_purges_an_entry_created_long_ago_even_if_it_was_read_recently() -> None:
    """THEN put purges by created_at_ms: a read a moment ago does not keep the entry."""
    first = ReplayCache(now_ms=NOW)
    first.put(k("old"), b"created at NOW")
    reader = ReplayCache(first.to_bytes(), now_ms=NOW + TTL_MS - 1)
    assert reader.get(k("old")) is not None  # still live, and now read recently
    stamped = reader.to_blob().entries[0]
    assert (stamped.created_at_ms, stamped.last_access_ms) == (NOW, NOW + TTL_MS - 1)

    later = ReplayCache(reader.to_bytes(), now_ms=NOW + TTL_MS + 1)
    later.put(k("new"), b"n")

    assert keys(later) == [k("new")]
    assert later.to_blob().total_response_bytes == 1


@pytest.mark.spec("C10")
def test_put_keeps_an_entry_whose_age_is_exactly_the_ttl() -> None:
    """The TTL boundary is inclusive on put too: age 21 600 000 ms is live, one more is not."""
    first = ReplayCache(now_ms=NOW)
    first.put(k("edge"), b"e")
    first_plus_one = ReplayCache(now_ms=NOW + 1)
    first_plus_one.put(k("younger"), b"y")
    blob = first.to_blob()
    blob.MergeFrom(first_plus_one.to_blob())
    blob.total_response_bytes = 2

    cache = ReplayCache(blob, now_ms=NOW + TTL_MS + 1)
    cache.put(k("new"), b"n")

    # "edge" is TTL + 1 old and goes; "younger" is exactly TTL old and stays.
    assert keys(cache) == [k("younger"), k("new")]


@pytest.mark.spec("C10")
def test_put_at_exactly_the_ttl_purges_nothing() -> None:
    """An entry created exactly 21 600 000 ms ago survives put, in its LRU place."""
    cache = ReplayCache(now_ms=NOW)
    cache.put(k("edge"), b"e")

    later = ReplayCache(cache.to_bytes(), now_ms=NOW + TTL_MS)
    later.put(k("new"), b"n")

    assert keys(later) == [k("edge"), k("new")]
    hit = later.get(k("edge"))
    assert hit is not None and hit.created_at_ms == NOW


@pytest.mark.spec("C09")
def test_get_one_millisecond_past_the_ttl_is_a_purged_miss_despite_a_recent_read() -> None:
    """THEN the result is None and the entry is absent, though it was last read 1 ms ago."""
    first = ReplayCache(now_ms=NOW)
    first.put(k("old"), b"o")
    reader = ReplayCache(first.to_bytes(), now_ms=NOW + TTL_MS)
    assert reader.get(k("old")) is not None

    later = ReplayCache(reader.to_bytes(), now_ms=NOW + TTL_MS + 1)

    assert later.get(k("old")) is None
    assert keys(later) == []
    assert later.dirty


# -- the 100 KiB cap at its exact edge ----------------------------------------------------


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def with_entry(blob: LlmCacheBlob, key: str, response: bytes, now_ms: int) -> LlmCacheBlob:
    """`blob` plus one full entry, as protobuf itself would size it."""
    grown = LlmCacheBlob()
    grown.CopyFrom(blob)
    grown.entries.add(cache_key=key, response=response, response_digest=sha(response),
                      created_at_ms=now_ms, last_access_ms=now_ms)
    grown.total_response_bytes += len(response)
    return grown


def filler() -> tuple[ReplayCache, int]:
    """A cache holding one 60 000-byte entry, and the response size that fills it exactly."""
    cache = ReplayCache(now_ms=NOW)
    cache.put(k("a"), b"a" * 60_000)
    size = MAX_BLOB_BYTES - cache.size_bytes - 400
    while with_entry(cache.to_blob(), k("b"), b"b" * size, NOW).ByteSize() < MAX_BLOB_BYTES:
        size += 1
    assert with_entry(cache.to_blob(), k("b"), b"b" * size, NOW).ByteSize() == MAX_BLOB_BYTES
    return cache, size


@pytest.mark.spec("C15")
def test_an_insert_that_lands_exactly_on_100_kib_evicts_nothing() -> None:
    """to_blob().ByteSize() may equal 102 400; only exceeding it evicts."""
    cache, size = filler()

    cache.put(k("b"), b"b" * size)

    assert keys(cache) == [k("a"), k("b")]
    assert cache.to_blob().ByteSize() == cache.size_bytes == MAX_BLOB_BYTES


@pytest.mark.spec("C15")
@pytest.mark.parametrize("form", ["bytes", "message"])
def test_an_insert_one_byte_past_100_kib_evicts_the_lru_entry(form: str) -> None:
    """THEN the LRU entry is evicted, the newest is fully stored, and the blob fits."""
    first, size = filler()
    cell = first.to_bytes() if form == "bytes" else first.to_blob()
    cache = ReplayCache(cell, now_ms=NOW)

    stored = cache.put(k("b"), b"b" * (size + 1))

    assert keys(cache) == [k("b")]
    assert not stored.digest_only
    assert cache.to_blob().ByteSize() <= MAX_BLOB_BYTES


@pytest.mark.spec("C04")
def test_a_blob_of_exactly_100_kib_loads_as_a_message_and_as_bytes() -> None:
    """A blob on the cap is one this library writes; loading it is no corruption."""
    cache, size = filler()
    cache.put(k("b"), b"b" * size)

    for cell in (cache.to_blob(), cache.to_bytes()):
        loaded = ReplayCache(cell, now_ms=NOW)
        assert loaded.size_bytes == MAX_BLOB_BYTES and len(loaded) == 2


@pytest.mark.spec("C16")
def test_the_longest_key_whose_digest_entry_fits_the_cap_is_stored_digest_only() -> None:
    """A digest-only entry of exactly 102 400 bytes is stored; one byte more is refused."""
    digest_only = LlmCacheBlob(state_schema_version=1)
    entry = digest_only.entries.add(cache_key="", response_digest=sha(b"r"), digest_only=True,
                                    created_at_ms=NOW, last_access_ms=NOW)
    length = MAX_BLOB_BYTES - digest_only.ByteSize() - 10
    entry.cache_key = "x" * length
    while digest_only.ByteSize() < MAX_BLOB_BYTES:
        length += 1
        entry.cache_key = "x" * length
    assert digest_only.ByteSize() == MAX_BLOB_BYTES

    cache = ReplayCache(now_ms=NOW)
    stored = cache.put("x" * length, b"r" * 10)
    assert stored.digest_only and cache.size_bytes == MAX_BLOB_BYTES
    with pytest.raises(ValueError, match="cannot fit"):
        ReplayCache(now_ms=NOW).put("x" * (length + 1), b"r" * 10)


# -- staging records what it did -----------------------------------------------------------


@pytest.mark.spec("C08")
def test_a_put_dirties_a_fresh_facade() -> None:
    """dirty turns True on the first mutation, or the staged response is never written back."""
    cache = ReplayCache(now_ms=NOW)

    cache.put(k("a"), b"r")

    assert cache.dirty
    assert ReplayCache(cache.to_bytes(), now_ms=NOW).get(k("a")) is not None


@pytest.mark.spec("C06")
def test_put_and_get_return_the_entry_with_its_key_and_stamps() -> None:
    """put stamps created_at_ms and last_access_ms with now_ms; a later get re-stamps access."""
    stored = ReplayCache(now_ms=NOW).put(k("a"), b"r")
    assert (stored.cache_key, stored.response, stored.digest) == (k("a"), b"r", sha(b"r"))
    assert (stored.created_at_ms, stored.last_access_ms) == (NOW, NOW)

    first = ReplayCache(now_ms=NOW)
    first.put(k("a"), b"r")
    hit = ReplayCache(first.to_bytes(), now_ms=NOW + 5).get(k("a"))

    assert hit is not None
    assert (hit.cache_key, hit.created_at_ms, hit.last_access_ms) == (k("a"), NOW, NOW + 5)


@pytest.mark.parametrize(("put_ms", "get_ms"), [
    (0, 100),  # an omitted zero stamp gains a field
    (100, 200),  # one varint byte becomes two
    (127, 128),
    (1_000_000, 1_000_000 + TTL_MS),  # three bytes become four
    (100, 100),  # unchanged
])
def test_size_bytes_stays_exact_when_a_hit_changes_the_stamps_width(put_ms: int,
                                                                     get_ms: int) -> None:
    """size_bytes is exactly to_blob().ByteSize() after a hit, however the stamp re-encodes."""
    first = ReplayCache(now_ms=put_ms)
    first.put(k("a"), b"r" * 10)
    first.put(k("d"), b"d" * 200_000)  # a digest-only entry beside it
    cache = ReplayCache(first.to_blob(), now_ms=get_ms)

    assert cache.get(k("a")) is not None
    assert cache.get(k("d")) is not None

    assert cache.size_bytes == cache.to_blob().ByteSize() == len(cache.to_bytes())


def test_size_bytes_stays_exact_when_a_digest_only_entry_is_replaced() -> None:
    first = ReplayCache(now_ms=NOW)
    first.put(k("d"), b"d" * 200_000)
    cache = ReplayCache(first.to_blob(), now_ms=NOW)

    cache.put(k("d"), b"small")

    assert cache.size_bytes == cache.to_blob().ByteSize()


# -- what loading accepts ---------------------------------------------------------------------


@pytest.mark.parametrize("now_ms", [-(2**63), 2**63 - 1])
def test_now_ms_may_be_any_int64(now_ms: int) -> None:
    """Both ends of the wire schema's int64 range are valid clock values."""
    cache = ReplayCache(now_ms=now_ms)

    assert cache.put(k("a"), b"r").created_at_ms == now_ms


@pytest.mark.parametrize("now_ms", [-(2**63) - 1, 2**63])
def test_now_ms_outside_int64_is_refused(now_ms: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        ReplayCache(now_ms=now_ms)


def test_a_blob_of_digest_only_entries_without_a_version_is_refused() -> None:
    """Entries with no version are reported even when total_response_bytes is 0 (invariant 8)."""
    blob = LlmCacheBlob()
    blob.entries.add(cache_key=k("d"), response_digest=sha(b"r"), digest_only=True,
                     created_at_ms=NOW, last_access_ms=NOW)

    with pytest.raises(UnsupportedSchemaVersionError):
        ReplayCache(blob, now_ms=NOW)


def test_a_repeated_key_is_reported_by_name() -> None:
    blob = LlmCacheBlob(state_schema_version=1)
    for key in ("first", "twice", "twice"):
        blob.entries.add(cache_key=key, response_digest=sha(b""), created_at_ms=NOW,
                         last_access_ms=NOW)

    with pytest.raises(StateCorruptError, match="repeats the cache key 'twice'"):
        ReplayCache(blob, now_ms=NOW)
