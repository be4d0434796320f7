"""The edge wiring: flags and JSON become an `AgentConfig`, and a config a running runtime.

Every host goes through here; the core names no backend. Why, and how API keys
reach the workers: docs/design.md ("The edge wiring", "Model API keys").
"""

from beam_agents.hosting._flags import add_agent_flags
from beam_agents.hosting._mapping import agent_config_from_flags, agent_config_from_mapping
from beam_agents.hosting._runtime import load_agent, start_runtime, wall_ms
from beam_agents.stores import call_journal_config_from_mapping

__all__ = [
    "add_agent_flags",
    "agent_config_from_flags",
    "agent_config_from_mapping",
    "call_journal_config_from_mapping",
    "load_agent",
    "start_runtime",
    "wall_ms",
]
