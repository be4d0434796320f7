"""``beam-agents replay``: run an agent over recorded events and their call journal, paying nothing.

Before deploying a new prompt or agent version, run it on traffic the old one
served: every model call the old run paid is in the call journal, so a request
the new agent still makes replays from there, and a request it changes is a
request the journal does not hold. That request is never sent: the activation
stops there and counts as "would pay". Tools are the same: a recorded tool
result replays, and a tool call the journal does not hold is never run (the
activation counts as "would run"). The report says, per activation and in
total, which activations are unchanged, which emit different intents than the
recorded run (``--expected_intents``), which would pay and which would run a
tool. It names up front a model id, provider or sampling setting that differs
from what the journal recorded, and shows a differing intent at the field that
differs, in full.

``--shadow --max_paid_calls N`` answers the next question, whether the change
changes decisions: it pays for up to N of the requests that would pay,
sampled evenly across keys, runs those activations to the end (still running
no tool the journal does not hold), and reports how many decisions (intents)
changed and what the calls cost. Exit 0 when nothing differs, no tool would
run and the requests it would pay are at most ``--max_new_calls``; 1
otherwise; 2 for a usage error. Why: docs/decisions/0010-replaying-an-agent.md.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import glob
import hashlib
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beam_agents._canonical import canonical_json
from beam_agents._replay_diff import intent_difference, setting_mismatches
from beam_agents.backend import JournalEntry, JournalWrite
from beam_agents.errors import ConfigError, ProviderRejected, ToolNotRecordedError
from beam_agents.hosting import (
    KeyedState,
    add_agent_flags,
    agent_config_from_flags,
    decode_input,
    intent_to_json,
    model_provider,
    queue_order,
    read_lines,
    start_runtime,
)
from beam_agents.model import (
    CallJournal,
    CallJournalConfig,
    LearnedRateRecord,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    estimate_tokens,
)
from beam_agents.runtime import MAX_EVENT_BYTES, AgentConfig, AgentEvent, Committed, ErrorRecord

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


class _PaysUpTo:
    """The real provider, for at most `limit` requests in all (``--shadow --max_paid_calls``)."""

    def __init__(self, inner: ModelProvider, limit: int) -> None:
        self.model_id = inner.model_id
        self._inner = inner
        self._limit = limit
        self.paid = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.refused = False

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self.paid >= self._limit:
            self.refused = True
            raise WouldPayError(f"past --max_paid_calls {self._limit}: not sent",
                                model_id=self.model_id)
        self.paid += 1
        response = await self._inner.complete(request)
        self.tokens_in += response.tokens_in
        self.tokens_out += response.tokens_out
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(frozen=True, slots=True)
class _ReadOnlyJournalConfig:
    """The recorded journal, opened so that replay can read it and never write it."""

    inner: CallJournalConfig
    #: Where each activation's read is kept, to compare a missed request with it.
    reads: dict[tuple[bytes, int], Mapping[str, JournalEntry]] = field(default_factory=dict)

    def open(self) -> CallJournal:
        return _ReadOnlyJournal(self.inner.open(), self.reads)


class _ReadOnlyJournal:
    def __init__(self, inner: CallJournal,
                 reads: dict[tuple[bytes, int], Mapping[str, JournalEntry]]) -> None:
        self._inner = inner
        self._reads = reads

    async def read(self, entity_key: bytes, seq: int) -> Mapping[str, JournalEntry]:
        found = await self._inner.read(entity_key, seq)
        self._reads[(entity_key, seq)] = found
        return found

    async def write(self, entry: JournalEntry) -> JournalWrite:
        # Only a shadow run pays, and what it paid for is a check, not a record:
        # it is kept nowhere, so the journal stays the recorded run's.
        return JournalWrite(won=True, stored=entry)

    async def read_rates(self, account: str) -> Sequence[LearnedRateRecord]:
        return ()  # replay has no rate to start from

    async def write_rate(self, record: LearnedRateRecord) -> None:
        return None  # nor one to keep

    async def close(self) -> None:
        await self._inner.close()


@dataclass(frozen=True, slots=True)
class _Unpaid:
    """An activation that would pay: its event and the state it ran from."""

    event: AgentEvent
    state: KeyedState


@dataclass
class Shadow:
    """What ``--shadow`` paid for and found."""

    limit: int
    sampled: int = 0
    keys: int = 0
    finished: int = 0
    changed: int = 0
    unchanged: int = 0
    cut_off: int = 0
    stopped_at_tool: int = 0
    failed: int = 0
    paid: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    spend: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The shadow run as the ``--report`` file holds it."""
        return dataclasses.asdict(self)


