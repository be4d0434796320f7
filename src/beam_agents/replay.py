"""``beam-agents replay``: run an agent over recorded events and their call journal, paying nothing.

Before deploying a new prompt or agent version, run it on traffic the old one
served: every model call the old run paid is in the call journal, so a request
the new agent still makes replays from there, and a request it changes is a
request the journal does not hold. That request is never sent: the activation
stops there and counts as "would pay". The report says, per activation and in
total, which activations are unchanged, which emit different intents than the
recorded run (``--expected_intents``), and which would pay. Exit 0 when nothing
differs and the calls it would pay are at most ``--max_new_calls``; 1
otherwise; 2 for a usage error. Why: docs/design.md, "Replaying an agent".
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import glob
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beam_agents.errors import ConfigError, ProviderRejected
from beam_agents.hosting import add_agent_flags, agent_config_from_flags, start_runtime
from beam_agents.model import (
    CallJournal,
    CallJournalConfig,
    JournalEntry,
    JournalWrite,
    ModelRequest,
    ModelResponse,
    estimate_tokens,
)
from beam_agents.runtime import (
    MAX_EVENT_BYTES,
    AgentConfig,
    AgentEvent,
    Committed,
    ErrorRecord,
    KeyedState,
    decode_input,
    intent_to_json,
    queue_order,
    read_lines,
)

__all__ = ["WouldPayError", "main"]


class WouldPayError(ProviderRejected):
    """A request the journal does not hold: replay never sends it."""


class _NeverSends:
    """A provider that answers nothing: reaching it means the journal missed (would pay)."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        #: The requests the activation running now would have sent (only the first is reached).
        self.unpaid: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.unpaid.append(request)
        raise WouldPayError("not in the call journal: replay sends no request",
                            model_id=self.model_id)

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class _ReadOnlyJournalConfig:
    """The recorded journal, opened so that replay can read it and never write it."""

    inner: CallJournalConfig

    def open(self) -> CallJournal:
        return _ReadOnlyJournal(self.inner.open())


class _ReadOnlyJournal:
    def __init__(self, inner: CallJournal) -> None:
        self._inner = inner

    async def read(self, entity_key: bytes, seq: int) -> Mapping[str, JournalEntry]:
        return await self._inner.read(entity_key, seq)

    async def write(self, entry: JournalEntry) -> JournalWrite:
        raise AssertionError("replay never writes the journal: it pays for no call")

    async def close(self) -> None:
        await self._inner.close()


@dataclass
class Report:
    """What replay found, in total and per activation worth a line."""

    activations: int = 0
    unchanged: int = 0
    differ: int = 0
    would_pay: int = 0
    would_pay_calls: int = 0
    would_pay_tokens: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    undecodable: int = 0
    lines: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The report as the ``--report`` file holds it."""
        return {"activations": self.activations, "unchanged": self.unchanged,
                "intents_differ": self.differ, "would_pay": self.would_pay,
                "would_pay_calls": self.would_pay_calls,
                "would_pay_estimated_tokens": self.would_pay_tokens,
                "dead_letters": dict(self.dead_letters), "undecodable": self.undecodable,
                "details": self.lines}


def _events(patterns: Sequence[str], max_bytes: int, report: Report
            ) -> dict[bytes, list[AgentEvent]]:
    """Every decodable event of the files, grouped by key, in the engine's run order."""
    by_key: dict[bytes, list[bytes]] = defaultdict(list)
    for pattern in patterns:
        paths = sorted(glob.glob(pattern)) or [pattern]
        for path in paths:
            with open(path, "rb") as stream:
                for line in read_lines(stream, max_bytes=max_bytes):
                    decoded = decode_input(line, "json", max_event_bytes=max_bytes)
                    if isinstance(decoded, ErrorRecord):
                        report.undecodable += 1
                    else:
                        by_key[decoded.entity_key].append(
                            decoded.SerializeToString(deterministic=True))
    return {key: [AgentEvent.FromString(data) for data in sorted(events, key=queue_order)]
            for key, events in by_key.items()}


