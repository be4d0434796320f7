"""Primitives shared by the benchmarks: interleaved runs, medians, ratios, child runs' inputs.

Why interleave: on a two-core machine shared with other work, the speed of
the machine drifts within seconds. Timing A for a while and then B for a
while measures the drift as much as the code. Here every repetition runs
each case once per inner iteration, alternating, so both see the same
machine, the same caches and the same allocator state; the ratio of their
per-repetition means is what is reported, as a median over repetitions
with its range.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "Profile", "Stat", "interleaved", "ratios", "repo_env", "stat",
           "write_events"]

#: The repository root, which child runs import `benchmarks` and its agents from.
ROOT = Path(__file__).resolve().parents[1]


def repo_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (the environment by default) with the repository root first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def write_events(directory: Path, lines: Sequence[bytes]) -> Path:
    """Write `lines` as ``directory/events.jsonl``, the input of a child run; returns the path."""
    source = directory / "events.jsonl"
    source.write_bytes(b"".join(line + b"\n" for line in lines))
    return source


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """How big and how repeated a run is: the full suite or the quick smoke run."""

    quick: bool

    @property
    def reps(self) -> int:
        """Repetitions of each interleaved measurement."""
        return 2 if self.quick else 15

    @property
    def inner(self) -> int:
        """Calls of each case per repetition, for the microsecond-scale benchmarks."""
        return 3 if self.quick else 40


@dataclass(frozen=True, slots=True)
class Stat:
    """The median of a sample with its range; the JSON form of every figure."""

    median: float
    min: float
    max: float

    def scaled(self, factor: float) -> Stat:
        """The same sample in other units (seconds to microseconds, say)."""
        return Stat(self.median * factor, self.min * factor, self.max * factor)

    def as_json(self, digits: int = 3) -> dict[str, float]:
        """``{"median", "min", "max"}`` rounded for the results file."""
        return {"median": round(self.median, digits), "min": round(self.min, digits),
                "max": round(self.max, digits)}


def stat(sample: Sequence[float]) -> Stat:
    """Median, min and max of a non-empty sample."""
    if not sample:
        raise ValueError("a statistic needs at least one measurement")
    return Stat(statistics.median(sample), min(sample), max(sample))


def ratios(numerator: Sequence[float], denominator: Sequence[float]) -> Stat:
    """Per-repetition ratios of two interleaved samples, summarised."""
    return stat([n / d for n, d in zip(numerator, denominator, strict=True)])


def interleaved(cases: Mapping[str, Callable[[], Any]], *, reps: int,
                inner: int) -> dict[str, list[float]]:
    """Time `cases` alternating call by call; seconds per call, one value per repetition.

    Each repetition starts from a collected heap and runs ``inner`` rounds; a
    round calls every case once, in an order that rotates from round to
    round, so no case always runs straight after the same neighbour. One
    untimed warm-up round comes first.
    """
    names = list(cases)
    calls = [cases[name] for name in names]
    for call in calls:
        call()
    totals: dict[str, list[float]] = {name: [] for name in names}
    clock = time.perf_counter
    for _ in range(reps):
        gc.collect()
        spent = [0.0] * len(calls)
        for round_index in range(inner):
            shift = round_index % len(calls)
            for offset in range(len(calls)):
                index = (offset + shift) % len(calls)
                start = clock()
                calls[index]()
                spent[index] += clock() - start
        for index, name in enumerate(names):
            totals[name].append(spent[index] / inner)
    return totals
