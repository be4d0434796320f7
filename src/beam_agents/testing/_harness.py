"""An activation harness: run an agent on one event without a pipeline."""

from __future__ import annotations

from beam_agents.hosting import KeyedState, start_runtime
from beam_agents.model import ModelProvider
from beam_agents.runtime import AgentConfig, AgentEvent, Outcome

__all__ = ["run_activation"]


def run_activation(config: AgentConfig, event: AgentEvent,
                   state: KeyedState | None = None, *,
                   provider: ModelProvider | None = None) -> Outcome:
    """Run one activation with the clients `config` names and return its outcome.

    The same core the pipelines use; handy for unit-testing an agent. Feed the
    outcome's blobs and seq back as the next `state` to run a sequence.

    Args:
        config: The agent and its limits; its long-term store, if any, is
            opened for the run and closed after it.
        event: The input, e.g. from `make_event`.
        state: The entity's keyed state before the event; empty by default.
        provider: A model to use instead of the one ``config.model`` names,
            e.g. a `ScriptedModel`. Its ``aclose`` is awaited when the run
            ends, on the loop that ran it (providers hold one client per
            loop); a `ScriptedModel` keeps its counters and script position
            through that, so it can serve the next run and be inspected.
    """
    with start_runtime(config, provider=provider) as runtime:
        return runtime.activate(state or KeyedState(), event)
