"""Fakes users need for their own agent tests: events, a scripted model, a store, a harness.

* `make_event` and `make_events` build the `AgentEvent` the pipeline would
  decode from the equivalent JSON input line;
* `ScriptedModel` answers model calls from replies written in the test and
  counts them (`ScriptExhaustedError` when it runs out); `LocalModel` is the
  deterministic template model the pipelines default to;
* `InMemoryLongtermConfig` / `InMemoryLongtermStore` are a long-term store
  that logs its operations and fails on demand;
* `InMemoryCallJournal` is a call journal that counts its reads and writes;
* `run_activation` runs one activation through the real core.

from beam_agents.testing import ScriptedModel, make_event, run_activation
"""

from beam_agents.model import InMemoryCallJournal
from beam_agents.model.providers.local import LocalModel
from beam_agents.stores.in_memory import InMemoryLongtermConfig, InMemoryLongtermStore
from beam_agents.testing._events import DEFAULT_EVENT_TIME_MS, make_event, make_events
from beam_agents.testing._harness import run_activation
from beam_agents.testing._scripted import Reply, ScriptedModel, ScriptExhaustedError

__all__ = [
    "DEFAULT_EVENT_TIME_MS",
    "InMemoryCallJournal",
    "InMemoryLongtermConfig",
    "InMemoryLongtermStore",
    "LocalModel",
    "Reply",
    "ScriptExhaustedError",
    "ScriptedModel",
    "make_event",
    "make_events",
    "run_activation",
]
