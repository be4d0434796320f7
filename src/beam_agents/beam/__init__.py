"""The Beam adapter: AgentDoFn (streaming), AgentBatchDoFn (batch), the pipeline, its options."""

from beam_agents.beam._batch import AgentBatchDoFn
from beam_agents.beam._dofn import ERRORS, AgentDoFn
from beam_agents.beam._metrics import BeamMetrics
from beam_agents.beam._options import (
    AgentPipelineOptions,
    agent_config_from_options,
    check_io,
    snapshot_plan_from_options,
)
from beam_agents.beam._pipeline import (
    DecodeEvents,
    build_pipeline,
    check_runner_flags,
    output_files,
    run,
)
from beam_agents.beam._pubsub import redrive_subscription

__all__ = [
    "ERRORS",
    "AgentBatchDoFn",
    "AgentDoFn",
    "AgentPipelineOptions",
    "BeamMetrics",
    "DecodeEvents",
    "agent_config_from_options",
    "build_pipeline",
    "check_io",
    "check_runner_flags",
    "output_files",
    "redrive_subscription",
    "run",
    "snapshot_plan_from_options",
]
