"""An activation harness: run an agent on one event without a pipeline."""

from __future__ import annotations

from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.runtime import AgentConfig, KeyedState, Outcome, start_runtime

__all__ = ["run_activation"]


def run_activation(config: AgentConfig, event: AgentEvent,
                   state: KeyedState | None = None) -> Outcome:
    """Run one activation with the clients `config` names and return its outcome.

    The same core the pipelines use; handy for unit-testing an agent. Feed the
    outcome's blobs and seq back as the next `state` to run a sequence.
    """
    with start_runtime(config) as runtime:
        return runtime.activate(state or KeyedState(), event)
