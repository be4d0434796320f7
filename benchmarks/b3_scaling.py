"""B3. Scaling: activation cost against memory blob size and against cache entries.

Memory: blobs of 1 KiB to 1 MiB made of 4 KiB scalars (one smaller scalar
below 4 KiB), loaded, read twice, one value replaced, one small key set, and
written back (`Memory.to_bytes()`), against protobuf parsing and serializing
the same bytes. The facade runs without a compactor and with its soft-cap
warning silenced: with the default compactor a blob above the 768 KiB soft cap
is compacted to half the cap on its first write, so a steady activation at
1 MiB exists only without one. Cache: blobs of 1 to 64 entries of 1,400-byte responses,
loaded, one hit and one insert, and written back as the runtime does, against
the same floor.

The claim to check is that the facades scale like protobuf: the log-log
slope of cost against size (or entries) should be close to the floor's. The
slopes are fitted over the upper half of each range, where fixed costs no
longer dominate, and reported together with the per-point ratios.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

from beam_agents.memory import Memory
from beam_agents.model import ReplayCache
from benchmarks._harness import Profile, interleaved, ratios, stat
from benchmarks._workloads import (
    NOW_MS,
    build_cache,
    build_memory,
    cache_floor,
    cache_key,
    make_inputs,
    memory_floor,
)

__all__ = ["run", "slope"]

_ENTRY_BYTES = 4096


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x): 1.0 is linear scaling."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx)


def _memory_case(size: int) -> tuple[bytes, Callable[[], bytes]]:
    # Values a little under 4 KiB, so that with keys and headers the blob is
    # `size` bytes and even 1 MiB of it stays under the 1 MiB cap on values.
    scalars = max(1, size // _ENTRY_BYTES)
    value_bytes = min(size, _ENTRY_BYTES) - 128
    blob = build_memory(scalars=scalars, scalar_bytes=value_bytes)
    values = make_inputs(scalar_bytes=value_bytes, item_bytes=1, response_bytes=1)
    last = f"fact:{scalars - 1}"

    def activation() -> bytes:
        memory = Memory(blob, now_ms=NOW_MS)
        memory.get("fact:0")
        memory.get(last)
        memory.set(last, values.scalar)
        memory.set("note", values.small)
        return memory.to_bytes()

    return blob, activation


def _cache_case(entries: int) -> tuple[bytes, Callable[[], bytes]]:
    blob = build_cache(entries=entries, response_bytes=1400)
    values = make_inputs(scalar_bytes=1, item_bytes=1, response_bytes=1400)

    def activation() -> bytes:
        cache = ReplayCache(blob, now_ms=NOW_MS)
        cache.get(cache_key(entries - 1))
        cache.put(values.new_key, values.response)
        return cache.to_blob().SerializeToString(deterministic=True)

    return blob, activation


def _series(cases: dict[int, tuple[bytes, Callable[[], bytes]]],
            floor: Callable[[bytes], bytes], profile: Profile,
            upper_from: int) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    for x, (blob, activation) in cases.items():
        times = interleaved({"floor": functools.partial(floor, blob), "facade": activation},
                            reps=max(2, profile.reps // 3), inner=profile.inner)
        points.append({
            "x": x,
            "blob_bytes": len(blob),
            "floor_us": stat(times["floor"]).scaled(1e6).as_json(2),
            "facade_us": stat(times["facade"]).scaled(1e6).as_json(2),
            "ratio": ratios(times["facade"], times["floor"]).as_json(2),
        })
    upper = [p for p in points if p["x"] >= upper_from]
    xs = [float(p["x"]) for p in upper]
    return {
        "points": points,
        "facade_slope": round(slope(xs, [p["facade_us"]["median"] for p in upper]), 2),
        "floor_slope": round(slope(xs, [p["floor_us"]["median"] for p in upper]), 2),
        "fit_from": upper_from,
    }


def run(profile: Profile) -> dict[str, Any]:
    """Measure B3; see the module docstring."""
    logging.getLogger("beam_agents.memory").setLevel(logging.ERROR)  # soft-cap warnings
    sizes = [1024, 16_384, 262_144] if profile.quick else [
        1024, 4096, 16_384, 65_536, 262_144, 1_048_576]
    counts = [1, 8, 64] if profile.quick else [1, 2, 4, 8, 16, 32, 64]
    memory = _series({size: _memory_case(size) for size in sizes}, memory_floor, profile,
                     upper_from=16_384)
    cache = _series({count: _cache_case(count) for count in counts}, cache_floor, profile,
                    upper_from=8)
    largest = memory["points"][-1]["ratio"]["median"]
    return {
        "name": "Scaling with blob size and cache entries",
        "workload": ("memory: 1 KiB-1 MiB blobs of ~4 KiB scalars, no compactor, 2 gets + "
                     "2 sets; cache: 1-64 entries of 1400 B, 1 hit + 1 put"),
        "unit": "us per activation; slopes are d log(cost) / d log(size)",
        "memory": memory,
        "cache": cache,
        "ratio": round(largest, 2),
        "note": _note(memory, cache),
    }


def _compare(facade: float, floor: float) -> str:
    if abs(facade - floor) <= 0.15:
        return "close to"
    return "below" if facade < floor else "above"


def _note(memory: dict[str, Any], cache: dict[str, Any]) -> str:
    mem, cached = memory["points"], cache["points"]
    return (
        f"Memory: slope {memory['facade_slope']}, "
        f"{_compare(memory['facade_slope'], memory['floor_slope'])} protobuf's "
        f"{memory['floor_slope']} (fit from {memory['fit_from'] // 1024} KiB). The "
        f"facade costs a fixed {mem[0]['facade_us']['median']:.0f} us (at 1 KiB) plus, at the "
        f"top of the range, {_per_unit(mem, 'facade_us', _ENTRY_BYTES):.2f} us per 4 KiB entry "
        "(a header indexed in Python, the bytes copied); protobuf costs "
        f"{_per_unit(mem, 'floor_us', _ENTRY_BYTES):.2f} us per 4 KiB there. The fixed part "
        "makes the ratio fall with size, from "
        f"{mem[0]['ratio']['median']:.2f}x at 1 KiB to {mem[-1]['ratio']['median']:.2f}x at "
        f"{mem[-1]['x'] // 1024} KiB, rather than staying flat. Cache: slope "
        f"{cache['facade_slope']}, {_compare(cache['facade_slope'], cache['floor_slope'])} "
        f"protobuf's {cache['floor_slope']} (fit from {cache['fit_from']} entries): a fixed "
        f"{cached[0]['facade_us']['median']:.0f} us (the facade, hashing the new response, the "
        f"put) plus {_per_unit(cached, 'facade_us', 1):.2f} us per entry, mostly reading "
        "three fields of each to validate it, against protobuf's "
        f"{_per_unit(cached, 'floor_us', 1):.2f} us per entry; the ratio falls from "
        f"{cached[0]['ratio']['median']:.1f}x at 1 entry to {cached[-1]['ratio']['median']:.1f}x "
        f"at {cached[-1]['x']}."
    )


def _per_unit(points: list[dict[str, Any]], key: str, unit: int) -> float:
    """Marginal cost between the two largest points, per `unit` of x (bytes or entries)."""
    low, high = points[-2], points[-1]
    return float((high[key]["median"] - low[key]["median"]) / ((high["x"] - low["x"]) / unit))
