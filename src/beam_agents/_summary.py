"""The end-of-run summary every host prints, from its counters: `beam-agents run`, the Flink job.

Counters are ``(namespace, name)`` pairs (`beam_agents.metrics`), gathered
however the engine keeps them: Beam's metric results, a local tally, the
files the native Flink job's operators leave (`beam_agents.flink`). The
lines are the same everywhere, so a run reads the same on every engine.
Imports nothing but the model config.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from beam_agents.model import ModelConfig

__all__ = ["SUMMARY_COUNTERS", "print_summary"]

Key = tuple[str, str]

SUMMARY_COUNTERS = (
    ("events read", "beam_agents.runtime", "events"),
    ("activations committed", "beam_agents.runtime", "committed"),
    ("model calls paid", "beam_agents.model", "paid_calls"),
    ("model calls failed", "beam_agents.model", "provider_errors"),
    ("model calls replayed", "beam_agents.model", "cache_hits"),
    ("replayed from journal", "beam_agents.model", "journal_hits"),
    ("suspensions", "beam_agents.runtime", "suspended"),
    ("held by an open breaker", "beam_agents.runtime", "breaker_held"),
    ("retries", "beam_agents.runtime", "retries"),
    ("retries exhausted", "beam_agents.runtime", "retries_exhausted"),
    ("soft-cap warnings", "beam_agents.memory", "soft_cap_warnings"),
    ("long-term writes superseded", "beam_agents.memory", "longterm_writes_superseded"),
)

#: Printed only when the agent ran tools: a run of an agent without any says nothing of them.
TOOL_COUNTERS = (
    ("tool calls run", "beam_agents.tools", "tool_calls"),
    ("tool results replayed", "beam_agents.tools", "tool_calls_replayed"),
    ("tool results from journal", "beam_agents.tools", "tool_journal_hits"),
    ("tool calls reconciled", "beam_agents.tools", "tool_calls_reconciled"),
    ("tool errors", "beam_agents.tools", "tool_errors"),
)

#: The note naming the first entity whose long-term write the seq guard refused.
SUPERSEDED_FIRST = ("beam_agents.memory", "longterm_superseded_first")


def print_summary(counters: Mapping[Key, int], peaks: Mapping[Key, int],
                  notes: Mapping[Key, str], *, elapsed_s: float, model: ModelConfig,
                  runner: str | None = None, uncounted: str | None = None) -> None:
    """Print the summary on stdout: counts, tokens and spend, flow control, errors by stage.

    `uncounted` says why the host could not read its counters: each count not
    in `counters` then shows as ``-``, never as a zero that reads as "none".
    """
    counts: _Counts = _Counts(counters, known=None if uncounted is None else set(counters))
    events = counts[("beam_agents.runtime", "events")]
    print("summary")
    if runner is not None:
        print(f"  {'runner':<28}{runner}")
    if uncounted is not None:
        print(f"  {'not counted':<28}{uncounted}")
    for label, namespace, name in SUMMARY_COUNTERS:
        print(f"  {label:<28}{counts.shown((namespace, name)):>8}"
              f"{_note(name, counts, notes)}")
    if any(counts[(namespace, name)] for _, namespace, name in TOOL_COUNTERS):
        for label, namespace, name in TOOL_COUNTERS:
            print(f"  {label:<28}{counts[(namespace, name)]:>8}")
    _summarize_flow(counts, model)
    peak_key = ("beam_agents.runtime", "in_flight_peak")
    peak = peaks.get(peak_key, "-" if uncounted is not None else 0)
    print(f"  {'peak activations in flight':<28}{peak:>8}")
    rate = "-" if counts.unknown(("beam_agents.runtime", "events")) else (
        f"{events / max(elapsed_s, 1e-9):.1f}")
    print(f"  {'events/s':<28}{rate:>8}   ({elapsed_s:.1f} s in all)")
    errors = sorted((name.removeprefix("errors_"), count) for (namespace, name), count
                    in counts.items() if namespace == "beam_agents.runtime"
                    and name.startswith("errors_"))
    # Known when the host counted any stage, even as 0 (read from its dead letters).
    total = "-" if uncounted is not None and not errors else sum(c for _, c in errors)
    print(f"  {'errors by stage':<28}{total:>8}")
    for stage, count in sorted(errors):
        if count:  # a host that read its dead letters knows a stage had none
            print(f"    {stage:<26}{count:>8}")
    suspended = counts[("beam_agents.runtime", "suspended")]
    exhausted = counts[("beam_agents.runtime", "retries_exhausted")]
    if suspended and not exhausted:
        print(f"  the provider failed transiently {suspended} time(s); every suspended "
              "activation was retried and committed: no event was dead-lettered for the outage")
    elif exhausted:
        print(f"  {exhausted} event(s) were dead-lettered after their last retry "
              "(retriable: true); redrive them once the provider is back")
    if counts[("beam_agents.memory", "longterm_writes_superseded")]:
        print("  long-term writes were refused by the seq guard: the store held a newer seq, so "
              "this run's keyed state was behind it. Run with --state_snapshot so each key "
              "continues its seq (docs/operations.md, \"State between batch runs\")")


class _Counts(Counter[Key]):
    """The run's counts, and which of them it could read (None: all of them)."""

    def __init__(self, counters: Mapping[Key, int], *, known: set[Key] | None) -> None:
        super().__init__(counters)
        self._known = known

    def unknown(self, key: Key) -> bool:
        """Whether the host could not count `key` (its zero would be a guess)."""
        return self._known is not None and key not in self._known

    def shown(self, key: Key) -> int | str:
        """The count as printed: ``-`` where it is unknown."""
        return "-" if self.unknown(key) else self[key]


