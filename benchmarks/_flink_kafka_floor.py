# mypy: disable-error-code="misc"
"""B15's runner floor: the native job on Kafka with its Activate step doing no library work.

``python -m benchmarks._flink_kafka_floor --latency_ms N [the job's flags]``
builds the job ``make demo-flink`` runs (the Kafka source, Decode, the key-by,
the operator whose snapshot holds its timers, the exactly-once Kafka sinks,
the same bundles and checkpoints), with `FloorFunction` in place of
`AgentKeyedProcessFunction`: each key's events "run" one at a time for `N` ms,
on a processing-time timer, through a queue in keyed state. What the job
spends on it, and how close it comes to every key busy, is what the runner
itself costs and allows for B6's workload.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, ValueStateDescriptor

from beam_agents.runtime import AgentEvent

__all__ = ["FloorFunction", "main"]


class FloorFunction(KeyedProcessFunction):
    """One activation per key at a time, each a timer `latency_ms` after its start.

    Per event, the state a minimal serial-per-key function needs: the event
    queued, the running one kept, one timer; its intent is a line with the
    entity key and the event id, as the driver matches outcomes by.
    """

    def __init__(self, latency_ms: int) -> None:
        self._latency_ms = latency_ms
        self._queue: Any = None
        self._running: Any = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self._queue = runtime_context.get_list_state(
            ListStateDescriptor("floor_queue", Types.PICKLED_BYTE_ARRAY()))
        self._running = runtime_context.get_state(
            ValueStateDescriptor("floor_running", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value: tuple[str, bytes], ctx: Any) -> Iterator[str]:
        event = bytes(value[1])
        if self._running.value() is None:
            self._start(event, ctx)
        else:
            self._queue.add(event)
        return iter(())

    def on_timer(self, timestamp: int, ctx: Any) -> Iterator[str]:
        running = self._running.value()
        if running is None:
            return
        yield json.dumps({"entity_key": bytes.fromhex(ctx.get_current_key()).decode(),
                          "event_id": AgentEvent.FromString(running).event_id})
        queued = list(self._queue.get() or ())
        if queued:
            self._queue.update(queued[1:])
            self._start(queued[0], ctx)
        else:
            self._running.clear()

    def _start(self, event: bytes, ctx: Any) -> None:
        self._running.update(event)
        timers = ctx.timer_service()
        timers.register_processing_time_timer(timers.current_processing_time()
                                              + self._latency_ms)


def main(argv: list[str]) -> int:
    """Run the job with `FloorFunction` as its Activate step; see the module docstring."""
    import beam_agents.flink._job as job  # noqa: PLC0415
    from beam_agents.flink import main as run_job  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m benchmarks._flink_kafka_floor")
    parser.add_argument("--latency_ms", type=int, required=True)
    known, job_flags = parser.parse_known_args(argv)
    # The job builds its Activate step from this name; the floor takes its place.
    setattr(job, "AgentKeyedProcessFunction",  # noqa: B010 - the job's own name for it
            lambda *args, **kwargs: FloorFunction(known.latency_ms))
    return run_job(job_flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
