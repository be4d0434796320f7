"""Chaos faults through a real Beam pipeline: the streaming DirectRunner, with a real store.

The pipeline is the streaming host (`AgentDoFn` over Beam keyed state and
timers) fed by a `TestStream`, writing long-term memory to SQLite or to the
Firestore server. Two faults go through it end to end:

* the provider fails, for a while (the key suspends in Beam state, retries
  by timer, and commits without paying twice for a call) or for good (the
  event is dead-lettered after its attempts);
* the state blob is corrupt: `SeededAgentDoFn` writes damaged bytes into a
  key's Beam state before its first event, and every event of that key must
  be dead-lettered with stage STATE_CORRUPT while the state stays as it was.

The runner works in this process, so the collector, the seeds and the
provider's counters are module globals that survive the DoFn's pickling.
"""

from __future__ import annotations

import inspect
import json
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.test_stream import TestStream as EventStream
from apache_beam.transforms.window import TimestampedValue

from beam_agents.beam import ERRORS, AgentDoFn, DecodeEvents
from beam_agents.errors import ProviderUnavailable
from beam_agents.hosting import error_from_json, event_to_json
from beam_agents.memory import LongtermStoreConfig
from beam_agents.model import BreakerConfig, ModelConfig
from beam_agents.runtime import AgentConfig, AgentEvent, ErrorRecord, RetryPolicy
from beam_agents.testing import ScriptedModel, make_events
from tests.chaos._faults import (
    GARBAGE,
    Answers,
    blob_with_corrupt_ring,
    committed_rows,
    reference_run,
)

pytestmark = pytest.mark.timeout(120)

RETRY = RetryPolicy(retry_initial_ms=5, retry_max_ms=20, max_attempts=4)
STEADY = ModelConfig(breaker=BreakerConfig(failure_threshold=1000))
KEYED = beam.typehints.Tuple[bytes, bytes]

#: Lines the pipeline wrote, by output.
COLLECTED: defaultdict[str, list[bytes]] = defaultdict(list)
#: The provider behaviour every runtime of the current test answers with.
ANSWERS: list[Answers] = [Answers()]
#: Keyed state to write before a key's first event, and the state each event found.
SEEDS: dict[bytes, tuple[bytes, int]] = {}
SEEN: defaultdict[bytes, list[tuple[bytes | None, int | None]]] = defaultdict(list)


def collect(line: bytes, channel: str) -> None:
    COLLECTED[channel].append(line)


def answering_provider() -> ScriptedModel:
    """Built by each runtime in setup(); answers as the test's `Answers` says."""
    return ANSWERS[0].model()


_PARAMS = inspect.signature(AgentDoFn.process).parameters


class SeededAgentDoFn(AgentDoFn):
    """`AgentDoFn` that first writes `SEEDS` into a key's state, then records what it finds."""

    def process(  # type: ignore[override]
        self,
        element: tuple[bytes, bytes],
        memory: Any = _PARAMS["memory"].default,
        llm_cache: Any = _PARAMS["llm_cache"].default,
        seq: Any = _PARAMS["seq"].default,
        budget: Any = _PARAMS["budget"].default,
        waits: Any = _PARAMS["waits"].default,
        queue: Any = _PARAMS["queue"].default,
        dequeued: Any = _PARAMS["dequeued"].default,
        queue_meta: Any = _PARAMS["queue_meta"].default,
        attempt: Any = _PARAMS["attempt"].default,
        retry_at: Any = _PARAMS["retry_at"].default,
        watermark: Any = _PARAMS["watermark"].default,
        wake: Any = _PARAMS["wake"].default,
        release: Any = _PARAMS["release"].default,
        end_of_input: Any = _PARAMS["end_of_input"].default,
    ) -> Any:
        key = element[0]
        if key in SEEDS and seq.read() is None:
            blob, committed_seq = SEEDS[key]
            memory.write(blob)
            seq.write(committed_seq)
        SEEN[key].append((memory.read(), seq.read()))
        return super().process(element, memory, llm_cache, seq, budget, waits, queue, dequeued,
                               queue_meta, attempt, retry_at, watermark, wake, release,
                               end_of_input)


def stream_of(batches: Iterable[list[AgentEvent]]) -> EventStream:
    """One TestStream step per batch, processing time past the wall clock so timers fire."""
    stream = EventStream().advance_processing_time(int(time.time()) + 86_400)
    for step, batch in enumerate(batches, start=1):
        stream = stream.add_elements([TimestampedValue(event_to_json(e), step) for e in batch])
        stream = stream.advance_processing_time(1).advance_watermark_to(step)
    return stream.advance_watermark_to_infinity()


def run_pipeline(batches: list[list[AgentEvent]], config: AgentConfig,
                 ) -> tuple[list[bytes], list[ErrorRecord]]:
    COLLECTED.clear()
    SEEN.clear()
    options = PipelineOptions(["--runner=DirectRunner"])
    options.view_as(StandardOptions).streaming = True
    pipeline = TestPipeline(options=options)
    decoded = (pipeline
               | "Events" >> stream_of(batches)
               | "Decode" >> beam.ParDo(DecodeEvents("json")).with_output_types(KEYED)
               .with_outputs(ERRORS, main="events"))
    activated = decoded.events | "Activate" >> beam.ParDo(
        SeededAgentDoFn(config, provider=answering_provider)).with_input_types(
        KEYED).with_outputs(ERRORS, main="intents")
    _ = activated.intents | "KeepIntents" >> beam.Map(collect, "intents")
    _ = ((decoded[ERRORS], activated[ERRORS])
         | "AllErrors" >> beam.Flatten()
         | "KeepErrors" >> beam.Map(collect, "errors"))
    pipeline.run().wait_until_finish()
    return (sorted(COLLECTED["intents"]),
            sorted((error_from_json(x) for x in COLLECTED["errors"]),
                   key=lambda e: (e.entity_key, e.event_id)))