def _expected(path: str | None) -> dict[tuple[str, str], list[str]] | None:
    """The recorded run's intents, by ``(entity_key, event_id)``, as canonical JSON."""
    if path is None:
        return None
    expected: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name in sorted(glob.glob(path)) or [path]:
        for line in Path(name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                doc = json.loads(line)
                key = doc.get("entity_key", doc.get("entity_key_b64"))
                expected[(str(key), str(doc.get("event_id")))].append(
                    json.dumps(doc, sort_keys=True))
    return expected


def _check(config: AgentConfig, by_key: Mapping[bytes, list[AgentEvent]],
           expected: dict[tuple[str, str], list[str]] | None, report: Report) -> None:
    provider = _NeverSends(_model_id(config))
    with start_runtime(config, provider=provider) as runtime:
        for key in sorted(by_key):
            state = KeyedState()
            for event in by_key[key]:
                unpaid: list[ModelRequest] = []
                provider.unpaid = unpaid
                outcome = runtime.activate(state, event)
                report.activations += 1
                _account(report, event, outcome, unpaid, expected)
                if isinstance(outcome, Committed):
                    state = state.after(outcome)
                elif unpaid:
                    # The recorded run committed this event with the next seq: keep the
                    # seqs aligned, so later events still find their journal entries.
                    state = dataclasses.replace(state, seq=state.seq + 1)


def _account(report: Report, event: AgentEvent, outcome: Any, unpaid: list[ModelRequest],
             expected: dict[tuple[str, str], list[str]] | None) -> None:
    key_text = event.entity_key.decode("utf-8", "backslashreplace")
    where = f"{key_text} {event.event_id}"
    if unpaid:
        tokens = sum(estimate_tokens(request) for request in unpaid)
        report.would_pay += 1
        report.would_pay_calls += len(unpaid)
        report.would_pay_tokens += tokens
        report.lines.append(f"would pay      {where}: a request not in the journal "
                            f"(~{tokens} tokens); the activation stopped there")
        return
    got = ([json.dumps(json.loads(intent_to_json(intent)), sort_keys=True)
            for intent in outcome.intents] if isinstance(outcome, Committed) else [])
    if not isinstance(outcome, Committed):
        stage = ErrorRecord.Stage.Name(outcome.error.stage).removeprefix("STAGE_").lower()
        report.dead_letters[stage] += 1
    if expected is not None:
        want = expected.get((_json_key(event.entity_key), event.event_id), [])
        if sorted(got) != sorted(want):
            report.differ += 1
            report.lines.append(f"intents differ {where}: expected {len(want)}, got "
                                f"{len(got)}" + _first_difference(want, got))
            return
    report.unchanged += 1


def _json_key(entity_key: bytes) -> str:
    """The entity key as an intent's JSON spells it: UTF-8 text, else base64 (``_b64``)."""
    try:
        return entity_key.decode()
    except UnicodeDecodeError:
        return base64.b64encode(entity_key).decode()


def _first_difference(want: list[str], got: list[str]) -> str:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    parts = []
    if missing:
        parts.append(f"; expected {missing[0][:160]}")
    if extra:
        parts.append(f"; got {extra[0][:160]}")
    return "".join(parts)


def _model_id(config: AgentConfig) -> str:
    """The model id the recorded run's provider reported: it is part of every cache key."""
    from beam_agents.model.providers import build_provider  # noqa: PLC0415

    return build_provider(config.model).model_id


def _journal_exists(config: AgentConfig, values: Mapping[str, Any]) -> None:
    if config.call_journal is None:
        raise ConfigError("replay needs the recorded run's call journal: --call_journal "
                          "sqlite --call_journal_path F, or --call_journal firestore",
                          field="call_journal")
    path = values.get("call_journal_path")
    if values.get("call_journal") == "sqlite" and path and not Path(path).is_file():
        raise ConfigError(f"--call_journal_path {path}: no such journal file",
                          field="call_journal_path")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="beam-agents replay", description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    replay = parser.add_argument_group("replay")
    replay.add_argument("--input_files", required=True, action="append",
                        help="The recorded events (JSON lines; a glob; repeatable).")
    replay.add_argument("--expected_intents",
                        help="The recorded run's intents (JSON lines; a glob): each "
                             "activation's intents must equal them.")
    replay.add_argument("--max_new_calls", type=int, default=0,
                        help="Calls replay may find missing from the journal and still pass "
                             "(default 0).")
    replay.add_argument("--report", help="Also write the report as JSON to this file.")
    add_agent_flags(parser)
    return parser


def _print(report: Report, out: Any) -> None:
    for line in report.lines:
        print(line, file=out)
    print("replay", file=out)
    rows: Iterator[tuple[str, object]] = iter([
        ("activations", report.activations), ("unchanged", report.unchanged),
        ("intents differ", report.differ), ("would pay", report.would_pay),
        ("calls not in the journal", report.would_pay_calls),
        ("estimated tokens they cost", report.would_pay_tokens),
        ("dead letters", sum(report.dead_letters.values())),
        ("undecodable lines", report.undecodable)])
    for label, value in rows:
        print(f"  {label:<28}{value:>8}", file=out)
    print("  calls paid                         0   (replay sends no request)", file=out)


def main(argv: Sequence[str], *, out: Any = None) -> int:
    """Run ``beam-agents replay``; returns the exit code (0 pass, 1 differs or would pay)."""
    out = out if out is not None else sys.stdout
    args = _parser().parse_args(list(argv))
    if args.max_new_calls < 0:
        raise ConfigError("--max_new_calls must be 0 or more", field="max_new_calls")
    values = vars(args)
    config = agent_config_from_flags(values)
    _journal_exists(config, values)
    assert config.call_journal is not None
    # A miss is a ProviderRejected, which no circuit breaker counts as an outage.
    config = dataclasses.replace(config,
                                 call_journal=_ReadOnlyJournalConfig(config.call_journal))
    report = Report()
    by_key = _events(args.input_files, config.max_event_bytes or MAX_EVENT_BYTES, report)
    _check(config, by_key, _expected(args.expected_intents), report)
    _print(report, out)
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_json(), indent=2) + "\n")
    return 0 if report.differ == 0 and report.would_pay_calls <= args.max_new_calls else 1
