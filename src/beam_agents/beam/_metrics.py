"""The metrics port bound to Beam's `Metrics`, e.g. ``beam_agents.memory:soft_cap_warnings``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from apache_beam.metrics.metric import Metrics

from beam_agents.metrics import BufferedMetrics, RecordingMetrics

__all__ = ["BeamMetrics", "local_tally"]

#: Set while a local run counts in process as well (see `local_tally`).
_tally: RecordingMetrics | None = None
_tally_lock = threading.Lock()


@contextlib.contextmanager
def local_tally() -> Iterator[RecordingMetrics]:
    """Count every flush in this process too, for a run on the local runner.

    The local runner drops the counters a stateful DoFn increments in a timer
    callback, and the streaming host applies every outcome in one: its
    summary would show no activation committed. A run in this process reads
    this tally instead; DoFns set up inside the block feed it.
    """
    global _tally  # noqa: PLW0603 - one tally per process, as the local runner is
    _tally = RecordingMetrics()
    try:
        yield _tally
    finally:
        _tally = None


class _Tallied:
    """A Beam counter that also adds to the local tally."""

    __slots__ = ("_counter", "_name", "_namespace", "_tally")

    def __init__(self, counter: Any, tally: RecordingMetrics, namespace: str, name: str) -> None:
        self._counter, self._tally = counter, tally
        self._namespace, self._name = namespace, name

    def inc(self, value: int) -> None:
        self._counter.inc(value)
        with _tally_lock:
            self._tally.inc(self._namespace, self._name, value)


class BeamMetrics(BufferedMetrics):
    """Counts through Beam counters, so they show in ``result.metrics()`` and on Dataflow.

    Increments are buffered (see `BufferedMetrics`) and handed to Beam by
    `flush`, which the DoFns call from their bundle thread after each element.
    """

    def _counter(self, namespace: str, name: str) -> Any:
        counter = Metrics.counter(namespace, name)
        tally = _tally
        return counter if tally is None else _Tallied(counter, tally, namespace, name)

    def _report_peak(self, namespace: str, name: str, value: int) -> None:
        # A distribution's max over all workers and bundles is the peak.
        self._distribution(namespace, name).update(value)
        tally = _tally
        if tally is not None:
            with _tally_lock:
                tally.peak(namespace, name, value)

    def _report_sample(self, namespace: str, name: str, value: int) -> None:
        self._distribution(namespace, name).update(value)
        tally = _tally
        if tally is not None:
            with _tally_lock:
                tally.observe(namespace, name, value)

    def _report_note(self, namespace: str, name: str, text: str) -> None:
        # A string set: each worker adds its first; the summary shows one.
        Metrics.string_set(namespace, name).add(text)
        tally = _tally
        if tally is not None:
            with _tally_lock:
                tally.note(namespace, name, text)

    def _new_distribution(self, namespace: str, name: str) -> Any:
        return Metrics.distribution(namespace, name)
