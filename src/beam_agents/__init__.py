"""beam-agents: stateful LLM agents inside Apache Beam and Apache Flink pipelines.

Everything an agent's author writes against is here::

    import beam_agents

    @beam_agents.tool
    def lookup_order(order_id: str) -> dict:
        \"\"\"Look up an order.\"\"\"
        ...

    @beam_agents.agent(tools=[lookup_order])
    def support(ctx: beam_agents.AgentContext) -> None:
        reply = ctx.model.complete([{"role": "user", "content": ctx.payload_json()["text"]}])
        ctx.emit("reply", {"text": reply.text})

and tested with `AgentTestEnv` and `ScriptedModel`. The names come from the
subpackages where they live (`beam_agents.runtime`, `beam_agents.model`,
`beam_agents.testing`, `beam_agents.errors`), which stay importable as before.

A host (a pipeline, a job, a worker of one's own) starts from
`beam_agents.hosting`; the runner adapters are `beam_agents.beam` and
`beam_agents.flink`, the store backends `beam_agents.stores`, built on what
`beam_agents.backend` exports. The core packages (`beam_agents.memory`,
`beam_agents.model`, `beam_agents.runtime`) import no runner and no cloud
client, and importing this package loads none of the names below until one
is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from beam_agents.errors import (
        BeamAgentsError,
        ConfigError,
        MemoryOverflow,
        ModelError,
        ToolError,
        ToolUnavailable,
    )
    from beam_agents.model import Message, ModelResponse
    from beam_agents.runtime import AgentConfig, AgentContext, agent, tool
    from beam_agents.testing import AgentTestEnv, ScriptedModel

#: Each name of the author's vocabulary, and the module it lives in.
_HOME = {
    "agent": "beam_agents.runtime",
    "tool": "beam_agents.runtime",
    "AgentContext": "beam_agents.runtime",
    "AgentConfig": "beam_agents.runtime",
    "Message": "beam_agents.model",
    "ModelResponse": "beam_agents.model",
    "AgentTestEnv": "beam_agents.testing",
    "ScriptedModel": "beam_agents.testing",
    "BeamAgentsError": "beam_agents.errors",
    "ConfigError": "beam_agents.errors",
    "MemoryOverflow": "beam_agents.errors",
    "ModelError": "beam_agents.errors",
    "ToolError": "beam_agents.errors",
    "ToolUnavailable": "beam_agents.errors",
}

__all__ = [
    "AgentConfig",
    "AgentContext",
    "AgentTestEnv",
    "BeamAgentsError",
    "ConfigError",
    "MemoryOverflow",
    "Message",
    "ModelError",
    "ModelResponse",
    "ScriptedModel",
    "ToolError",
    "ToolUnavailable",
    "agent",
    "tool",
]


def __getattr__(name: str) -> Any:
    # Loaded on first use, so that a worker importing one core package does
    # not pay for the test environment (PEP 562).
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'beam_agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
