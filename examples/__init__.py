"""Example agents for beam-agents."""
