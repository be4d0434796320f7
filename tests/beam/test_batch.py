"""The batch host (`AgentBatchDoFn`) through `build_pipeline` on the DirectRunner, over files.

The batch runner works in this process, so `tests.agents.TIMED` and the
provider's call counter, module globals, see every activation; each test
checks that they did, so an out-of-process runner would fail it loudly.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline

from beam_agents.beam import build_pipeline
from beam_agents.errors import ProviderUnavailable
from beam_agents.model import BreakerConfig, ModelConfig, ModelRequest
from beam_agents.runtime import AgentConfig, RetryPolicy
from beam_agents.testing import ScriptedModel
from tests import agents

pytestmark = pytest.mark.timeout(300)

FAST_RETRY = RetryPolicy(retry_initial_ms=5, retry_max_ms=20, max_attempts=4)

#: Provider calls by request content, failed ones included, across every runtime built.
CALLS: Counter[str] = Counter()
_CALLS_LOCK = threading.Lock()


def doomed_or_answer(request: ModelRequest) -> str | BaseException:
    """Never recovers for a request about something "doomed"; answers everything else."""
    content = str(request.messages[-1]["content"])
    with _CALLS_LOCK:
        CALLS[content] += 1
    return ProviderUnavailable("503, for good") if "doomed" in content else f"ok {content}"


def never_recovers() -> ScriptedModel:
    return ScriptedModel(doomed_or_answer)


def line(key: str, event_id: str, time_ms: int, payload: str = "hi") -> str:
    return json.dumps({"entity_key": key, "event_id": event_id, "event_time_ms": time_ms,
                       "payload": payload})


def run(out_dir: Path, lines: list[str], config: AgentConfig | None = None, *,
        agent: str = "tests.agents:counter",
        provider: Callable[[], ScriptedModel] | None = None) -> tuple[bytes, bytes]:
    """Run the batch pipeline over `lines`; return the intents and errors files' bytes."""
    out_dir.mkdir()
    source, intents, errors = (out_dir / name for name in
                               ("events.jsonl", "intents.jsonl", "errors.jsonl"))
    source.write_text("\n".join(lines) + "\n")
    options = PipelineOptions(["--runner=DirectRunner", f"--input_files={source}",
                               f"--output_path={intents}", f"--errors_path={errors}",
                               f"--agent={agent}"])
    pipeline = TestPipeline(options=options)
    build_pipeline(pipeline, options, config, provider=provider)
    pipeline.run().wait_until_finish()
    return intents.read_bytes(), errors.read_bytes()


def rows(data: bytes) -> list[dict]:
    return [json.loads(x) for x in data.splitlines()]


def test_keys_run_concurrently_one_at_a_time_each_and_the_files_ignore_input_order(
        tmp_path: Path) -> None:
    """100 keys x 20 events, shuffled: no overlap within a key, seqs follow event time.

    Events come in pairs that tie on event time, so the event id breaks the tie.
    """
    events = [line(f"k{k:03d}", f"e{19 - n:02d}", 1_000 * (n // 2), f"m{n}")
              for k in range(100) for n in range(20)]
    malformed = ["not json", json.dumps({"entity_key": "k000"}), "{"]
    shuffled = [*events, *malformed]
    random.Random(11).shuffle(shuffled)

    agents.TIMED.clear()
    intents, errors = run(tmp_path / "shuffled", shuffled, agent="tests.agents:timed")
    spans = list(agents.TIMED)
    agents.TIMED.clear()
    in_order = run(tmp_path / "sorted", sorted(shuffled), agent="tests.agents:timed")

    assert len(spans) == len(events) and len(agents.TIMED) == len(events)  # ran in-process
    assert (intents, errors) == in_order  # byte for byte
    assert sorted(e["event"] for e in rows(errors)) == sorted(malformed)
    by_key: dict[str, list[dict]] = defaultdict(list)
    for intent in rows(intents):
        by_key[intent["entity_key"]].append(intent)
    assert len(by_key) == 100
    for key, docs in by_key.items():
        ran = [json.loads(d["payload"]) for d in sorted(docs, key=lambda d: d["seq"])]
        assert [r["seq"] for r in ran] == list(range(1, 21)), key
        assert [(r["t"], r["event"]) for r in ran] == sorted((r["t"], r["event"]) for r in ran)
    per_key: dict[bytes, list[tuple[float, float]]] = defaultdict(list)
    for key_bytes, _, _, start, end in spans:
        per_key[key_bytes].append((start, end))
    for key_bytes, key_spans in per_key.items():
        key_spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(key_spans)), key_bytes
    firsts = sorted(key_spans[0] for key_spans in per_key.values())
    assert any(a[1] > b[0] for a, b in itertools.pairwise(firsts))  # keys did run side by side


def test_a_provider_that_never_recovers_dead_letters_each_event_and_the_key_goes_on(
        tmp_path: Path) -> None:
    """One dead letter per doomed event after max_attempts, carrying its attempts; then e02."""
    CALLS.clear()
    config = AgentConfig(agent="tests.agents:ask", retry=FAST_RETRY,
                         model=ModelConfig(breaker=BreakerConfig(failure_threshold=1000)))
    lines = [line("k", "e00", 1, "doomed"), line("k", "e01", 2, "doomed more"),
             line("k", "e02", 3, "fine"), line("up", "e00", 1, "fine")]
    intents, errors = run(tmp_path / "out", lines, config, provider=never_recovers)

    dead = rows(errors)
    assert sorted((e["entity_key"], e["event_id"], e["seq"], e["attempts"], e.get("retriable"))
                  for e in dead) == [("k", "e00", 1, 4, True), ("k", "e01", 1, 4, True)]
    assert all(b'"attempts":4' in x for x in errors.splitlines())
    assert sorted((i["entity_key"], i["event_id"], i["seq"]) for i in rows(intents)) == [
        ("k", "e02", 1), ("up", "e00", 1)]
    assert dict(CALLS) == {"k: doomed": 4, "k: doomed more": 4, "k: fine": 1, "up: fine": 1}
