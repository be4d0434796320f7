"""An agent run end to end over a file of JSON lines, as ``beam-agents run`` runs it.

`run_file` reads the lines as ``beam-agents run`` does (bounded lines, a
malformed one a DECODE dead letter), groups the events by entity and runs
every entity through the engine of the batch path, many entities at once,
each in event-time order, retries waiting out their backoff, the timeouts of
pending waits run once the input is done. Only the runner is missing: no
Beam, no shuffle, so it runs in a test in well under a second per hundred
events with a scripted model.
"""

from __future__ import annotations

import glob
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from beam_agents.hosting import (
    InputDecoder,
    KeyedEngine,
    KeyRuns,
    error_to_json,
    model_provider,
    read_lines,
    start_runtime,
    wall_ms,
)
from beam_agents.metrics import NoopMetrics
from beam_agents.model import ModelProvider
from beam_agents.runtime import AgentConfig, ErrorRecord
from beam_agents.stores.memory import InMemoryLongtermStore
from beam_agents.testing._env import configure
from beam_agents.testing._outputs import DeadLetter, Emitted, decode_line

__all__ = ["RunResult", "run_file"]


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a run over a file produced: the two outputs, decoded, and the store it wrote.

    Attributes:
        intents: Every intent, each entity's in the order it committed them.
        dead_letters: Every dead letter; malformed lines first.
        longterm: The long-term rows the run committed, by entity and key;
            empty when it had no long-term store.
    """

    intents: tuple[Emitted, ...]
    dead_letters: tuple[DeadLetter, ...]
    longterm: dict[str, dict[str, bytes]]


def run_file(agent: Callable[..., Any] | str | AgentConfig, input_path: str | Path, *,
             model: ModelProvider | None = None, longterm: bool = True,
             output_path: str | Path | None = None, errors_path: str | Path | None = None,
             **settings: Any) -> RunResult:
    """Run `agent` over the JSON lines at `input_path`, as ``beam-agents run`` would.

    Args:
        agent: The agent, its ``"module:callable"`` name, or an `AgentConfig`.
        input_path: A file of JSON lines, one event each, or a glob of such
            files (``--input_files``).
        model: The model, e.g. a `ScriptedModel`; by default the config's.
        longterm: Give the agent a long-term store, private to this run.
        output_path: Also write the intents there, one JSON line each, as
            ``--output_path`` does.
        errors_path: Also write the dead letters there (``--errors_path``).
        **settings: `AgentConfig` fields, e.g. ``max_in_flight=4``.

    Raises:
        ConfigError: the agent does not load, or a setting is out of range.
        FileNotFoundError: no file matches `input_path`.
    """
    config = configure(agent, settings)
    paths = sorted(glob.glob(str(input_path))) or [str(input_path)]
    decode = InputDecoder("json", NoopMetrics(), max_event_bytes=config.max_event_bytes)
    lines: list[tuple[str, bytes]] = []
    by_key: dict[bytes, list[bytes]] = defaultdict(list)
    for path in paths:
        with open(path, "rb") as stream:
            for line in read_lines(stream, max_bytes=config.max_event_bytes):
                decoded = decode(line)
                if isinstance(decoded, ErrorRecord):
                    lines.append(("errors", error_to_json(decoded)))
                else:
                    by_key[decoded.entity_key].append(decoded.SerializeToString(
                        deterministic=True))
    store = InMemoryLongtermStore() if longterm else None
    provider = model if model is not None else model_provider(config.model)
    with start_runtime(config, provider=provider, store=store) as runtime:
        runs = KeyRuns(KeyedEngine.over(runtime), clock_ms=wall_ms)
        for key in sorted(by_key):
            lines.extend(runs.add(key, by_key[key]))
            lines.extend(runs.advance(block=False))
        lines.extend(runs.finish())
        rows = {} if store is None else store.rows()
    for path_given, channel in ((output_path, "intents"), (errors_path, "errors")):
        if path_given is not None:
            Path(path_given).write_bytes(b"".join(line + b"\n" for where, line in lines
                                                  if where == channel))
    decoded_lines = [decode_line(channel, line) for channel, line in lines]
    longterm_rows: dict[str, dict[str, bytes]] = defaultdict(dict)
    for (entity, row_key), row in rows.items():
        longterm_rows[entity.decode("utf-8", "backslashreplace")][row_key] = bytes(row.value)
    return RunResult(tuple(item for item in decoded_lines if isinstance(item, Emitted)),
                     tuple(item for item in decoded_lines if isinstance(item, DeadLetter)),
                     dict(longterm_rows))
