"""The metrics port bound to the Flink operator's metric group, and the run's own tally of it."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from beam_agents.metrics import BufferedMetrics

__all__ = ["COUNTERS_DIR_PARAMETER", "RECEIVED", "FlinkMetrics", "read_tallies"]

#: The decoded events the Activate operator received. The Decode operator
#: counts ``events`` as it reads lines, but only Activate leaves a tally, at
#: its last drain, when every count is in: so the run's events read are
#: these plus the DECODE dead letters it wrote.
RECEIVED = ("beam_agents.flink", "events_received")

#: The job parameter naming the folder where each subtask keeps its tally
#: (`FlinkMetrics.write_tally`); set by a run whose client can read that folder.
COUNTERS_DIR_PARAMETER = "beam_agents.counters_dir"


class FlinkMetrics(BufferedMetrics):
    """Counts through Flink counters, ``<operator scope>.beam_agents.memory.soft_cap_warnings``.

    The namespace becomes a metric subgroup, so the Flink UI and reporters
    show the same ``namespace:name`` pairs as Beam's counters. PyFlink binds
    a counter to the calling thread's bundle, and sync agents run on a pool
    thread, so increments are buffered (`BufferedMetrics`) and `flush`ed by
    the functions after each element.

    It also keeps a tally of everything it reported: a Flink job's client
    gets no metrics back from ``execute`` (PyFlink's functions have no
    accumulators), so the end-of-run summary reads the tallies each subtask
    leaves (`write_tally`) where the client can reach them.
    """

    def __init__(self, group: Any) -> None:
        super().__init__()
        self._group = group
        self._highest: dict[tuple[str, str], int] = {}
        self._tally: Counter[tuple[str, str]] = Counter()
        self._first_notes: dict[tuple[str, str], str] = {}

    def _counter(self, namespace: str, name: str) -> Any:
        return _Tallied(self._group.add_group(namespace).counter(name), self._tally,
                        (namespace, name))

    def _report_peak(self, namespace: str, name: str, value: int) -> None:
        key = (namespace, name)
        if key not in self._highest:
            self._group.add_group(namespace).gauge(name, lambda: self._highest[key])
        self._highest[key] = max(self._highest.get(key, value), value)

    def _report_sample(self, namespace: str, name: str, value: int) -> None:
        self._distribution(namespace, name).update(value)

    def _report_note(self, namespace: str, name: str, text: str) -> None:
        self._first_notes.setdefault((namespace, name), text)

    def _new_distribution(self, namespace: str, name: str) -> Any:
        return self._group.add_group(namespace).distribution(name)

    def write_tally(self, folder: str, name: str) -> None:
        """Replace ``folder/name.json`` with what was reported so far; call after `flush`.

        Replaced whole (a temporary file renamed over it), so a reader never
        sees half of one.
        """
        tally = {"counters": _flat(self._tally), "peaks": _flat(self._highest),
                 "notes": _flat(self._first_notes)}
        target = Path(folder) / f"{name}.json"
        scratch = target.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps(tally, sort_keys=True))
        os.replace(scratch, target)


class _Tallied:
    """A Flink counter that also adds to the metrics' own tally."""

    __slots__ = ("_counter", "_key", "_tally")

    def __init__(self, counter: Any, tally: Counter[tuple[str, str]],
                 key: tuple[str, str]) -> None:
        self._counter, self._tally, self._key = counter, tally, key

    def inc(self, value: int) -> None:
        self._counter.inc(value)
        self._tally[self._key] += value


def _flat(values: Any) -> dict[str, Any]:
    return {f"{namespace}:{name}": value for (namespace, name), value in values.items()}


def read_tallies(folder: Path) -> tuple[Counter[tuple[str, str]], dict[tuple[str, str], int],
                                        dict[tuple[str, str], str], int]:
    """Sum the subtasks' tallies in `folder`: counters, peaks, notes, and restarted subtasks.

    Each file is ``<operator>-<subtask>-<attempt>.json``; only a subtask's
    last attempt counts, as a restarted one counts again from its restore.
    The last value says how many subtasks restarted, whose counts therefore
    start at their restore, not at the input's start.
    """
    latest: dict[str, tuple[int, Path]] = {}
    for path in folder.glob("*.json"):
        subtask, _, attempt = path.stem.rpartition("-")
        if attempt.isdigit() and int(attempt) >= latest.get(subtask, (-1, path))[0]:
            latest[subtask] = (int(attempt), path)
    counters: Counter[tuple[str, str]] = Counter()
    peaks: dict[tuple[str, str], int] = {}
    notes: dict[tuple[str, str], str] = {}
    for _, path in latest.values():
        tally = json.loads(path.read_text())
        for flat, value in tally["counters"].items():
            counters[_pair(flat)] += int(value)
        for flat, value in tally["peaks"].items():
            peaks[_pair(flat)] = max(peaks.get(_pair(flat), 0), int(value))
        for flat, text in tally["notes"].items():
            notes.setdefault(_pair(flat), str(text))
    return counters, peaks, notes, sum(attempt > 0 for attempt, _ in latest.values())


def _pair(flat: str) -> tuple[str, str]:
    namespace, _, name = flat.partition(":")
    return namespace, name