@dataclass
class Report:
    """What replay found, in total and per activation worth a line."""

    activations: int = 0
    unchanged: int = 0
    differ: int = 0
    would_pay: int = 0
    would_run: int = 0
    would_pay_calls: int = 0
    would_pay_tokens: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    undecodable: int = 0
    lines: list[str] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    mismatches: Counter[str] = field(default_factory=Counter)
    shadow: Shadow | None = None

    def as_json(self) -> dict[str, Any]:
        """The report as the ``--report`` file holds it: every line whole."""
        return {"activations": self.activations, "unchanged": self.unchanged,
                "intents_differ": self.differ, "would_pay": self.would_pay,
                "would_pay_calls": self.would_pay_calls,
                "would_pay_estimated_tokens": self.would_pay_tokens,
                "would_run_tools": self.would_run,
                "dead_letters": dict(self.dead_letters), "undecodable": self.undecodable,
                "settings_that_differ": [{"finding": text, "activations": count}
                                         for text, count in self.mismatches.most_common()],
                "details": self.details,
                "shadow": None if self.shadow is None else self.shadow.as_json()}


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


Expected = dict[tuple[str, str], list[str]]


def _expected(path: str | None) -> Expected | None:
    """The recorded run's intents, by ``(entity_key, event_id)``, as canonical JSON."""
    if path is None:
        return None
    expected: Expected = defaultdict(list)
    for name in sorted(glob.glob(path)) or [path]:
        for line in Path(name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                doc = json.loads(line)
                key = doc.get("entity_key", doc.get("entity_key_b64"))
                # Re-encoded, so a file whose lines were rewritten (keys
                # reordered, spaces added) still compares byte for byte.
                expected[(str(key), str(doc.get("event_id")))].append(
                    canonical_json(doc).decode("utf-8"))
    return expected


def _check(config: AgentConfig, journal: _ReadOnlyJournalConfig,
           by_key: Mapping[bytes, list[AgentEvent]], expected: Expected | None,
           report: Report) -> list[_Unpaid]:
    """Replay every key from empty state; returns the activations that would pay."""
    provider = _NeverSends(_model_id(config))
    unpaid_activations: list[_Unpaid] = []
    with start_runtime(config, provider=provider, dry_tools=True) as runtime:
        for key in sorted(by_key):
            state = KeyedState()
            for event in by_key[key]:
                unpaid: list[ModelRequest] = []
                provider.unpaid = unpaid
                outcome = runtime.activate(state, event)
                report.activations += 1
                _account(report, event, outcome, unpaid, expected)
                if unpaid:
                    unpaid_activations.append(_Unpaid(event, state))
                    entries = journal.reads.get((event.entity_key, state.seq + 1), {})
                    for finding in setting_mismatches(unpaid[0], config.model.provider,
                                                      entries.values()):
                        report.mismatches[finding] += 1
                if isinstance(outcome, Committed):
                    state = state.after(outcome)
                elif unpaid or _would_run(outcome):
                    # The recorded run committed this event with the next seq: keep the
                    # seqs aligned, so later events still find their journal entries.
                    state = dataclasses.replace(state, seq=state.seq + 1)
    return unpaid_activations


def _intents(outcome: Any) -> list[str]:
    """The committed intents as the lines a pipeline writes: canonical JSON."""
    return ([intent_to_json(intent).decode("utf-8")
             for intent in outcome.intents] if isinstance(outcome, Committed) else [])


def _account(report: Report, event: AgentEvent, outcome: Any, unpaid: list[ModelRequest],
             expected: Expected | None) -> None:
    key_text = event.entity_key.decode("utf-8", "backslashreplace")
    where = f"{key_text} {event.event_id}"
    if unpaid:
        tokens = sum(estimate_tokens(request) for request in unpaid)
        report.would_pay += 1
        report.would_pay_calls += len(unpaid)
        report.would_pay_tokens += tokens
        line = (f"would pay      {where}: a request not in the journal (~{tokens} tokens); "
                "the activation stopped there, so its later requests were not reached")
        report.lines.append(line)
        report.details.append({"what": "would_pay", "entity_key": key_text,
                               "event_id": event.event_id, "estimated_tokens": tokens,
                               "line": line})
        return
    if _would_run(outcome):
        report.would_run += 1
        line = (f"would run      {where}: a tool call not in the journal "
                f"({outcome.error.message.split(':')[0]}); the activation stopped there, "
                "and no tool ran")
        report.lines.append(line)
        report.details.append({"what": "would_run", "entity_key": key_text,
                               "event_id": event.event_id, "line": line})
        return
    got = _intents(outcome)
    if not isinstance(outcome, Committed):
        stage = ErrorRecord.Stage.Name(outcome.error.stage).removeprefix("STAGE_").lower()
        report.dead_letters[stage] += 1
    if expected is not None:
        want = expected.get((_json_key(event.entity_key), event.event_id), [])
        if sorted(got) != sorted(want):
            report.differ += 1
            difference = intent_difference(want, got)
            line = (f"intents differ {where}: expected {len(want)}, got {len(got)}"
                    + (f"; {difference}" if difference is not None else ""))
            report.lines.append(line)
            report.lines.extend([f"    expected  {text}" for text in sorted(want)]
                                + [f"    got       {text}" for text in sorted(got)])
            report.details.append({
                "what": "intents_differ", "entity_key": key_text, "event_id": event.event_id,
                "field": None if difference is None else difference.path,
                "expected": sorted(want), "got": sorted(got), "line": line})
            return
    report.unchanged += 1


def _would_run(outcome: Any) -> bool:
    """Whether the activation stopped at a tool call the journal does not hold."""
    return (not isinstance(outcome, Committed)
            and outcome.error.error_type.endswith(ToolNotRecordedError.__name__))


def _json_key(entity_key: bytes) -> str:
    """The entity key as an intent's JSON spells it: UTF-8 text, else base64 (``_b64``)."""
    try:
        return entity_key.decode()
    except UnicodeDecodeError:
        return base64.b64encode(entity_key).decode()


def _sample(unpaid: Sequence[_Unpaid]) -> tuple[list[_Unpaid], int]:
    """The would-pay activations in the order shadow pays for them, and how many keys they span.

    Evenly across keys: each key's first, then each key's second, and so on,
    with the keys in the order of a digest of their bytes, so no key (nor the
    alphabet's first) takes the whole budget and a rerun picks the same ones.
    """
    by_key: dict[bytes, list[_Unpaid]] = defaultdict(list)
    for activation in unpaid:
        by_key[activation.event.entity_key].append(activation)
    keys = sorted(by_key, key=lambda key: hashlib.sha256(key).digest())
    order = [by_key[key][round_] for round_ in range(max(map(len, by_key.values()), default=0))
             for key in keys if round_ < len(by_key[key])]
    return order, len(keys)


def _shadow(config: AgentConfig, unpaid: Sequence[_Unpaid], expected: Expected | None,
            limit: int) -> Shadow:
    """Pay for up to `limit` requests of the would-pay activations, and compare their decisions."""
    shadow = Shadow(limit=limit)
    order, shadow.keys = _sample(unpaid)
    paying = _PaysUpTo(model_provider(config.model), limit)
    # Shadow pays for model calls, never for actions: a tool call the journal
    # does not hold still stops the activation, as in the replay itself.
    with start_runtime(config, provider=paying, dry_tools=True) as runtime:
        for activation in order:
            if paying.paid >= limit:
                break
            shadow.sampled += 1
            outcome = runtime.activate(activation.state, activation.event)
            if paying.refused:
                shadow.cut_off += 1  # it needed more requests than were left to pay for
                break
            if _would_run(outcome):
                shadow.stopped_at_tool += 1
                continue
            if not isinstance(outcome, Committed):
                shadow.failed += 1
                continue
            shadow.finished += 1
            event = activation.event
            want = ([] if expected is None else
                    expected.get((_json_key(event.entity_key), event.event_id), []))
            if sorted(_intents(outcome)) != sorted(want):
                shadow.changed += 1
            else:
                shadow.unchanged += 1
    shadow.paid, shadow.tokens_in, shadow.tokens_out = (paying.paid, paying.tokens_in,
                                                        paying.tokens_out)
    model = config.model
    if model.price_in_per_mtok is not None or model.price_out_per_mtok is not None:
        shadow.spend = (shadow.tokens_in * (model.price_in_per_mtok or 0.0)
                        + shadow.tokens_out * (model.price_out_per_mtok or 0.0)) / 1e6
    return shadow


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
                        help="Requests replay may find missing from the journal and still pass "
                             "(default 0).")
    replay.add_argument("--report", help="Also write the report as JSON to this file, every "
                        "line whole.")
    replay.add_argument("--shadow", action="store_true",
                        help="Pay for some of the requests that would pay (the model flags' "
                             "provider, key and prices), sampled evenly across keys, and report "
                             "how many decisions change and what the calls cost. Needs "
                             "--max_paid_calls; nothing paid is journaled.")
    replay.add_argument("--max_paid_calls", type=int,
                        help="With --shadow: the most requests it pays for, in all.")
    add_agent_flags(parser)
    return parser


