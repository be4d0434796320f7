"""ReplayCache: staging, LRU, TTL, the 64-entry bound and the 100 KiB cap (seed 002, C04-C17)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob, LlmCacheEntry
from beam_agents.errors import StateCorruptError, UnsupportedSchemaVersionError
from beam_agents.model._replay_cache import (
    MAX_BLOB_BYTES,
    MAX_ENTRIES,
    STATE_SCHEMA_VERSION,
    TTL_MS,
    CachedResponse,
    ReplayCache,
)

NOW = 1_700_000_000_000


def k(name: object) -> str:
    """A realistic 64-hex cache key, derived from a readable name."""
    return hashlib.sha256(str(name).encode()).hexdigest()


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def order(cache: ReplayCache) -> list[str]:
    return [entry.cache_key for entry in cache.to_blob().entries]


def staged(*names: str, now_ms: int = NOW, size: int = 10) -> bytes:
    """A serialized blob holding `names` in LRU order, staged by an earlier activation."""
    cache = ReplayCache(now_ms=now_ms)
    for name in names:
        cache.put(k(name), name.encode() * size)
    return cache.to_blob().SerializeToString()


def fits_in_empty_blob(key: str, size: int, now_ms: int) -> bool:
    """Ground truth from protobuf itself: would the full entry alone fit the cap?"""
    data = b"x" * size
    blob = LlmCacheBlob(state_schema_version=1, total_response_bytes=size)
    blob.entries.add(cache_key=key, response=data, response_digest=sha(data),
                     created_at_ms=now_ms, last_access_ms=now_ms)
    return blob.ByteSize() <= MAX_BLOB_BYTES


# -- scenarios ---------------------------------------------------------------------------


@pytest.mark.spec("C04")
def test_blob_round_trips_through_an_untouched_facade() -> None:
    """THEN the returned blob has field-equal entries in the same order, the same
    total_response_bytes, state_schema_version 1, and dirty is False."""
    earlier = ReplayCache(now_ms=NOW)
    for name in ("a", "b", "c"):
        earlier.put(k(name), name.encode() * 100)
    earlier.put(k("huge"), b"z" * 200_000)  # a digest-only entry round-trips too
    earlier.get(k("a"))
    original = earlier.to_blob()

    cache = ReplayCache(original.SerializeToString(), now_ms=NOW + 1_000)
    blob = cache.to_blob()

    assert list(blob.entries) == list(original.entries)
    assert blob.total_response_bytes == original.total_response_bytes == 300
    assert blob.state_schema_version == 1
    assert cache.dirty is False


def test_to_bytes_is_the_deterministic_serialization_of_to_blob() -> None:
    cache = ReplayCache(now_ms=NOW)
    for name in ("b", "a", "c"):
        cache.put(k(name), name.encode() * 50)
    cache.put(k("huge"), b"z" * 200_000)
    cache.get(k("b"))
    data = cache.to_bytes()
    assert data == cache.to_blob().SerializeToString(deterministic=True)
    assert ReplayCache(data, now_ms=NOW).to_bytes() == data
    assert ReplayCache(now_ms=NOW).to_bytes() == LlmCacheBlob(
        state_schema_version=1).SerializeToString(deterministic=True)


@pytest.mark.spec("C05")
@pytest.mark.parametrize("empty", [None, b"", LlmCacheBlob()])
def test_fresh_facade_produces_a_versioned_empty_blob(empty: LlmCacheBlob | bytes | None) -> None:
    """THEN the result has state_schema_version 1, no entries, total_response_bytes 0,
    and dirty is False."""
    cache = ReplayCache(empty, now_ms=NOW)
    blob = cache.to_blob()
    assert blob.state_schema_version == STATE_SCHEMA_VERSION == 1
    assert len(blob.entries) == 0
    assert blob.total_response_bytes == 0
    assert cache.dirty is False


@pytest.mark.spec("C06")
def test_put_then_get_replays_the_identical_bytes() -> None:
    """THEN the returned entry carries byte-identical response bytes, digest_only is False,
    and the digest equals sha256 of the response."""
    response = b'{"answer": 42, "text": "\xc3\xa9"}'
    cache = ReplayCache(now_ms=NOW)
    cache.put(k("q"), response)
    hit = cache.get(k("q"))
    assert hit is not None
    assert hit.response == response
    assert hit.digest_only is False
    assert hit.digest == sha(response)
    assert hit.hexdigest == hashlib.sha256(response).hexdigest()


@pytest.mark.spec("C07")
def test_a_hit_moves_the_entry_to_most_recently_used() -> None:
    """THEN to_blob() emits the order [b, c, a] and a.last_access_ms equals the injected
    now_ms."""
    later = NOW + 5_000
    cache = ReplayCache(staged("a", "b", "c"), now_ms=later)
    assert cache.get(k("a")) is not None
    blob = cache.to_blob()
    assert [e.cache_key for e in blob.entries] == [k("b"), k("c"), k("a")]
    assert blob.entries[-1].last_access_ms == later
    assert blob.entries[-1].created_at_ms == NOW


@pytest.mark.spec("C08")
def test_a_miss_leaves_the_facade_clean() -> None:
    """THEN the result is None and dirty remains False."""
    cache = ReplayCache(staged("a"), now_ms=NOW)
    assert cache.get(k("never stored")) is None
    assert cache.dirty is False


@pytest.mark.spec("C09")
def test_an_expired_entry_is_a_miss_and_is_purged() -> None:
    """THEN the result is None and the entry is absent from to_blob()."""
    cache = ReplayCache(staged("old", "other"), now_ms=NOW + TTL_MS + 1)
    assert cache.get(k("old")) is None
    assert k("old") not in order(cache)
    assert cache.dirty is True  # the purge must be written back


@pytest.mark.spec("C10")
def test_the_ttl_boundary_is_inclusive() -> None:
    """THEN the entry is returned as a live hit."""
    cache = ReplayCache(staged("edge"), now_ms=NOW + TTL_MS)
    hit = cache.get(k("edge"))
    assert hit is not None
    assert hit.response == b"edge" * 10


@pytest.mark.spec("C11")
def test_access_does_not_refresh_ttl() -> None:
    """THEN the second read returns None."""
    shortly_before = ReplayCache(staged("e"), now_ms=NOW + TTL_MS - 60_000)
    assert shortly_before.get(k("e")) is not None
    after = ReplayCache(shortly_before.to_blob(), now_ms=NOW + TTL_MS + 1)
    assert after.get(k("e")) is None


@pytest.mark.spec("C12")
def test_the_65th_insert_evicts_the_least_recently_used_entry() -> None:
    """THEN to_blob() contains exactly 64 entries and the first-staged key is absent."""
    cache = ReplayCache(now_ms=NOW)
    for i in range(65):
        cache.put(k(i), b"r")
    keys = order(cache)
    assert len(keys) == MAX_ENTRIES == 64
    assert k(0) not in keys
    assert keys == [k(i) for i in range(1, 65)]


@pytest.mark.spec("C13")
def test_a_recently_read_entry_survives_eviction() -> None:
    """THEN the first-staged key is still present and the second-staged key is evicted."""
    cache = ReplayCache(now_ms=NOW)
    for i in range(64):
        cache.put(k(i), b"r")
    assert cache.get(k(0)) is not None
    cache.put(k(64), b"r")
    assert k(0) in cache
    assert k(1) not in cache
    assert len(cache) == 64


@pytest.mark.spec("C15")
def test_large_inserts_evict_until_the_blob_fits() -> None:
    """THEN least-recently-used entries are evicted, the newest entry is fully stored, and the
    serialized blob is within the cap."""
    cache = ReplayCache(now_ms=NOW)
    for name in ("first", "second", "third"):
        cache.put(k(name), name.encode()[:1] * 40_000)
    blob = cache.to_blob()
    assert [e.cache_key for e in blob.entries] == [k("second"), k("third")]
    newest = blob.entries[-1]
    assert newest.response == b"t" * 40_000
    assert newest.digest_only is False
    assert blob.ByteSize() <= MAX_BLOB_BYTES


@pytest.mark.spec("C16")
def test_an_oversized_response_becomes_digest_only_without_collateral_eviction() -> None:
    """THEN the new entry is digest-only with response_digest equal to sha256 of the response,
    and every pre-existing entry is still present."""
    cache = ReplayCache(staged("a", "b", size=20_000), now_ms=NOW + 1)
    huge = bytes(range(256)) * 600  # 153,600 bytes: no blob could hold it
    stored = cache.put(k("huge"), huge)
    blob = cache.to_blob()
    assert [e.cache_key for e in blob.entries] == [k("a"), k("b"), k("huge")]
    entry = blob.entries[-1]
    assert entry.digest_only is True
    assert entry.response == b""
    assert entry.response_digest == sha(huge)
    assert stored.digest_only and stored.digest == sha(huge) and stored.response == b""


@pytest.mark.spec("C17")
def test_digest_only_hits_identify_themselves() -> None:
    """THEN the returned entry has digest_only True, empty response bytes, and the original
    digest."""
    huge = b"\x00\xff" * 60_000
    earlier = ReplayCache(now_ms=NOW)
    earlier.put(k("huge"), huge)
    cache = ReplayCache(earlier.to_blob().SerializeToString(), now_ms=NOW + 10)
    hit = cache.get(k("huge"))
    assert hit is not None
    assert hit.digest_only is True
    assert hit.response == b""
    assert hit.digest == sha(huge)


# -- the cap, the bound and expiry in detail ---------------------------------------------


def test_the_largest_response_that_fits_is_kept_whole_and_one_more_byte_is_not() -> None:
    key = k("edge")
    limit = max(n for n in range(102_000, 102_400) if fits_in_empty_blob(key, n, NOW))
    cache = ReplayCache(now_ms=NOW)
    assert cache.put(key, b"x" * limit).digest_only is False
    assert cache.to_blob().ByteSize() == cache.size_bytes <= MAX_BLOB_BYTES
    assert cache.put(key, b"x" * (limit + 1)).digest_only is True
    assert cache.to_blob().ByteSize() == cache.size_bytes


def test_a_digest_only_insert_at_the_bound_evicts_one_entry_for_the_bound() -> None:
    cache = ReplayCache(now_ms=NOW)
    for i in range(64):
        cache.put(k(i), b"r")
    cache.put(k("huge"), b"h" * 150_000)
    assert len(cache) == 64
    assert k(0) not in cache
    assert order(cache)[-1] == k("huge")


def test_a_digest_only_insert_into_a_full_blob_evicts_only_what_its_own_entry_needs() -> None:
    cache = ReplayCache(now_ms=NOW)
    limit = max(n for n in range(102_000, 102_400) if fits_in_empty_blob(k("big"), n, NOW))
    cache.put(k("big"), b"b" * limit)  # the blob is now at the cap
    cache.put(k("huge"), b"h" * 150_000)
    assert order(cache) == [k("huge")]  # the cap, not the response, forced this eviction
    assert cache.to_blob().ByteSize() <= MAX_BLOB_BYTES


def test_a_hit_whose_longer_stamp_breaks_the_cap_evicts_the_least_recent_entry() -> None:
    """A stamp of 0 takes no bytes; re-stamped at a later clock it takes five (C14)."""
    key = k("big")

    def written(size: int) -> ReplayCache:
        earlier = ReplayCache(now_ms=0)
        earlier.put(k("small"), b"s")
        earlier.put(key, b"b" * size)
        return earlier

    size = max(n for n in range(101_800, 102_400)
               if len(written(n)) == 2 and not written(n).to_blob().entries[-1].digest_only)
    earlier = written(size)  # both entries, within a stamp's five bytes of the cap
    assert earlier.size_bytes > MAX_BLOB_BYTES - 5
    cache = ReplayCache(earlier.to_bytes(), now_ms=21_599_999)
    hit = cache.get(key)
    assert hit is not None and hit.response == b"b" * size
    assert order(cache) == [key]
    assert cache.to_blob().ByteSize() == cache.size_bytes <= MAX_BLOB_BYTES


def test_a_hit_that_cannot_fit_alone_after_its_stamp_keeps_its_digest_only() -> None:
    """The caller still gets the bytes; the cell keeps the digest, as for an oversized put."""
    key = k("edge")
    limit = max(n for n in range(102_000, 102_400) if fits_in_empty_blob(key, n, 0))
    earlier = ReplayCache(now_ms=0)
    earlier.put(key, b"e" * limit)
    cache = ReplayCache(earlier.to_bytes(), now_ms=21_599_999)
    hit = cache.get(key)
    assert hit is not None and hit.response == b"e" * limit and not hit.digest_only
    entry = cache.to_blob().entries[0]
    assert entry.digest_only and entry.response == b"" and entry.response_digest == hit.digest
    assert cache.to_blob().ByteSize() == cache.size_bytes <= MAX_BLOB_BYTES


def test_re_put_replaces_the_entry_and_restarts_its_ttl() -> None:
    cache = ReplayCache(staged("a", "b"), now_ms=NOW + 1_000)
    cache.put(k("a"), b"new")
    blob = cache.to_blob()
    assert [e.cache_key for e in blob.entries] == [k("b"), k("a")]
    assert blob.entries[-1].response == b"new"
    assert blob.entries[-1].created_at_ms == NOW + 1_000
    assert blob.total_response_bytes == len(b"b" * 10) + 3


def test_put_purges_every_expired_entry_first() -> None:
    old = staged("x", "y")
    blob = LlmCacheBlob.FromString(old)
    blob.MergeFrom(LlmCacheBlob.FromString(staged("fresh", now_ms=NOW + TTL_MS)))
    blob.total_response_bytes = sum(len(e.response) for e in blob.entries)
    cache = ReplayCache(blob, now_ms=NOW + TTL_MS + 1)
    assert len(cache) == 3  # loading purges nothing
    cache.put(k("new"), b"n")
    assert order(cache) == [k("fresh"), k("new")]


def test_contains_is_read_only() -> None:
    cache = ReplayCache(staged("a", "b"), now_ms=NOW + TTL_MS + 1)
    assert k("a") in cache  # expired, but still staged: no purge
    assert k("zzz") not in cache
    assert 42 not in cache
    assert order(cache) == [k("a"), k("b")]
    assert cache.dirty is False


def test_a_hit_dirties_even_when_nothing_moves() -> None:
    cache = ReplayCache(staged("a"), now_ms=NOW)
    assert cache.get(k("a")) is not None
    assert cache.dirty is True


def test_str_responses_are_stored_utf8_encoded() -> None:
    cache = ReplayCache(now_ms=NOW)
    stored = cache.put(k("s"), "héllo")
    assert stored.response == "héllo".encode()
    assert stored.digest == sha("héllo".encode())


@pytest.mark.parametrize("response", [bytearray(b"x"), 42, None, memoryview(b"x")])
def test_put_rejects_other_response_types(response: object) -> None:
    cache = ReplayCache(now_ms=NOW)
    with pytest.raises(TypeError, match="response"):
        cache.put(k("a"), response)  # type: ignore[arg-type]
    assert cache.dirty is False


def test_keys_must_be_str() -> None:
    cache = ReplayCache(now_ms=NOW)
    with pytest.raises(TypeError):
        cache.put(b"a", b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cache.get(1)  # type: ignore[arg-type]


def test_a_key_too_long_for_any_entry_is_rejected_before_staging() -> None:
    cache = ReplayCache(staged("a"), now_ms=NOW)
    with pytest.raises(ValueError, match="cache_key"):
        cache.put("k" * 110_000, b"x")
    assert order(cache) == [k("a")]
    assert cache.dirty is False


@pytest.mark.parametrize("now_ms", [True, 1.5, "1", None])
def test_now_ms_must_be_an_int(now_ms: object) -> None:
    with pytest.raises(TypeError, match="now_ms"):
        ReplayCache(now_ms=now_ms)  # type: ignore[arg-type]


def test_now_ms_must_fit_int64() -> None:
    with pytest.raises(ValueError, match="int64"):
        ReplayCache(now_ms=2**63)


def test_a_message_blob_is_copied_not_mutated() -> None:
    original = LlmCacheBlob.FromString(staged("a", "b"))
    snapshot = original.SerializeToString()
    cache = ReplayCache(original, now_ms=NOW + 1)
    cache.get(k("a"))
    cache.put(k("c"), b"c")
    assert original.SerializeToString() == snapshot


def test_to_blob_returns_an_independent_message() -> None:
    cache = ReplayCache(staged("a"), now_ms=NOW)
    first = cache.to_blob()
    first.entries[0].response = b"tampered"
    assert cache.to_blob().entries[0].response == b"a" * 10


def test_cached_response_validates_itself() -> None:
    with pytest.raises(ValueError, match="32-byte"):
        CachedResponse(cache_key="a", response=b"", digest=b"short", digest_only=False,
                       created_at_ms=0, last_access_ms=0)
    with pytest.raises(ValueError, match="digest-only"):
        CachedResponse(cache_key="a", response=b"x", digest=sha(b"x"), digest_only=True,
                       created_at_ms=0, last_access_ms=0)


# -- bad blobs -----------------------------------------------------------------------------


def entry(key: str, response: bytes = b"r", **fields: object) -> LlmCacheEntry:
    values: dict[str, object] = {
        "cache_key": key, "response": response, "response_digest": sha(response),
        "created_at_ms": NOW, "last_access_ms": NOW,
    }
    values.update(fields)
    return LlmCacheEntry(**values)  # type: ignore[arg-type]


def blob_of(*entries: LlmCacheEntry, version: int = 1, total: int | None = None) -> bytes:
    blob = LlmCacheBlob(state_schema_version=version, entries=entries)
    blob.total_response_bytes = (
        sum(len(e.response) for e in entries) if total is None else total
    )
    return blob.SerializeToString()


@pytest.mark.parametrize("version", [0, 2, 99])
def test_an_unknown_schema_version_is_refused(version: int) -> None:
    with pytest.raises(UnsupportedSchemaVersionError) as info:
        ReplayCache(blob_of(entry("a"), version=version), now_ms=NOW)
    assert info.value.version == version
    assert info.value.supported == (1,)
    assert info.value.cell == "llm_cache"


def test_an_empty_blob_with_a_future_version_is_still_refused() -> None:
    with pytest.raises(UnsupportedSchemaVersionError):
        ReplayCache(LlmCacheBlob(state_schema_version=2), now_ms=NOW)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\xff\xff\xff", "does not decode"),
        (blob_of(entry("a"), entry("a", b"other")), "repeats the cache key"),
        (blob_of(entry("a", response_digest=b"\x00" * 31)), "31-byte response_digest"),
        (blob_of(entry("a", response_digest=b"")), "0-byte response_digest"),
        (blob_of(entry("a"), total=7), "total_response_bytes 7"),
        (blob_of(*(entry(str(i)) for i in range(65))), "65 entries"),
        (blob_of(entry("a", b"x" * 60_000), entry("b", b"y" * 60_000)), "over the 102400"),
    ],
)
def test_a_corrupt_blob_is_reported_never_replaced(data: bytes, match: str) -> None:
    with pytest.raises(StateCorruptError, match=match) as info:
        ReplayCache(data, now_ms=NOW)
    assert info.value.cell == "llm_cache"


def test_a_digest_only_entry_carrying_a_response_is_reported_when_read() -> None:
    cache = ReplayCache(blob_of(entry("a"), entry("b", digest_only=True)), now_ms=NOW)
    assert cache.get("a") is not None
    with pytest.raises(StateCorruptError, match="digest-only yet carries") as info:
        cache.get("b")
    assert info.value.cell == "llm_cache"


def test_an_oversized_message_blob_is_reported_too() -> None:
    blob = LlmCacheBlob.FromString(blob_of(entry("a", b"x" * 60_000), entry("b", b"y" * 60_000)))
    with pytest.raises(StateCorruptError, match="over the 102400"):
        ReplayCache(blob, now_ms=NOW)


def test_unknown_fields_are_dropped_and_accounting_stays_exact() -> None:
    unknown = b"\xf8\x07\x01"  # field 127, varint 1: a field from some future writer
    data = blob_of(entry("a")) + unknown
    cache = ReplayCache(data, now_ms=NOW)
    assert cache.size_bytes == cache.to_blob().ByteSize() == len(blob_of(entry("a")))


def test_bytes_over_the_cap_whose_canonical_form_fits_are_accepted() -> None:
    padding = b"\xfa\x07" + bytes([0xB0, 0xDB, 0x06]) + b"p" * 110_000  # field 127, 110,000 B
    data = blob_of(entry("a")) + padding
    assert len(data) > MAX_BLOB_BYTES
    cache = ReplayCache(data, now_ms=NOW)
    assert cache.size_bytes == cache.to_blob().ByteSize() == len(blob_of(entry("a")))


def test_a_non_canonical_encoding_is_accounted_by_its_canonical_size() -> None:
    # created_at_ms written twice: the parser keeps the last, serialization writes it once.
    canonical = blob_of(entry("a", created_at_ms=NOW))
    patched = LlmCacheBlob.FromString(canonical)
    body = patched.entries[0].SerializeToString() + b"\x28\x01"  # created_at_ms = 1 again
    data = b"\x08\x01" + b"\x12" + bytes([len(body)]) + body + b"\x18\x01"
    cache = ReplayCache(data, now_ms=NOW)
    assert cache.to_blob().entries[0].created_at_ms == 1
    cache.put(k("b"), b"b")
    assert cache.size_bytes == cache.to_blob().ByteSize()


# -- properties ----------------------------------------------------------------------------


@dataclass
class ReferenceCache:
    """The spec's rules, applied the slow way: every size comes from protobuf itself."""

    entries: list[LlmCacheEntry] = field(default_factory=list)

    def blob(self, extra: list[LlmCacheEntry] | None = None) -> LlmCacheBlob:
        entries = self.entries + (extra or [])
        return LlmCacheBlob(state_schema_version=1, entries=entries,
                            total_response_bytes=sum(len(e.response) for e in entries))

    def put(self, key: str, data: bytes, now: int) -> None:
        self.entries = [e for e in self.entries if now - e.created_at_ms <= TTL_MS]
        self.entries = [e for e in self.entries if e.cache_key != key]
        new = LlmCacheEntry(cache_key=key, response=data, response_digest=sha(data),
                            created_at_ms=now, last_access_ms=now)
        if LlmCacheBlob(state_schema_version=1, entries=[new],
                        total_response_bytes=len(data)).ByteSize() > MAX_BLOB_BYTES:
            new = LlmCacheEntry(cache_key=key, response_digest=sha(data), digest_only=True,
                                created_at_ms=now, last_access_ms=now)
        while self.entries and (
            len(self.entries) >= MAX_ENTRIES or self.blob([new]).ByteSize() > MAX_BLOB_BYTES
        ):
            self.entries.pop(0)
        self.entries.append(new)

    def get(self, key: str, now: int) -> LlmCacheEntry | None:
        for index, e in enumerate(self.entries):
            if e.cache_key == key:
                del self.entries[index]
                if now - e.created_at_ms > TTL_MS:
                    return None
                served = LlmCacheEntry()
                served.CopyFrom(e)
                e.last_access_ms = served.last_access_ms = now
                self.entries.append(e)
                # A longer stamp may break the cap: evict as an insert does, the hit
                # last, and a hit that cannot fit alone keeps its digest only.
                while self.blob().ByteSize() > MAX_BLOB_BYTES:
                    if len(self.entries) > 1 or e.digest_only:
                        self.entries.pop(0)
                    else:
                        e.response, e.digest_only = b"", True
                return served
        return None