def interleaved(*streams: list[AgentEvent]) -> list[list[AgentEvent]]:
    """Batch i holds event i of every stream."""
    return [list(batch) for batch in zip(*streams, strict=True)]


def consult_config(store: LongtermStoreConfig) -> AgentConfig:
    return AgentConfig(agent="tests.chaos._agents:consult", longterm_memory=store,
                       model=STEADY, retry=RETRY)


def reference(config: AgentConfig, events: list[AgentEvent]
              ) -> tuple[list[bytes], dict[bytes, dict[str, bytes]]]:
    intents, rows = reference_run(config, events, provider=lambda: Answers().model())
    return sorted(intents), rows


def test_a_provider_outage_in_a_streaming_pipeline_suspends_and_pays_each_call_once(
        store_config: LongtermStoreConfig) -> None:
    """Invariants 1 and 9 in Beam state: no dead letter, no call paid twice, rows converge."""
    ANSWERS[0] = Answers(lambda content, asked: ProviderUnavailable("503")
                         if content == "classify: blip 1" and asked <= 2 else None)
    blip = list(make_events("blip", ["blip 1", "blip 2", "blip 3"]))
    calm = list(make_events("calm", ["calm 1", "calm 2", "calm 3"]))
    config = consult_config(store_config)
    intents, errors = run_pipeline(interleaved(blip, calm), config)

    assert errors == []
    expected_asks = {f"{call}: {note}": 1 for note in ("blip 1", "blip 2", "blip 3", "calm 1",
                                                       "calm 2", "calm 3")
                     for call in ("summarise", "classify")}
    assert dict(ANSWERS[0].asked) == expected_asks | {"classify: blip 1": 3}
    clean_intents, clean_rows = reference(config, blip + calm)
    assert intents == clean_intents
    for entity in (b"blip", b"calm"):
        assert committed_rows(store_config, entity) == clean_rows[entity]


def test_a_provider_down_for_good_in_a_streaming_pipeline_dead_letters_after_max_attempts(
        store_config: LongtermStoreConfig) -> None:
    """One error record per lost event, with its attempts; the paid call was paid once."""
    ANSWERS[0] = Answers(lambda content, asked: ProviderUnavailable("503, for good")
                         if content == "classify: down 1" else None)
    down = list(make_events("down", ["down 1", "down 2"]))
    calm = list(make_events("calm", ["calm 1", "calm 2"]))
    config = consult_config(store_config)
    intents, errors = run_pipeline(interleaved(down, calm), config)

    (error,) = errors
    assert (error.entity_key, error.event_id, error.stage, error.seq, error.attempts) == (
        b"down", "e-1", ErrorRecord.STAGE_MODEL, 1, RETRY.max_attempts)
    assert error.retriable
    assert AgentEvent.FromString(error.event) == down[0]
    assert ANSWERS[0].asked["classify: down 1"] == RETRY.max_attempts
    assert ANSWERS[0].asked["summarise: down 1"] == 1
    clean_intents, clean_rows = reference(config, [down[1], *calm])
    assert intents == clean_intents
    for entity in (b"down", b"calm"):
        assert committed_rows(store_config, entity) == clean_rows[entity]


def test_a_corrupt_state_blob_in_beam_state_is_dead_lettered_and_left_as_it_was(
        store_config: LongtermStoreConfig) -> None:
    """Invariant 8: every event of a corrupt key is a STATE_CORRUPT record; nothing is written."""
    SEEDS.clear()
    SEEDS[b"rotten"] = (GARBAGE, 5)
    SEEDS[b"ring"] = (blob_with_corrupt_ring("history"), 2)  # found after a save was staged
    events = {key: list(make_events(key, [f"{key} {n}" for n in range(1, 4)]))
              for key in ("rotten", "ring", "fresh")}
    config = AgentConfig(agent="tests.chaos._agents:recall", longterm_memory=store_config,
                         retry=RETRY)
    try:
        intents, errors = run_pipeline(interleaved(*events.values()), config)
    finally:
        seeds = dict(SEEDS)
        SEEDS.clear()

    assert [(e.entity_key, e.event_id, e.stage, e.seq, e.attempts, e.retriable)
            for e in errors] == [
        (key, f"e-{n}", ErrorRecord.STAGE_STATE_CORRUPT, seeds[key][1] + 1, 1, False)
        for key in (b"ring", b"rotten") for n in range(1, 4)]
    for key, (blob, committed_seq) in seeds.items():
        assert SEEN[key] == [(blob, committed_seq)] * 3, key  # every event found it unchanged
        assert committed_rows(store_config, key) == {}
    clean_intents, clean_rows = reference(config, events["fresh"])
    assert intents == clean_intents
    assert committed_rows(store_config, b"fresh") == clean_rows[b"fresh"]
    assert [json.loads(line)["seq"] for line in intents] == [1, 2, 3]
