r"""The ``beam-agents`` command: run the pipeline, read and redrive dead letters.

    beam-agents run --input_files events.jsonl --output_path out/intents.jsonl \\
        --errors_path out/errors.jsonl --agent examples.support_agent:agent
    beam-agents errors show out/errors.jsonl
    beam-agents errors redrive out/errors.jsonl -o redrive.jsonl

``run`` takes every Beam pipeline flag (``--runner``, ``--flink_master``, ...)
besides the agent pipeline's own (see ``beam-agents run --help``) and ends with
a summary of the run's counters.

A configuration or runner error (an unknown flag value, a runner that cannot
start, a failed job) ends the command with one line on stderr and exit
status 2; ``--debug``, anywhere on the line, shows the traceback instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from google.protobuf.message import DecodeError

from beam_agents._summary import print_summary
from beam_agents.errors import BeamAgentsError, ConfigError, EventDecodeError
from beam_agents.hosting import error_from_json, event_to_json
from beam_agents.model import ModelConfig
from beam_agents.runtime import AgentEvent, ErrorRecord

__all__ = ["main", "redrivable", "redrive_lines"]

def _error_lines(path: str) -> Iterator[tuple[int, ErrorRecord]]:
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield number, error_from_json(line)
                except EventDecodeError as exc:
                    raise EventDecodeError(f"{path}:{number}: {exc}") from exc


def redrive_lines(records: Sequence[ErrorRecord]) -> list[bytes]:
    """Turn dead letters back into input lines, so nothing is lost (invariant 8).

    Activation failures carry the serialized AgentEvent and become a JSON
    input line again; DECODE failures carry the raw input, returned as it was
    for the producer (or a person) to repair. A record whose event was cut to
    a prefix (over ``--max_event_bytes``) is left out: only its source holds
    the whole (see `redrivable`).

    Raises:
        EventDecodeError: an activation failure's event is not an AgentEvent.
    """
    lines = []
    for record in records:
        if not redrivable(record):
            continue
        if record.stage == ErrorRecord.STAGE_DECODE:
            lines.append(record.event.rstrip(b"\n"))
        else:
            try:
                event = AgentEvent.FromString(record.event)
            except DecodeError as exc:
                raise EventDecodeError(f"the {ErrorRecord.Stage.Name(record.stage)} record of "
                                       f"seq {record.seq} holds no AgentEvent: {exc}",
                                       field="event") from exc
            lines.append(event_to_json(event))
    return lines


def redrivable(record: ErrorRecord) -> bool:
    """False for a record that holds only a prefix of its event (``event_bytes`` is set)."""
    return not record.event_bytes


def _show(path: str) -> int:
    by_stage: Counter[str] = Counter()
    for number, record in _error_lines(path):
        stage = ErrorRecord.Stage.Name(record.stage).removeprefix("STAGE_")
        by_stage[stage] += 1
        who = record.entity_key.decode(errors="replace") or "-"
        retry = "retriable" if record.retriable else "permanent"
        print(f"{path}:{number}  {stage:<15} {who}  seq={record.seq}  "
              f"event={record.event_id or '-'}  ({retry})")
        print(f"    {record.error_type}: {record.message}")
    total = sum(by_stage.values())
    summary = ", ".join(f"{stage} {count}" for stage, count in sorted(by_stage.items()))
    print(f"{total} dead letter(s){': ' + summary if summary else ''}")
    return 0


def _redrive(path: str, output: str | None) -> int:
    records = [record for _, record in _error_lines(path)]
    lines = redrive_lines(records)
    for record in records:
        if not redrivable(record):
            print(f"left out: an event of {record.event_bytes} bytes over the size limit; find it "
                  f"at the source by its sha256 {record.event_sha256.hex()}", file=sys.stderr)
    data = b"".join(line + b"\n" for line in lines)
    if output:
        Path(output).write_bytes(data)
        print(f"wrote {len(lines)} input line(s) to {output}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(data)
    return 0


def _redrive_subscription(parsed: argparse.Namespace) -> int:
    """Pull dead letters from a subscription and publish their events to an input topic.

    A message is acknowledged only after its events were published, so a
    redrive stopped half way loses nothing and the rest stays in the
    subscription. A record that holds only a prefix of its event is left
    there, unacknowledged, and named on stderr.
    """
    if not (parsed.subscription and parsed.topic) or parsed.file or parsed.output:
        raise ConfigError("redrive from Pub/Sub takes --subscription and --topic, and no file "
                          "or --output", field="subscription")
    from beam_agents.beam import redrive_subscription  # noqa: PLC0415 - gcp extra

    def convert(data: bytes) -> list[bytes] | None:
        record = error_from_json(data)
        if not redrivable(record):
            print(f"left in the subscription: an event of {record.event_bytes} bytes over the "
                  f"size limit; find it at the source by its sha256 "
                  f"{record.event_sha256.hex()}", file=sys.stderr)
            return None
        return redrive_lines([record])

    found = redrive_subscription(parsed.subscription, parsed.topic, convert,
                                 dry_run=parsed.dry_run)
    verb = "would redrive" if parsed.dry_run else "redrove"
    print(f"{verb} {found.redriven} dead letter(s) from {parsed.subscription} to "
          f"{parsed.topic}; {found.left} left in the subscription (over the size limit)",
          file=sys.stderr)
    return 0


def _run(argv: list[str]) -> int:
    # Client libraries pulled in by apache-beam[gcp] warn about future Python and
    # grpcio support on import; that is not this run's business.
    warnings.filterwarnings("ignore", category=FutureWarning)
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    from beam_agents.beam import (  # noqa: PLC0415
        AgentPipelineOptions,
        agent_config_from_options,
        check_io,
        check_runner_flags,
        output_files,
        run,
        snapshot_plan_from_options,
    )
    from beam_agents.hosting import load_agent, state_line  # noqa: PLC0415

    if any(flag in argv for flag in ("-h", "--help")):
        parser = argparse.ArgumentParser(prog="beam-agents run",
                                         description="Run the agent pipeline.")
        AgentPipelineOptions._add_argparse_args(parser)
        parser.print_help()
        print("\nAny Apache Beam pipeline option (--runner, --project, --flink_master, ...) "
              "is accepted as well.")
        return 0
    sys.path.insert(0, os.getcwd())  # agents in the working tree, like `python -m`
    options = PipelineOptions(argv)
    opts = options.view_as(AgentPipelineOptions)
    check_io(opts)
    check_runner_flags(options)
    config = agent_config_from_options(opts)  # fails here, before the run, if it is bad
    # An agent that does not import (or declares a bad tool) is one line now,
    # not a traceback from every worker's setup once the pipeline has started.
    load_agent(config.agent)
    check_model_script(config.model)
    model = config.model
    for path in (opts.output_path, opts.errors_path):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    snapshot = snapshot_plan_from_options(options)
    if opts.input_files:
        print(state_line(snapshot), file=sys.stderr)
    if earlier := output_files(options):
        print(f"removing {len(earlier)} output file(s) an earlier run left "
              f"({', '.join(earlier[:2])}{', ...' if len(earlier) > 2 else ''}): a run that "
              "fails leaves none that look current", file=sys.stderr)
    # Library warnings (a soft cap reached, ...) start a line of their own, so the
    # in-place progress line does not swallow them.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("\n  %(levelname)s %(name)s: %(message)s"))
    library = logging.getLogger("beam_agents")
    library.addHandler(handler)
    library.propagate = False
    print("running the agent pipeline ...", file=sys.stderr)
    started = time.monotonic()
    try:
        result = run(argv, progress_every=100, snapshot=snapshot)
    finally:
        library.removeHandler(handler)
        library.propagate = True
    elapsed_s = time.monotonic() - started
    print(file=sys.stderr)
    report = getattr(result, "beam_agents_runner", None)
    if report is not None and report.fallback:
        # Said where it cannot be missed, not only in the summary (stdout).
        print(f"beam-agents: ran on {report.describe()}", file=sys.stderr)
    _summarize(result, elapsed_s, model)
    return 0


def check_model_script(model: ModelConfig) -> None:
    """Read ``--model_script`` before the run: a bad line is one error line, not a worker's trace.

    Raises:
        ConfigError: the script cannot be read, or a line is bad; names the line.
    """
    if model.provider == "local" and model.local.script_path:
        from beam_agents.model.providers.local import load_script  # noqa: PLC0415

        load_script(model.local.script_path)


def _replay(argv: list[str]) -> int:
    from beam_agents import replay  # noqa: PLC0415

    sys.path.insert(0, os.getcwd())  # agents in the working tree, like `python -m`
    return replay.main(argv)


def _inspect(argv: list[str]) -> int:
    from beam_agents import inspection  # noqa: PLC0415

    return inspection.main(argv)


def _summarize(result: object, elapsed_s: float, model: ModelConfig) -> None:
    from apache_beam.metrics.metric import MetricsFilter  # noqa: PLC0415

    counters: Counter[tuple[str, str]] = Counter()
    peaks: dict[tuple[str, str], int] = {}
    notes: dict[tuple[str, str], str] = {}
    tally = getattr(result, "beam_agents_tally", None)  # a local streaming run's own count
    if tally is not None:
        for key, value in tally.counters.items():
            counters[_pair(key)] += value
        peaks.update({_pair(key): value for key, value in tally.peaks.items()})
        notes.update({_pair(key): text for key, text in tally.notes.items()})
    else:
        found = result.metrics().query(MetricsFilter())  # type: ignore[attr-defined]
        for item in found["counters"]:
            counters[(item.key.metric.namespace, item.key.metric.name)] += item.committed or 0
        for item in found["distributions"]:
            key = (item.key.metric.namespace, item.key.metric.name)
            # A runner may report a distribution no sample reached (Prism now and
            # then does): its max is None, which is no peak.
            if item.committed is not None and item.committed.max is not None:
                peaks[key] = max(peaks.get(key, 0), item.committed.max)
        for item in found.get("string_sets", ()):
            # Each worker adds the first it saw; any of them names a real case.
            texts = sorted(item.committed or item.attempted or ())
            if texts:
                notes.setdefault((item.key.metric.namespace, item.key.metric.name), texts[0])
    report = getattr(result, "beam_agents_runner", None)
    if not counters and getattr(result, "beam_agents_cancelled", False):
        # Beam's job service reports the counters of a job that ended DONE only;
        # a table of zeros would say the job did nothing.
        print(f"the job was cancelled after {elapsed_s:.1f} s; its runner reported no "
              "counters (a Flink job's are in the Flink UI and its metrics reporters)")
        return
    print_summary(counters, peaks, notes, elapsed_s=elapsed_s, model=model,
                  runner=report.describe() if report is not None else None)


def _pair(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition(":")
    return namespace, name


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``beam-agents``; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [arg for arg in args if arg != "--debug"]
    parser = argparse.ArgumentParser(prog="beam-agents", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="run the agent pipeline (see: beam-agents run --help)",
                        add_help=False)
    commands.add_parser("replay", help="check an agent against recorded events and their call "
                        "journal, paying nothing (see: beam-agents replay --help)",
                        add_help=False)
    commands.add_parser("inspect", help="show one entity's long-term rows, call journal "
                        "entries and snapshot state (see: beam-agents inspect --help)",
                        add_help=False)
    errors = commands.add_parser("errors", help="read or redrive dead letters")
    actions = errors.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="render a dead-letter JSONL file for a person")
    show.add_argument("file")
    redrive = actions.add_parser(
        "redrive", help="turn dead letters back into input: a file into input lines, or an "
        "errors subscription into messages on an input topic")
    redrive.add_argument("file", nargs="?", help="a dead-letter JSONL file")
    redrive.add_argument("-o", "--output", help="write here instead of stdout")
    redrive.add_argument("--subscription", help="read dead letters from this Pub/Sub "
                         "subscription (projects/P/subscriptions/S) instead of a file")
    redrive.add_argument("--topic", help="with --subscription: publish them to this input "
                         "topic (projects/P/topics/T)")
    redrive.add_argument("--dry_run", action="store_true", help="with --subscription: count "
                         "what would be redriven; publish and acknowledge nothing")
    if args[:1] == ["run"]:
        # The standard OTEL_* variables stand for --otel_* flags; flags given win.
        from beam_agents.hosting import otel_flags_from_env  # noqa: PLC0415

        return _guarded(lambda: _run([*otel_flags_from_env(os.environ), *args[1:]]),
                        debug=debug)
    if args[:1] == ["replay"]:
        return _guarded(lambda: _replay(args[1:]), debug=debug)
    if args[:1] == ["inspect"]:
        return _guarded(lambda: _inspect(args[1:]), debug=debug)
    parsed = parser.parse_args(args)
    if parsed.action == "show":
        return _guarded(lambda: _show(parsed.file), debug=debug)
    if parsed.subscription or parsed.topic:
        return _guarded(lambda: _redrive_subscription(parsed), debug=debug)
    if not parsed.file:
        parser.error("errors redrive: give a dead-letter file, or --subscription and --topic")
    return _guarded(lambda: _redrive(parsed.file, parsed.output), debug=debug)


#: How long the one error line may grow: a failed job's message holds the
#: worker's whole traceback, which --debug shows.
_ERROR_LINE_CHARS = 400


def _guarded(command: Callable[[], int], *, debug: bool) -> int:
    """Run `command`; any failure is one line on stderr and exit 2 (a traceback with --debug)."""
    try:
        return command()
    except KeyboardInterrupt:
        print("beam-agents: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            traceback.print_exc()
            return 2
        print(_one_line(exc), file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    """``beam-agents: <what>``: the message's first line, typed unless it is one of ours."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    details, code = getattr(exc, "details", None), getattr(exc, "code", None)
    if callable(details) and callable(code):  # a gRPC error: a job server's answer
        text = f"{getattr(code(), 'name', code())}: {details()}"
    if not isinstance(exc, BeamAgentsError | OSError):
        text = f"{type(exc).__name__}: {text}"
    if len(text) > _ERROR_LINE_CHARS:
        # The end often says what to do (Beam: "... stage the jar at PATH"): cut
        # the middle, and keep the last sentence whole.
        last = text[text.rfind(". ") + 2:] if ". " in text else ""
        keep = last if 0 < len(last) < _ERROR_LINE_CHARS else text[-(_ERROR_LINE_CHARS // 2):]
        text = text[:_ERROR_LINE_CHARS - len(keep) - 3].rstrip() + " … " + keep
    hint = "" if isinstance(exc, BeamAgentsError) else " (--debug shows the traceback)"
    return f"beam-agents: {text}{hint}"
