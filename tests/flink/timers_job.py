"""A keyed function that keeps a processing-time timer chain going, and a crash on demand.

Run as ``python -m tests.flink.timers_job DIR [--stock]``. The job watches
``DIR/in`` for lines ``key`` and runs them through `keyed_process` (with
``--stock``, PyFlink's own operator, to see it lose timers). Each key's
function sets a processing-time timer 100 ms ahead, and each firing sets the
next, counting firings in keyed state; every firing appends ``fire KEY N`` and
every open ``open`` to ``DIR/log``. A line ``crash`` fails the task once
(``DIR/crashed`` marks it done), and Flink restores the last checkpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pyflink.common import Configuration, Duration, Types, WatermarkStrategy
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.state import ValueStateDescriptor

from beam_agents.flink._operator import keyed_process

TIMER_MS = 100


class Crash:
    """Fails the first ``crash`` line; restored, it lets every line through."""

    def __init__(self, root: str) -> None:
        self._root = root

    def __call__(self, line: str) -> str:
        crashed = Path(self._root, "crashed")
        if line == "crash" and not crashed.exists():
            crashed.touch()
            raise RuntimeError("the crash the test asked for")
        return line


class Chain(KeyedProcessFunction):
    """One timer at a time per key, each set by the one before."""

    def __init__(self, root: str) -> None:
        self._log = str(Path(root, "log"))

    def open(self, runtime_context: RuntimeContext) -> None:
        self._fired = runtime_context.get_state(ValueStateDescriptor("fired", Types.LONG()))
        self._write("open")

    def process_element(self, value: str, ctx: Any) -> Any:
        timers = ctx.timer_service()
        timers.register_processing_time_timer(timers.current_processing_time() + TIMER_MS)
        yield from ()

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        fired = (self._fired.value() or 0) + 1
        self._fired.update(fired)
        timers = ctx.timer_service()
        timers.register_processing_time_timer(timers.current_processing_time() + TIMER_MS)
        self._write(f"fire {ctx.get_current_key()} {fired}")
        yield from ()

    def _write(self, line: str) -> None:
        with open(self._log, "a", encoding="utf-8") as log:
            log.write(line + "\n")


def main(root: str, stock: bool) -> None:
    conf = Configuration()
    for key, value in {"restart-strategy.type": "fixed-delay",
                       "restart-strategy.fixed-delay.attempts": "2",
                       "restart-strategy.fixed-delay.delay": "500 ms",
                       "python.fn-execution.bundle.size": "16"}.items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.enable_checkpointing(300)
    env.set_parallelism(1)
    env.set_python_executable(sys.executable)
    source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(),
                                                  str(Path(root, "in")))
              .monitor_continuously(Duration.of_millis(200)).build())
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
    keyed = (lines.map(Crash(root), output_type=Types.STRING())
             .filter(lambda line: line != "crash")
             .key_by(lambda line: line, key_type=Types.STRING()))
    chain = Chain(root)
    if stock:
        keyed.process(chain, output_type=Types.STRING())
    else:
        keyed_process(keyed, chain, Types.STRING(), "Chain")
    env.execute("timers")


if __name__ == "__main__":
    main(sys.argv[1], "--stock" in sys.argv[2:])
