"""Fakes users need for their own agent tests: events, a scripted model, a store, a harness.

* `make_event` and `make_events` build the `AgentEvent` the pipeline would
  decode from the equivalent JSON input line;
* `ScriptedModel` answers model calls from replies written in the test and
  counts them (`ScriptExhaustedError` when it runs out), and `calls_tool`
  scripts a reply that asks for a tool call in one line; `LocalModel` is the
  deterministic template model the pipelines default to;
* `InMemoryLongtermConfig` / `InMemoryLongtermStore` are a long-term store
  that logs its operations and fails on demand;
* `InMemoryCallJournal` is a call journal that counts its reads and writes;
* `run_activation` runs one activation through the real core.

`AgentTestEnv` is where an agent test starts: one runtime for the whole test,
events sent as dicts or keyword fields, intents and dead letters read back as
Python values (`Emitted`, `DeadLetter`), working memory and long-term rows
read per entity, and `AgentTestEnv.replay` to check that a rerun over the
recorded calls decides the same and pays nothing. `run_file` runs an agent
over a file of JSON lines as ``beam-agents run`` does::

    from beam_agents.testing import AgentTestEnv, ScriptedModel

    with AgentTestEnv(my_agent, model=ScriptedModel(["Hi!"])) as env:
        env.send("customer-1", text="hello")
        assert env.intents[0].payload == {"text": "Hi!"}
        env.replay()
"""

from beam_agents.model import InMemoryCallJournal
from beam_agents.model.providers.local import LocalModel
from beam_agents.stores.memory import InMemoryLongtermConfig, InMemoryLongtermStore
from beam_agents.testing._env import AgentTestEnv, Sent
from beam_agents.testing._events import DEFAULT_EVENT_TIME_MS, make_event, make_events
from beam_agents.testing._harness import run_activation
from beam_agents.testing._outputs import DeadLetter, Emitted
from beam_agents.testing._run_file import RunResult, run_file
from beam_agents.testing._scripted import Reply, ScriptedModel, ScriptExhaustedError, calls_tool

__all__ = [
    "DEFAULT_EVENT_TIME_MS",
    "AgentTestEnv",
    "DeadLetter",
    "Emitted",
    "InMemoryCallJournal",
    "InMemoryLongtermConfig",
    "InMemoryLongtermStore",
    "LocalModel",
    "Reply",
    "RunResult",
    "ScriptExhaustedError",
    "ScriptedModel",
    "Sent",
    "calls_tool",
    "make_event",
    "make_events",
    "run_activation",
    "run_file",
]
