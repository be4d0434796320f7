"""The agent pipeline: read -> decode -> key by entity -> AgentDoFn -> write intents and errors.

Nothing is dropped (invariant 8): an element that does not decode becomes an
error record with stage DECODE on the same errors output the activations
use, and the pipeline keeps going.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import Pipeline
from apache_beam.pvalue import PCollection

from beam_agents.beam._dofn import ERRORS, AgentDoFn
from beam_agents.beam._metrics import BeamMetrics
from beam_agents.beam._options import AgentPipelineOptions, agent_config_from_options, check_io
from beam_agents.runtime import AgentConfig, ErrorRecord, InputDecoder, error_to_json

__all__ = ["DecodeEvents", "build_pipeline", "run"]


class DecodeEvents(beam.DoFn):
    """Bytes -> ``(entity_key, AgentEvent bytes)``; undecodable input -> a DECODE error record."""

    def __init__(self, input_format: str, *, progress_every: int = 0) -> None:
        super().__init__()
        self._format = input_format
        self._progress_every = progress_every
        self._seen = 0
        self._metrics = BeamMetrics()
        self._decode = InputDecoder(input_format, self._metrics)

    def setup(self) -> None:
        """Bind fresh counters on the worker."""
        self._metrics = BeamMetrics()
        self._decode = InputDecoder(self._format, self._metrics)

    def process(self, element: bytes | str) -> Iterator[Any]:
        """Decode one element."""
        data = element.encode() if isinstance(element, str) else bytes(element)
        self._report_progress()
        decoded = self._decode(data)
        self._metrics.flush()
        if isinstance(decoded, ErrorRecord):
            yield beam.pvalue.TaggedOutput(ERRORS, error_to_json(decoded))
            return
        yield decoded.entity_key, decoded.SerializeToString(deterministic=True)

    def _report_progress(self) -> None:
        self._seen += 1
        if self._progress_every and self._seen % self._progress_every == 0:
            print(f"\r  read {self._seen} events", end="", file=sys.stderr, flush=True)


def _read(pipeline: Pipeline, opts: AgentPipelineOptions) -> Any:
    if opts.input_subscription:
        return pipeline | "ReadPubSub" >> beam.io.ReadFromPubSub(
            subscription=opts.input_subscription)
    if opts.input_format == "proto":
        return pipeline | "ReadTFRecord" >> beam.io.ReadFromTFRecord(opts.input_files)
    return pipeline | "ReadJsonl" >> beam.io.ReadFromText(opts.input_files)


def _write(lines: PCollection[bytes], *, topic: str | None, path: str | None,
           label: str) -> None:
    if topic:
        _ = lines | f"Publish{label}" >> beam.io.WriteToPubSub(topic=topic)
    if path:
        _ = (lines
             | f"Utf8{label}" >> beam.Map(bytes.decode)
             | f"Write{label}" >> beam.io.WriteToText(path, shard_name_template=""))


def build_pipeline(pipeline: Pipeline, options: PipelineOptions,
                   config: AgentConfig | None = None, *, progress_every: int = 0) -> None:
    """Add the agent pipeline's transforms to `pipeline`.

    Raises:
        ConfigError: the options name no input or drop an output.
    """
    opts = options.view_as(AgentPipelineOptions)
    check_io(opts)
    if config is None:
        config = agent_config_from_options(options)
    decoded = _read(pipeline, opts) | "Decode" >> beam.ParDo(
        DecodeEvents(opts.input_format, progress_every=progress_every)).with_output_types(
        beam.typehints.Tuple[bytes, bytes]).with_outputs(ERRORS, main="events")
    # The key type hint gives the stateful DoFn a deterministic key coder.
    activated = decoded.events | "Activate" >> beam.ParDo(AgentDoFn(config)).with_input_types(
        beam.typehints.Tuple[bytes, bytes]).with_outputs(ERRORS, main="intents")
    errors = (decoded[ERRORS], activated[ERRORS]) | "AllErrors" >> beam.Flatten()
    _write(activated.intents, topic=opts.output_topic, path=opts.output_path, label="Intents")
    _write(errors, topic=opts.errors_topic, path=opts.errors_path, label="Errors")


def run(argv: list[str] | None = None, *, progress_every: int = 0) -> Any:
    """Build and run the pipeline from command-line flags; returns the PipelineResult."""
    options = PipelineOptions(argv)
    if options.view_as(AgentPipelineOptions).input_subscription:
        options.view_as(StandardOptions).streaming = True
    pipeline = Pipeline(options=options)
    build_pipeline(pipeline, options, progress_every=progress_every)
    result = pipeline.run()
    result.wait_until_finish()
    return result