def _print(report: Report, out: Any) -> None:
    for finding, count in report.mismatches.most_common():
        print(f"setting differs ({count} activation(s)): {finding}", file=out)
    for line in report.lines:
        print(line, file=out)
    print("replay", file=out)
    rows: Iterator[tuple[str, object]] = iter([
        ("activations", report.activations), ("unchanged", report.unchanged),
        ("intents differ", report.differ), ("would pay", report.would_pay),
        ("requests reached, missing", report.would_pay_calls),
        ("would run a tool", report.would_run),
        ("estimated tokens they cost", report.would_pay_tokens),
        ("dead letters", sum(report.dead_letters.values())),
        ("undecodable lines", report.undecodable)])
    for label, value in rows:
        print(f"  {label:<28}{value:>8}", file=out)
    if report.would_pay:
        print("  an activation that would pay stops at its first request missing from the "
              "journal: its later requests are not reached, so the requests counted are those "
              "reached, a floor of what a run would pay", file=out)
    if report.shadow is None:
        print("  calls paid                         0   (replay sends no request)", file=out)
        return
    _print_shadow(report.shadow, report.would_pay, out)


def _print_shadow(shadow: Shadow, would_pay: int, out: Any) -> None:
    print("shadow", file=out)
    rows: list[tuple[str, object, str]] = [
        ("calls paid", shadow.paid, f"at most {shadow.limit}, --max_paid_calls"),
        ("tokens paid (in / out)", f"{shadow.tokens_in} / {shadow.tokens_out}", ""),
        ("activations sampled", shadow.sampled,
         f"of {would_pay} that would pay, across {shadow.keys} key(s)"),
        ("decisions changed", shadow.changed, f"of {shadow.finished} run to the end"),
        ("decisions unchanged", shadow.unchanged, "")]
    if shadow.cut_off:
        rows.append(("cut off by the limit", shadow.cut_off,
                     "needed more calls than were left; not counted"))
    if shadow.stopped_at_tool:
        rows.append(("stopped at a tool call", shadow.stopped_at_tool,
                     "not in the journal; shadow runs no tool, so not counted"))
    if shadow.failed:
        rows.append(("dead letters", shadow.failed, ""))
    for label, value, note in rows:
        print(f"  {label:<28}{value!s:>8}" + (f"   ({note})" if note else ""), file=out)
    if shadow.spend is not None:
        print(f"  {'estimated spend':<28}{shadow.spend:>8.4f}   (the calls paid, at the "
              "--model_price_* flags)", file=out)
    else:
        print("  estimated spend: set --model_price_in_per_mtok and --model_price_out_per_mtok",
              file=out)
    if shadow.finished:
        share = shadow.changed / shadow.finished
        print(f"  about {share:.0%} of the {would_pay} activations that would pay would change "
              f"their decision (~{round(share * would_pay)}), from {shadow.finished} sampled",
              file=out)


