"""Which runner ran a pipeline, so a run names it and no fallback passes unsaid.

``--runner=DirectRunner`` is not one runner. Beam's DirectRunner picks one per
pipeline: the FnApiRunner for a batch pipeline, the BundleBasedDirectRunner
for a streaming one (processing-time timers, a TestStream), and from Beam 2.64
on it tries Prism first where Prism could run the pipeline. That try fetches a
Prism binary from a release download, and on failure the DirectRunner falls
back, saying so only at INFO. So on the Beam-latest line the same command ran
on Prism on a machine that had the binary cached and on the FnApiRunner on one
that had not, and nobody could tell. `watch_runner` records what the
DirectRunner decided, and `RunnerReport` says it.

Some runners also need a flag for this pipeline to lose nothing, which
`with_runner_safeguards` adds unless the command line sets it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

__all__ = ["RunnerReport", "runner_report", "watch_runner", "with_runner_safeguards"]

#: FlinkPipelineOptions' switch that finishes a bundle before a checkpoint's
#: barrier instead of inside the snapshot (see `with_runner_safeguards`).
FINISH_BUNDLE_BEFORE_CHECKPOINTING = "--finish_bundle_before_checkpointing"
MAX_BUNDLE_SIZE = "--max_bundle_size"
UNALIGNED_CHECKPOINTS = "--unaligned_checkpoint_enabled"
#: Prism's switch that stops it splitting a slow bundle (see `with_runner_safeguards`).
PRISM_NO_SPLIT = "prism_disable_sdf_split"

#: Elements a streaming FlinkRunner bundle holds at most, unless ``--max_bundle_size``
#: says otherwise (see `with_runner_safeguards`).
FLINK_STREAMING_BUNDLE_SIZE = 16

#: The logger Beam's DirectRunner reports its Prism try and fallback on.
_DIRECT_LOGGER = "apache_beam.runners.direct.direct_runner"

#: The runner each kind of result comes from, by the result's module and class.
_RESULTS = {
    ("apache_beam.runners.direct.direct_runner", "DirectPipelineResult"):
        "BundleBasedDirectRunner",
    ("apache_beam.runners.portability.fn_api_runner.fn_runner", "RunnerResult"): "FnApiRunner",
    ("apache_beam.runners.dataflow.dataflow_runner", "DataflowPipelineResult"): "DataflowRunner",
}
_PORTABLE = ("apache_beam.runners.portability.portable_runner", "PipelineResult")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunnerReport:
    """The runner asked for, the one that ran, and why they differ if they do.

    Attributes:
        requested: ``--runner`` as given (DirectRunner when unset).
        ran: The runner that ran the pipeline.
        fallback: What the DirectRunner's Prism try failed with, if it fell back.
        prism_location: The Prism binary the run was given, if any.
    """

    requested: str
    ran: str
    fallback: str | None = None
    prism_location: str | None = None

    def describe(self) -> str:
        """One line for a person: ``PrismRunner (prism at …)``, or what fell back to what."""
        text = self.ran
        if self.ran != self.requested:
            text += f" (chosen by {self.requested})"
        if self.ran == "PrismRunner" and self.prism_location:
            text += f", prism at {self.prism_location}"
        if self.fallback:
            text += (f"; it tried Prism first and fell back: {self.fallback} (give it a "
                     "binary with --prism_location, or --runner=PrismRunner to fail instead)")
        return text


class _Notes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def watch_runner() -> Iterator[list[str]]:
    """Collect what the DirectRunner says about its Prism try while the block runs."""
    logger = logging.getLogger(_DIRECT_LOGGER)
    notes = _Notes()
    saved = logger.level, logger.propagate
    logger.addHandler(notes)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # its INFO lines are ours to report, not the root's to print
    try:
        yield notes.lines
    finally:
        logger.removeHandler(notes)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def runner_report(runner: object, options: PipelineOptions, result: object,
                  notes: list[str]) -> RunnerReport:
    """Name the runner that produced `result`.

    Args:
        runner: The pipeline's runner object (``Pipeline.runner``): the one asked for.
        options: The pipeline's options (for ``--prism_location``).
        result: What ``Pipeline.run`` returned.
        notes: What `watch_runner` collected during the run.
    """
    requested = type(runner).__name__.removeprefix("Switching")
    kind = (type(result).__module__, type(result).__qualname__)
    if kind == _PORTABLE:
        # A portable result under the DirectRunner is its Prism try that went through.
        ran = "PrismRunner" if requested == "DirectRunner" else requested
    else:
        ran = _RESULTS.get(kind, requested)
    fallback = next((_first_line(note.split(":", 1)[-1]) for note in notes
                     if note.startswith("Exception with PrismRunner")), None)
    if fallback is None and any("falling back" in note.lower() for note in notes):
        fallback = "the Prism job ended before it ran"
    location = options.get_all_options().get("prism_location")
    return RunnerReport(requested=requested, ran=ran, fallback=fallback,
                        prism_location=str(location) if location else None)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else "no reason given"


def with_runner_safeguards(argv: list[str], *, streaming: bool) -> list[str]:
    """`argv`, with the flags its runner needs so that no event is lost; as given otherwise.

    The FlinkRunner, streaming: a checkpoint that finds one of Beam's Flink
    operators in a bundle finishes the bundle inside the snapshot, after
    the barrier went downstream, so the operator buffers the bundle's output
    and sends it on later; but finishing the bundle can also release the
    operator's watermark, and once the input has ended (a bounded input on
    ``--streaming``, a drained job) that is the final one. The buffered
    lines then follow the final watermark into the next GroupByKey (the
    file sink's), which drops them as late: the job ends DONE with the
    activations' lines missing and no error (2 runs of 9 here, checkpoints
    every 500 ms). ``--finish_bundle_before_checkpointing`` finishes the
    bundle before the barrier instead, so nothing is buffered.

    A barrier then waits for the open bundle, and Beam's Flink operators
    hand the Python worker up to 1,000 elements a bundle; the agent's step
    takes each element only as its key has room (backpressure), so such a
    bundle lasts as long as the input. An aligned barrier also queues behind
    every element buffered ahead of the agent's step, and a backpressured
    stream buffers the input. On a loaded cluster the first checkpoint took
    19-24 s and completed only as the input ran out. So, as the native Flink
    job does: ``--max_bundle_size`` `FLINK_STREAMING_BUNDLE_SIZE` bounds the
    wait by a few activations, and ``--unaligned_checkpoint_enabled`` lets
    the barrier overtake the buffered elements (they go into the checkpoint).

    Prism (and the DirectRunner, which tries Prism first from Beam 2.64 on):
    Prism splits a bundle that made no progress between two of its progress
    requests, and an agent's step that waits for a key's activation makes
    none. The split hands the bundle's remaining elements back to be
    scheduled, and Prism 2.77 then frees their keys while the first part of
    the bundle may still be running one of them: two bundles ran the same
    key at once in one worker, and the job failed on the engine's guard that
    a key has one activation in flight (a streaming test on Prism 2.77, once,
    on a busy machine). Prism's own source warns that splitting a bundle
    with timers is unexpected (apache/beam#35771). A split never helps a
    keyed step, whose keys each run in one bundle anyway, so
    ``--experiments=prism_disable_sdf_split`` turns it off.
    """
    runner = str(PipelineOptions(argv).view_as(StandardOptions).runner or "").rsplit(".", 1)[-1]
    if runner in ("", "DirectRunner", "PrismRunner"):
        return _with_experiment(argv, PRISM_NO_SPLIT)
    if not streaming or runner != "FlinkRunner":
        return argv
    given = {arg.split("=", 1)[0] for arg in argv}
    # A switch: the job server declares it boolean, so it takes no value.
    added = [] if FINISH_BUNDLE_BEFORE_CHECKPOINTING in given else [
        FINISH_BUNDLE_BEFORE_CHECKPOINTING]
    if MAX_BUNDLE_SIZE not in given:
        added.append(f"{MAX_BUNDLE_SIZE}={FLINK_STREAMING_BUNDLE_SIZE}")
    if UNALIGNED_CHECKPOINTS not in given:
        added.append(UNALIGNED_CHECKPOINTS)
    return [*argv, *added]


def _with_experiment(argv: list[str], experiment: str) -> list[str]:
    """`argv` with ``--experiments=experiment`` added, unless it has it already."""
    given = PipelineOptions(argv).get_all_options().get("experiments") or []
    given = [name for item in given for name in item.split(",")]
    return argv if experiment in given else [*argv, f"--experiments={experiment}"]
