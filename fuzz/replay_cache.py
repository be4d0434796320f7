"""Fuzz the replay-cache blob load (``model/_replay_cache.py``, `ReplayCache` from bytes).

The ``llm_cache`` cell is read on every activation that calls a model. A
load either succeeds or raises `StateError` (invariant 8). What loads must
keep every bound the cache promises (C12, C14) through use: each entry reads
back (or raises `StateCorruptError` for a digest-only entry with bytes),
`size_bytes` equals the serialized size after a hit and after a put that
may evict or go digest-only, and the bytes written reload to the same blob.
"""

from __future__ import annotations

import atheris  # type: ignore[import-untyped]

from fuzz._harness import NOW_MS, check, fuzz, proto_mutator

with atheris.instrument_imports(include=["beam_agents"]):
    from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob
    from beam_agents.errors import StateCorruptError, StateError
    from beam_agents.model._replay_cache import MAX_BLOB_BYTES, MAX_ENTRIES, ReplayCache

_PUT_KEY = "fuzz:put"


def test_one_input(data: bytes) -> None:
    """Load `data` as an llm_cache cell, hit every entry, put one more, check the bounds."""
    try:
        cache = ReplayCache(data, now_ms=NOW_MS)
    except StateError:
        return
    _check_bounds(cache)
    keys = [entry.cache_key for entry in cache.to_blob().entries]
    for key in keys:
        try:
            cache.get(key)
        except StateCorruptError:
            continue  # detected at use, as the load promises
        _check_bounds(cache)
    # The last byte scales the response from a few bytes to past the cap, so
    # puts are evicting, digest-only, or neither.
    size = data[-1] * 512 if data else 0
    stored = cache.put(_PUT_KEY, bytes(size))
    check(stored.response == (b"" if stored.digest_only else bytes(size)),
          "a put stored neither the response nor only its digest")
    _check_bounds(cache)


def _check_bounds(cache: ReplayCache) -> None:
    """The cache's own accounting agrees with protobuf's, within the bounds, and reloads."""
    out = cache.to_bytes()
    check(cache.size_bytes == len(out) == cache.to_blob().ByteSize(),
          f"size_bytes {cache.size_bytes} but {len(out)} bytes serialized")
    check(len(out) <= MAX_BLOB_BYTES, f"{len(out)} bytes, over the cap")
    check(len(cache) <= MAX_ENTRIES, f"{len(cache)} entries, over the bound")
    reloaded = ReplayCache(out, now_ms=NOW_MS)
    check(reloaded.to_blob() == cache.to_blob(), "the written bytes reload differently")
    check(LlmCacheBlob.FromString(out).SerializeToString(deterministic=True) == out,
          "the written bytes are not canonical")


if __name__ == "__main__":
    fuzz(test_one_input, mutator=proto_mutator(LlmCacheBlob))
