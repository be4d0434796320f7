"""A model failure dead-letters at stage MODEL, whatever `ModelError` subclass it is.

The errors output is triaged by stage: an operator routes MODEL records to
whoever owns the provider (quota, credentials, a refused prompt), and AGENT
records to whoever owns the agent's code. A `ModelError` that fell through to
STAGE_AGENT would send provider outages to the wrong people, so the mapping
is pinned here for the base class, both built-in subclasses and a subclass a
provider adapter defines itself, both at `stage_of` and end to end through an
activation.
"""

from __future__ import annotations

import pytest

from beam_agents.errors import ModelError, ProviderRejected, ProviderUnavailable
from beam_agents.hosting import KeyedState, start_runtime
from beam_agents.metrics import RecordingMetrics
from beam_agents.runtime import AgentConfig, ErrorRecord, Failed
from beam_agents.runtime._errors import stage_of
from beam_agents.testing import ScriptedModel, make_event

pytestmark = pytest.mark.timeout(60)


class QuotaExhaustedError(ModelError):
    """A provider adapter's own refinement of a model failure."""


MODEL_ERRORS = [
    ModelError("the provider failed", model_id="m", status=500),
    ProviderUnavailable("503 from the provider"),
    ProviderRejected("400: the prompt was refused"),
    QuotaExhaustedError("quota exhausted for project p"),
]
IDS = [type(exc).__name__ for exc in MODEL_ERRORS]


@pytest.mark.parametrize("exc", MODEL_ERRORS, ids=IDS)
def test_stage_of_maps_every_model_error_to_stage_model(exc: ModelError) -> None:
    """ModelError and each subclass belong to STAGE_MODEL, never STAGE_AGENT."""
    assert stage_of(exc) == ErrorRecord.STAGE_MODEL


def test_an_error_outside_the_model_tree_is_an_agent_failure() -> None:
    """The contrast: a plain exception from the agent's own code is STAGE_AGENT."""
    assert stage_of(RuntimeError("agent bug")) == ErrorRecord.STAGE_AGENT


@pytest.mark.parametrize("exc", MODEL_ERRORS, ids=IDS)
def test_a_failed_model_call_dead_letters_with_stage_model(exc: ModelError) -> None:
    """The activation fails with one error record at STAGE_MODEL naming the error's type."""
    metrics = RecordingMetrics()
    model = ScriptedModel([exc])
    config = AgentConfig(agent="tests.agents:chatty")

    with start_runtime(config, provider=model, metrics=metrics) as runtime:
        outcome = runtime.activate(KeyedState(seq=6),
                                   make_event("customer-1", {"text": "hi"}, event_id="e-7"))

    assert isinstance(outcome, Failed)
    record = outcome.error
    assert record.stage == ErrorRecord.STAGE_MODEL
    kind = type(exc)
    assert record.error_type == f"{kind.__module__}.{kind.__qualname__}"
    assert (record.entity_key, record.seq, record.event_id) == (b"customer-1", 7, "e-7")
    assert record.retriable == exc.retriable
    assert model.calls == 1
    if not exc.retriable:  # a retriable failure is counted by the host, as it suspends
        assert metrics.get("beam_agents.runtime", "errors_model") == 1
        assert metrics.get("beam_agents.runtime", "errors_agent") == 0
