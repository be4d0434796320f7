"""Many keys in flight per worker: up to `max_in_flight` activations at once, one per key.

A model call takes hundreds of milliseconds, so a worker that ran one
activation at a time would wait out every call. The scheduler starts an
activation on the runtime's event loop (async agents run there, sync agents on
its bounded thread pool) and returns at once; the host collects the outcome
later, in a callback that has the key's state in scope, and applies it there.

It never runs two activations of one key at once (invariant 10), and a slot
is freed when an activation *finishes*, not when the host gets round to
applying it: a host waiting for a slot can never wait on a callback it blocks.

While the provider's circuit breaker is open it starts nothing, and once the
breaker has cooled down it starts one activation at a time, the trial, until
the breaker closes (invariant 11): an activation started into an open breaker
would only be suspended at its model call and run again.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Hashable
from dataclasses import dataclass

from beam_agents._checks import require_int
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.errors import ProviderUnavailable
from beam_agents.metrics import MetricsSink
from beam_agents.runtime._activation import NAMESPACE, ActivationRuntime, KeyedState, Outcome

__all__ = ["Running", "Scheduler"]


@dataclass(frozen=True, slots=True)
class Running:
    """One activation in flight: the queued event it runs, from which state, and its future.

    ``base_seq`` is the committed seq the activation started from; a host
    applies the outcome only if the key's cells still hold it (see
    `KeyedEngine.on_wake`).
    """

    event: bytes
    attempt: int
    base_seq: int
    future: concurrent.futures.Future[Outcome]
    started_s: float = 0.0


class Scheduler:
    """Runs activations of different keys concurrently on one `ActivationRuntime`.

    Thread-safe: hosts call it from their bundle or timer threads, and
    activations finish on the runtime's loop.

    Args:
        runtime: Where activations run.
        max_in_flight: Activations running at once, at least 1.
        metrics: Receives ``beam_agents.runtime:in_flight`` (+1 at a start,
            -1 at a finish), ``in_flight_peak`` (the most at once) and ``retries``
            (starts of an attempt after the first).
    """

    def __init__(self, runtime: ActivationRuntime, *, max_in_flight: int,
                 metrics: MetricsSink) -> None:
        require_int(max_in_flight, name="--max_in_flight", low=1, field="max_in_flight")
        self._runtime = runtime
        self._max = max_in_flight
        self._metrics = metrics
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._by_key: dict[Hashable, Running] = {}
        # Started and not yet settled: settled by the done callback or by
        # `take`, whichever comes first (see `_running_now`).
        self._unsettled: set[concurrent.futures.Future[Outcome]] = set()
        self._peak = 0
        self._clock = runtime.clock
        self._breaker = runtime.breaker
        # The activation let through as the breaker's trial, while it runs.
        self._trial: concurrent.futures.Future[Outcome] | None = None
        # How long activations take: a running mean and mean deviation, in ms.
        self._mean_ms = 0.0
        self._deviation_ms = 0.0

    @property
    def max_in_flight(self) -> int:
        """The bound on activations running at once."""
        return self._max

    @property
    def busy(self) -> int:
        """Activations started and not yet finished."""
        with self._lock:
            return self._running_now()

    @property
    def peak_in_flight(self) -> int:
        """The most activations that ever ran at once on this scheduler."""
        with self._lock:
            return self._peak

    def running(self, key: Hashable) -> Running | None:
        """The key's activation, finished or not, until the host takes its outcome."""
        with self._lock:
            return self._by_key.get(key)

    def has_slot(self) -> bool:
        """Whether another activation may start now."""
        with self._lock:
            return self._running_now() < self._max

    def start_wait_s(self) -> float | None:
        """How long a start must wait for the provider's breaker: None when it need not.

        Returns:
            None while the breaker is closed, or while it has cooled down and
            no trial is running; else the seconds left of its cooldown, or,
            while a trial runs, how long that trial can be expected to take.
        """
        wait = self._breaker.start_wait_s()
        if wait is None:
            return None
        if wait > 0:
            return wait
        with self._lock:
            trial = self._trial
            mean_s = self._mean_ms / 1000
        if trial is None or trial.done():
            return None
        return max(mean_s / 4, 0.001)

    def breaker_refusal(self) -> ProviderUnavailable:
        """What a start held back by the open breaker failed with, for its dead letter."""
        return self._breaker.refusal()

    def try_start(self, key: Hashable, state: KeyedState, event: bytes, *, attempt: int) -> bool:
        """Start the activation of `event` for `key` if a slot is free; returns at once.

        The check and the start are one step, so hosts on several threads
        never run more than `max_in_flight` between them.

        Returns:
            Whether it started; False when every slot is taken, or the
            provider's breaker holds starts (`start_wait_s`).

        Raises:
            RuntimeError: `key` already has an activation whose outcome was not taken.
        """
        breaker_wait = self._breaker.start_wait_s()
        with self._lock:
            if key in self._by_key:
                raise RuntimeError(f"key {key!r} already has an activation in flight")
            busy = self._running_now()
            if busy >= self._max:
                return False
            trial = breaker_wait is not None
            if trial and (breaker_wait or (self._trial is not None and not self._trial.done())):
                return False
            self._peak = max(self._peak, busy + 1)
            future = self._runtime.submit(self._runtime.activate_async(
                state, AgentEvent.FromString(event), attempt=attempt))
            self._unsettled.add(future)
            if trial:
                self._trial = future
            running = Running(event=event, attempt=attempt, base_seq=state.seq, future=future,
                              started_s=self._clock())
            self._by_key[key] = running
        self._metrics.inc(NAMESPACE, "in_flight")
        self._metrics.peak(NAMESPACE, "in_flight_peak", self._peak)
        if attempt > 1:
            self._metrics.inc(NAMESPACE, "retries")
        future.add_done_callback(lambda _: self._finished(running))
        return True

    def expected_remaining_ms(self, key: Hashable) -> int:
        """How long until the key's running activation can be expected to finish, in ms.

        From how long activations have taken (mean plus half the mean
        deviation): a host wakes a key then, not every `POLL_MS`, which is
        most of what a streaming worker spends CPU on. Once past it, a quarter
        of the mean. 0 when the key runs nothing or nothing has finished yet.
        """
        with self._lock:
            running = self._by_key.get(key)
            mean, deviation = self._mean_ms, self._deviation_ms
        if running is None or not mean or running.future.done():
            return 0
        elapsed = (self._clock() - running.started_s) * 1000
        left = mean + deviation / 2 - elapsed
        return int(left if left > 0 else mean / 4)

    def _finished(self, running: Running) -> None:
        took_ms = (self._clock() - running.started_s) * 1000
        with self._changed:
            settled = self._settle(running.future)
            if self._mean_ms:
                self._deviation_ms += (abs(took_ms - self._mean_ms) - self._deviation_ms) / 8
                self._mean_ms += (took_ms - self._mean_ms) / 8
            else:
                self._mean_ms = took_ms
            self._changed.notify_all()
        if settled:
            self._metrics.inc(NAMESPACE, "in_flight", -1)

    def _settle(self, future: concurrent.futures.Future[Outcome]) -> bool:
        """Free the slot of a finished activation, once; call with the lock held."""
        if future not in self._unsettled:
            return False
        self._unsettled.remove(future)
        return True

    def _running_now(self) -> int:
        """Activations started and not finished; call with the lock held.

        A count kept at start and at the finish, O(1) where hosts ask for
        every key they look at. The finish is the done callback, or `take`
        when the host takes the outcome before that callback has run: a
        future's result wakes its waiters before its callbacks run, and the
        key's next start must not see its last activation's slot still taken,
        which made the in-flight peak one more than ran at once.
        """
        return len(self._unsettled)

    def take(self, key: Hashable, *, wait_s: float = 0.0) -> tuple[Running, Outcome] | None:
        """The key's finished activation and its outcome, waiting up to `wait_s`; else None."""
        with self._lock:
            running = self._by_key.get(key)
        if running is None:
            return None
        try:
            outcome = running.future.result(timeout=wait_s)
        except concurrent.futures.TimeoutError:
            return None
        with self._changed:
            del self._by_key[key]
            settled = self._settle(running.future)
            if settled:
                self._changed.notify_all()
        if settled:
            self._metrics.inc(NAMESPACE, "in_flight", -1)
        return running, outcome

    def wait_for(self, key: Hashable, timeout_s: float) -> None:
        """Block until the key's running activation finishes, or `timeout_s` passes.

        At once if the key runs nothing; the outcome stays for `take`.
        """
        with self._lock:
            running = self._by_key.get(key)
        if running is not None:
            concurrent.futures.wait([running.future], timeout=timeout_s)

    def wait_for_slot(self, timeout_s: float) -> None:
        """Block until a slot is free, or `timeout_s` passes; at once if one is.

        The check and the wait hold the lock the finishing activation takes
        to notify, so a slot freed between a host's `has_slot` and this call
        is not waited out.
        """
        with self._changed:
            self._changed.wait_for(lambda: self._running_now() < self._max, timeout_s)

    def wait_for_change(self, timeout_s: float) -> None:
        """Block until an activation finishes, or `timeout_s` passes."""
        with self._changed:
            self._changed.wait(timeout_s)
