"""The runner-agnostic activation core and what agents see.

An agent is any callable ``agent(ctx: AgentContext)``, sync or async. Hosts
(the Beam DoFn, the Flink function, the CLI, tests) build an
`ActivationRuntime` with `start_runtime` and call `activate` per event; the
outcome is `Committed` (write state, emit intents) or `Failed` (one error record).
"""

from beam_agents.runtime._activation import (
    ActivationRuntime,
    Committed,
    Failed,
    KeyedState,
    Outcome,
)
from beam_agents.runtime._codec import (
    decode_event,
    decode_event_json,
    decode_event_proto,
    error_from_json,
    error_to_json,
    event_to_json,
    intent_to_json,
)
from beam_agents.runtime._config import AgentConfig, load_agent
from beam_agents.runtime._context import AgentContext, IntentTooLargeError, encode_payload
from beam_agents.runtime._errors import decode_input, error_record, stage_of
from beam_agents.runtime._flags import add_agent_flags, agent_config_from_flags
from beam_agents.runtime._host import start_runtime

__all__ = [
    "ActivationRuntime",
    "AgentConfig",
    "AgentContext",
    "Committed",
    "Failed",
    "IntentTooLargeError",
    "KeyedState",
    "Outcome",
    "add_agent_flags",
    "agent_config_from_flags",
    "decode_event",
    "decode_event_json",
    "decode_event_proto",
    "decode_input",
    "encode_payload",
    "error_from_json",
    "error_record",
    "error_to_json",
    "event_to_json",
    "intent_to_json",
    "load_agent",
    "stage_of",
    "start_runtime",
]