sizes = st.one_of(
    st.integers(0, 64),
    st.integers(0, 4_000),
    st.integers(0, 150_000),
    st.integers(102_100, 102_400),  # around the largest response an empty blob can hold
)
clock_steps = st.one_of(
    st.sampled_from([0, 1, TTL_MS - 1, TTL_MS, TTL_MS + 1]), st.integers(0, 2 * TTL_MS)
)
KEY_SPACE = 100
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, KEY_SPACE - 1), sizes),
        st.tuples(st.just("get"), st.integers(0, KEY_SPACE - 1), st.just(0)),
        st.tuples(st.just("reload"), st.just(0), clock_steps),
        # Many small puts over consecutive keys, so the 64-entry bound is reached.
        st.tuples(st.just("fill"), st.integers(0, KEY_SPACE - 1), st.integers(1, 70)),
    ),
    max_size=40,
)
# Odd keys (empty, non-ASCII, long) first; the rest of the key space is hex digests.
key_sets = st.lists(
    st.one_of(st.integers(0, 10**6).map(k), st.text(max_size=70)),
    max_size=20, unique=True,
)


def key_at(custom: list[str], index: int) -> str:
    return custom[index] if index < len(custom) else k(index)


def payload(step: int, size: int) -> bytes:
    return (hashlib.sha256(str(step).encode()).digest() * (size // 32 + 1))[:size]


def assert_invariants(cache: ReplayCache, reference: ReferenceCache) -> None:
    blob = cache.to_blob()
    assert blob.ByteSize() <= MAX_BLOB_BYTES
    assert cache.size_bytes == blob.ByteSize()
    assert len(blob.entries) == len(cache) <= MAX_ENTRIES
    assert [e.cache_key for e in blob.entries] == [e.cache_key for e in reference.entries]
    assert blob == reference.blob()


@pytest.mark.spec("C14")
@given(
    keys=key_sets,
    ops=operations,
    start=st.sampled_from([NOW, 0, 1, -5_000, -(2**62)]),
)
def test_the_cap_holds_under_arbitrary_operation_sequences(
    keys: list[str], ops: list[tuple[str, int, int]], start: int
) -> None:
    """THEN after every operation to_blob().ByteSize() is at most 102,400 bytes."""
    now = start
    cache = ReplayCache(now_ms=now)
    reference = ReferenceCache()

    def put(key: str, data: bytes) -> None:
        stored = cache.put(key, data)
        reference.put(key, data, now)
        assert stored.digest == sha(data)
        assert stored.response == reference.entries[-1].response
        assert_invariants(cache, reference)

    for step, (op, index, arg) in enumerate(ops):
        if op == "put":
            put(key_at(keys, index), payload(step, arg))
        elif op == "fill":
            for offset in range(arg):
                put(key_at(keys, (index + offset) % KEY_SPACE), payload(step, offset % 40))
        elif op == "get":
            key = key_at(keys, index)
            hit = cache.get(key)
            expected = reference.get(key, now)
            if expected is None:
                assert hit is None
            else:
                assert hit is not None
                assert hit.response == expected.response
                assert hit.digest == expected.response_digest
                assert hit.digest_only == expected.digest_only
        else:
            now += arg
            cache = ReplayCache(cache.to_blob().SerializeToString(), now_ms=now)
        assert_invariants(cache, reference)


@given(
    keys=key_sets,
    puts=st.lists(st.tuples(st.integers(0, KEY_SPACE - 1), sizes), max_size=40),
    later=clock_steps,
)
def test_blobs_round_trip_field_equal(
    keys: list[str], puts: list[tuple[int, int]], later: int
) -> None:
    cache = ReplayCache(now_ms=NOW)
    for step, (key_index, size) in enumerate(puts):
        cache.put(key_at(keys, key_index), payload(step, size))
    first = cache.to_blob()
    again = ReplayCache(first.SerializeToString(), now_ms=NOW + later)
    assert again.to_blob() == first
    assert again.size_bytes == first.ByteSize()
    assert again.dirty is False
