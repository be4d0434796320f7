"""beam-agents: stateful LLM agents inside Apache Beam and Apache Flink pipelines.

The core packages (`beam_agents.memory`, `beam_agents.model`,
`beam_agents.runtime`) import no runner and no cloud client; runner adapters
(`beam_agents.beam`, `beam_agents.flink`) and store backends
(`beam_agents.stores`) sit at the edges.
"""

__version__ = "0.1.0"
