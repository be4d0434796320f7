"""Fakes users need for their own agent tests: an in-memory store and a scripted model.

from beam_agents.testing import InMemoryLongtermConfig, LocalModel, run_activation
"""

from beam_agents.model.providers.local import LocalModel
from beam_agents.stores.memory import InMemoryLongtermConfig, InMemoryLongtermStore
from beam_agents.testing._harness import run_activation

__all__ = ["InMemoryLongtermConfig", "InMemoryLongtermStore", "LocalModel", "run_activation"]