def main(argv: Sequence[str], *, out: Any = None) -> int:
    """Run ``beam-agents replay``; returns the exit code (0 pass, 1 differs or would pay)."""
    out = out if out is not None else sys.stdout
    args = _parser().parse_args(list(argv))
    if args.max_new_calls < 0:
        raise ConfigError("--max_new_calls must be 0 or more", field="max_new_calls")
    if args.shadow != (args.max_paid_calls is not None):
        raise ConfigError("--shadow pays for requests: give it --max_paid_calls N, the most it "
                          "may pay for (and --max_paid_calls only with --shadow)",
                          field="max_paid_calls")
    if args.shadow and args.max_paid_calls < 1:
        raise ConfigError(f"--max_paid_calls must be 1 or more, got {args.max_paid_calls}",
                          field="max_paid_calls")
    values = vars(args)
    config = agent_config_from_flags(values)
    _journal_exists(config, values)
    assert config.call_journal is not None
    # A miss is a ProviderRejected, which no circuit breaker counts as an outage.
    journal = _ReadOnlyJournalConfig(config.call_journal)
    config = dataclasses.replace(config, call_journal=journal)
    report = Report()
    by_key = _events(args.input_files, config.max_event_bytes or MAX_EVENT_BYTES, report)
    expected = _expected(args.expected_intents)
    unpaid = _check(config, journal, by_key, expected, report)
    if args.shadow:
        report.shadow = _shadow(config, unpaid, expected, args.max_paid_calls)
    _print(report, out)
    if args.report:
        Path(args.report).write_text(json.dumps(report.as_json(), indent=2) + "\n")
    passed = report.differ == 0 and report.would_run == 0 and \
        report.would_pay_calls <= args.max_new_calls
    return 0 if passed else 1
