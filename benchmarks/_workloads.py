"""The state the benchmarks load, the operations they run on it, and their baselines.

Blobs are written by the library itself (`Memory.to_bytes`, `ReplayCache`),
because that is what keyed state holds in production, and their contents
come from a seeded generator, so every run measures the same bytes. The
timestamps sit inside the cache's six-hour TTL, so nothing expires while
it is measured.
"""

from __future__ import annotations

import hashlib
import pickle
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob
from beam_agents._proto.memory_pb2 import MemoryBlob
from beam_agents.memory import LruCompactor, Memory
from beam_agents.model import ReplayCache

__all__ = [
    "NOW_MS",
    "NaiveState",
    "OpInputs",
    "StateBlobs",
    "build_cache",
    "build_memory",
    "cache_floor",
    "cache_key",
    "facade_cache",
    "facade_memory",
    "floor",
    "make_inputs",
    "memory_floor",
    "mixed_cache_ops",
    "mixed_memory_ops",
    "naive_activation",
]

#: The event time every measured activation runs at.
NOW_MS = 1_700_000_000_000
_EARLIER_MS = NOW_MS - 60_000  # when the loaded state was written: a minute before


def _bytes(rng: random.Random, size: int) -> bytes:
    return rng.randbytes(size)


def cache_key(index: int) -> str:
    """A cache key shaped like `compute_cache_key`'s: 64 lowercase hex characters."""
    return hashlib.sha256(f"request-{index}".encode()).hexdigest()


def build_memory(*, scalars: int, scalar_bytes: int, rings: int = 0, ring_items: int = 0,
                 item_bytes: int = 0, seed: int = 1) -> bytes:
    """A MemoryBlob as the library writes it: ``fact:i`` scalars, then ``history:j`` rings."""
    rng = random.Random(seed)
    memory = Memory(now_ms=_EARLIER_MS)
    for index in range(scalars):
        memory.set(f"fact:{index}", _bytes(rng, scalar_bytes))
    for ring in range(rings):
        for _ in range(ring_items):
            memory.append(f"history:{ring}", _bytes(rng, item_bytes), max_items=ring_items)
    return memory.to_bytes()


def build_cache(*, entries: int, response_bytes: int, seed: int = 2) -> bytes:
    """An LlmCacheBlob of `entries` responses, keyed like real cache keys."""
    rng = random.Random(seed)
    cache = ReplayCache(now_ms=_EARLIER_MS)
    for index in range(entries):
        cache.put(cache_key(index), _bytes(rng, response_bytes))
    return cache.to_blob().SerializeToString(deterministic=True)


def memory_floor(memory: bytes) -> bytes:
    """The physical floor for the memory cell: protobuf parses and re-serializes it."""
    return MemoryBlob.FromString(memory).SerializeToString(deterministic=True)


def cache_floor(cache: bytes) -> bytes:
    """The physical floor for the cache cell."""
    return LlmCacheBlob.FromString(cache).SerializeToString(deterministic=True)


def floor(blobs: StateBlobs) -> tuple[bytes, bytes]:
    """Both cells' floor: what any implementation must at least pay to read and write them."""
    return memory_floor(blobs.memory), cache_floor(blobs.cache)


@dataclass(frozen=True, slots=True, kw_only=True)
class StateBlobs:
    """One entity's two state cells, serialized."""

    memory: bytes
    cache: bytes

    def pickled(self) -> tuple[bytes, bytes]:
        """The same logical content as plain pickled dicts, for the naive baseline."""
        memory = Memory(self.memory, now_ms=NOW_MS)
        scalars_and_rings: dict[str, bytes | list[bytes]] = {}
        for key in memory.keys():
            try:
                scalars_and_rings[key] = list(memory.ring(key))
            except TypeError:
                value = memory.get(key)
                assert value is not None
                scalars_and_rings[key] = value
        cache = {e.cache_key: (e.response, e.response_digest, e.created_at_ms,
                               e.last_access_ms)
                 for e in LlmCacheBlob.FromString(self.cache).entries}
        return pickle.dumps(scalars_and_rings), pickle.dumps(cache)