def _note(name: str, counts: Counter[Key], notes: Mapping[Key, str]) -> str:
    """What a summary line means beside its count, where a ratio or a name says more."""
    failed = counts[("beam_agents.model", "provider_errors")]
    if name == "suspended" and failed:
        per_call = counts[("beam_agents.runtime", "suspended")] / failed
        return f"   ({per_call:.2f} per failed model call)"
    if name == "breaker_held" and counts[("beam_agents.runtime", name)]:
        return "   (starts deferred while the provider was down; no agent code ran for them)"
    if name == "longterm_writes_superseded" and counts[("beam_agents.memory", name)]:
        first = notes.get(SUPERSEDED_FIRST)
        return f"   (first: entity {first})" if first else ""
    return ""


def _summarize_flow(counts: _Counts, model: ModelConfig) -> None:
    """Tokens paid and replayed, the spend, and how the provider's quota shaped the run."""
    def count(namespace: str, name: str) -> int:
        return counts[(f"beam_agents.{namespace}", name)]

    def shown(namespace: str, name: str) -> int | str:
        return counts.shown((f"beam_agents.{namespace}", name))

    if counts.unknown(("beam_agents.model", "tokens_in")):
        print(f"  {'tokens paid (in / out)':<28}{'-':>8} / -")
        print(f"  {'tokens replayed':<28}{'-':>8}")
        for label in ("throttled activations", "rate limited (429)", "quota exhausted"):
            print(f"  {label:<28}{'-':>8}")
        return
    tokens_in, tokens_out = count("model", "tokens_in"), count("model", "tokens_out")
    print(f"  {'tokens paid (in / out)':<28}{tokens_in:>8} / {tokens_out}")
    print(f"  {'tokens replayed':<28}{shown('model', 'tokens_replayed'):>8}")
    if model.price_in_per_mtok is not None or model.price_out_per_mtok is not None:
        price_in, price_out = model.price_in_per_mtok or 0.0, model.price_out_per_mtok or 0.0
        spend = (tokens_in * price_in + tokens_out * price_out) / 1e6
        print(f"  {'estimated spend':<28}{spend:>8.4f}   (at {price_in:g} / {price_out:g} per "
              "million tokens in / out; replayed tokens cost nothing)")
    waited_s = count("runtime", "throttled_ms") / 1000
    print(f"  {'throttled activations':<28}{count('runtime', 'throttled'):>8}   "
          f"(waited {waited_s:.1f} s in all for the provider's capacity)")
    print(f"  {'rate limited (429)':<28}{count('model', 'rate_limited'):>8}")
    print(f"  {'quota exhausted':<28}{count('model', 'quota_exhausted'):>8}")
