"""The native Flink adapter: the activation engine in a PyFlink keyed operator.

``AgentKeyedProcessFunction`` is the twin of ``AgentDoFn``: a per-key queue in
keyed state, many keys in flight per slot, and timers that apply outcomes.
`build_job` and `run` assemble the same read -> decode -> activate -> write
graph as the Beam pipeline, with the same agent flags, on Flink's DataStream
API, from files or a Kafka topic (`KafkaJobOptions`) to files or topics;
`agent_stream` is that graph without its sources and sinks.
"""

from beam_agents.flink._flags import expand_input_files, job_parser, main, parse_args, run
from beam_agents.flink._function import ERRORS, AgentKeyedProcessFunction
from beam_agents.flink._job import (
    DecodeEvents,
    FlinkJobOptions,
    agent_stream,
    build_job,
    environment,
    flink_settings,
)
from beam_agents.flink._kafka import KafkaJobOptions
from beam_agents.flink._metrics import FlinkMetrics

__all__ = [
    "ERRORS",
    "AgentKeyedProcessFunction",
    "DecodeEvents",
    "FlinkJobOptions",
    "FlinkMetrics",
    "KafkaJobOptions",
    "agent_stream",
    "build_job",
    "environment",
    "expand_input_files",
    "flink_settings",
    "job_parser",
    "main",
    "parse_args",
    "run",
]
