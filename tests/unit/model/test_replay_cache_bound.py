"""The replay cache enforces its cap from a size bound, and decides exactly as the exact size would.

A facade loaded from bytes starts from the length of those bytes as an upper
bound on the blob's size and measures the exact size only when the bound
alone would evict (see the module docstring of `_replay_cache`). Padding the
loaded bytes with an unknown field makes the bound loose, which is the case
where a wrong shortcut would evict too much.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob
from beam_agents.model._replay_cache import MAX_BLOB_BYTES, TTL_MS, ReplayCache, _blob_size
from tests.unit.model.test_replay_cache import NOW, ReferenceCache, k, payload


def padding(size: int) -> bytes:
    """An unknown length-delimited field 127 of `size` bytes, which the facade drops."""
    if not size:
        return b""
    length, prefix = size, bytearray()
    while length >= 0x80:
        prefix.append((length & 0x7F) | 0x80)
        length >>= 7
    prefix.append(length)
    return b"\xfa\x07" + bytes(prefix) + b"p" * size


sizes = st.one_of(st.integers(0, 64), st.integers(0, 4_000), st.integers(20_000, 60_000))
later_ops = st.lists(st.tuples(st.sampled_from(["put", "get"]), st.integers(0, 30), sizes),
                     max_size=25)


@given(st.lists(st.tuples(st.integers(0, 30), sizes), max_size=30), later_ops,
       st.integers(0, 40_000), st.sampled_from([1, TTL_MS, TTL_MS + 1]))
def test_eviction_from_a_loose_bound_matches_the_exact_rules(
        initial: list[tuple[int, int]], ops: list[tuple[str, int, int]], pad: int,
        later: int) -> None:
    """THEN the blob after any puts and gets equals the slow reference's, whatever the bound."""
    cache, reference = ReplayCache(now_ms=NOW), ReferenceCache()
    for step, (index, size) in enumerate(initial):
        cache.put(k(index), payload(step, size))
        reference.put(k(index), payload(step, size), NOW)
    data = cache.to_blob().SerializeToString() + padding(pad)
    assume(len(data) <= MAX_BLOB_BYTES)  # larger bytes are measured exactly at load

    now = NOW + later
    reloaded = ReplayCache(data, now_ms=now)
    for step, (op, index, size) in enumerate(ops):
        if op == "put":
            reloaded.put(k(index), payload(1000 + step, size))
            reference.put(k(index), payload(1000 + step, size), now)
        else:
            hit, expected = reloaded.get(k(index)), reference.get(k(index), now)
            assert (hit is None) == (expected is None)

    blob = reloaded.to_blob()
    assert blob == reference.blob()
    assert reloaded.size_bytes == blob.ByteSize() <= MAX_BLOB_BYTES


def test_a_put_that_fits_the_bound_measures_nothing() -> None:
    """A put well under the cap leaves the size a bound, and the bound stays an upper bound."""
    staged = ReplayCache(now_ms=NOW)
    for index in range(10):
        staged.put(k(index), b"r" * 1_000)
    data = staged.to_blob().SerializeToString() + padding(5_000)
    cache = ReplayCache(data, now_ms=NOW)

    cache.put(k(99), b"s" * 1_000)

    assert cache._exact is False
    bound = _blob_size(cache._entries_bytes, cache._total)
    assert bound >= cache.to_blob().ByteSize() + 5_000  # the padding is still counted
    assert cache.size_bytes == cache.to_blob().ByteSize()
    assert cache._exact is True


@pytest.mark.parametrize("pad", [0, 30_000])
def test_a_put_the_bound_would_evict_for_is_decided_on_the_exact_size(pad: int) -> None:
    """Padding pushes the bound over the cap; the exact size shows the entry fits, so none go."""
    staged = ReplayCache(now_ms=NOW)
    for index in range(3):
        staged.put(k(index), b"r" * 20_000)
    data = staged.to_blob().SerializeToString() + padding(pad)
    cache = ReplayCache(data, now_ms=NOW)

    cache.put(k(9), b"s" * 30_000)

    assert [e.cache_key for e in cache.to_blob().entries] == [k(0), k(1), k(2), k(9)]
    assert LlmCacheBlob.FromString(cache.to_blob().SerializeToString()).ByteSize() \
        == cache.size_bytes <= MAX_BLOB_BYTES