class NaiveState:
    """The naive baseline: both cells as dicts, each re-pickled whole on every mutation.

    This is what a first implementation without a facade tends to do: keep
    the state as a Python object and persist it after each write. It has no
    caps, no accounting and no LRU stamps, so it does less work per operation
    than the facades; what it pays is the whole-state serialization.
    """

    def __init__(self, memory_blob: bytes, cache_blob: bytes) -> None:
        self.memory: dict[str, Any] = pickle.loads(memory_blob)
        self.cache: dict[str, Any] = pickle.loads(cache_blob)
        self.memory_blob, self.cache_blob = memory_blob, cache_blob

    def _save_memory(self) -> None:
        self.memory_blob = pickle.dumps(self.memory)

    def get(self, key: str) -> bytes | None:
        """A scalar read; no write."""
        value = self.memory.get(key)
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes) -> None:
        """A scalar write, persisted."""
        self.memory[key] = value
        self._save_memory()

    def delete(self, key: str) -> None:
        """A removal, persisted."""
        self.memory.pop(key, None)
        self._save_memory()

    def append(self, key: str, item: bytes, max_items: int = 64) -> None:
        """A bounded ring append, persisted."""
        ring = self.memory.setdefault(key, [])
        ring.append(item)
        del ring[:-max_items]
        self._save_memory()

    def ring(self, key: str) -> tuple[bytes, ...]:
        """A ring read; no write."""
        return tuple(self.memory.get(key, ()))

    def cache_get(self, key: str) -> bytes | None:
        """A cache lookup; a hit re-stamps the entry, which is persisted."""
        entry = self.cache.get(key)
        if entry is None:
            return None
        self.cache[key] = (entry[0], entry[1], entry[2], NOW_MS)
        self.cache_blob = pickle.dumps(self.cache)
        return entry[0]  # type: ignore[no-any-return]

    def cache_put(self, key: str, response: bytes) -> None:
        """A cache insert with the 64-entry bound, persisted."""
        self.cache[key] = (response, hashlib.sha256(response).digest(), NOW_MS, NOW_MS)
        while len(self.cache) > 64:
            del self.cache[next(iter(self.cache))]
        self.cache_blob = pickle.dumps(self.cache)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpInputs:
    """The values the operation scripts write, made once so no op allocates them."""

    scalar: bytes
    item: bytes
    small: bytes
    response: bytes
    new_key: str


def make_inputs(*, scalar_bytes: int, item_bytes: int, response_bytes: int) -> OpInputs:
    """Values of the same sizes as what the blobs already hold."""
    rng = random.Random(3)
    return OpInputs(scalar=_bytes(rng, scalar_bytes), item=_bytes(rng, item_bytes),
                    small=_bytes(rng, 100), response=_bytes(rng, response_bytes),
                    new_key=cache_key(10_000))


def mixed_memory_ops(memory: Any, values: OpInputs) -> None:
    """The 13 memory operations of B1: 6 gets (one a miss), 3 sets, 2 appends, a ring read
    and a delete.

    An agent's activation reads a few facts, updates some, appends to a
    history ring and reads a ring back to build a prompt; this is that,
    three or four times over.
    """
    memory.get("fact:3")
    memory.get("fact:7")
    memory.set("fact:5", values.scalar)
    memory.append("history:1", values.item)
    memory.ring("history:2")
    memory.get("fact:9")
    memory.set("note", values.small)
    memory.delete("fact:11")
    memory.append("history:1", values.item)
    memory.get("fact:12")
    memory.get("fact:20")
    memory.set("fact:21", values.scalar)
    memory.get("missing")


def mixed_cache_ops(get: Callable[[str], Any], put: Callable[[str, bytes], Any],
                    values: OpInputs) -> None:
    """The 7 cache operations of B1: 5 hits, 1 miss, 1 insert (which evicts the LRU entry)."""
    get(cache_key(3))
    get(cache_key(40))
    get("0" * 64)
    put(values.new_key, values.response)
    get(cache_key(10))
    get(cache_key(63))
    get(cache_key(20))


def facade_memory(blob: bytes, values: OpInputs) -> bytes:
    """Load the memory cell, run the memory operations, write it back as the runtime does."""
    memory = Memory(blob, now_ms=NOW_MS, compactor=LruCompactor())
    mixed_memory_ops(memory, values)
    return memory.to_bytes()


def facade_cache(blob: bytes, values: OpInputs) -> bytes:
    """Load the cache cell, run the cache operations, write it back as the runtime does."""
    cache = ReplayCache(blob, now_ms=NOW_MS)
    mixed_cache_ops(cache.get, cache.put, values)
    return cache.to_blob().SerializeToString(deterministic=True)


def naive_activation(pickled: tuple[bytes, bytes], values: OpInputs) -> tuple[bytes, bytes]:
    """The same 20 operations on the naive baseline."""
    state = NaiveState(*pickled)
    mixed_memory_ops(state, values)
    mixed_cache_ops(state.cache_get, state.cache_put, values)
    return state.memory_blob, state.cache_blob
