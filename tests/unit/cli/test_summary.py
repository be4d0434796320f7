"""The end-of-run summary says what a host could not count, instead of printing a zero."""

from __future__ import annotations

import pytest

from beam_agents._summary import print_summary
from beam_agents.model import ModelConfig

RUNTIME = "beam_agents.runtime"


def _line(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"  {label} "))


def test_counts_a_host_could_not_read_show_as_a_dash_and_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    """THEN unread counters print "-", the reason is named, and what was counted still shows."""
    print_summary({(RUNTIME, "errors_decode"): 2, (RUNTIME, "errors_agent"): 0}, {}, {},
                  elapsed_s=3.0, model=ModelConfig(), runner="native Flink job, cluster",
                  uncounted="counters (in Flink's metrics)")
    shown = capsys.readouterr().out

    assert _line(shown, "not counted").endswith("counters (in Flink's metrics)")
    for label in ("events read", "activations committed", "model calls paid",
                  "tokens replayed", "peak activations in flight", "events/s"):
        assert _line(shown, label).split()[-1 if label != "events/s" else 1] == "-", label
    assert _line(shown, "tokens paid (in / out)").endswith("- / -")
    assert _line(shown, "errors by stage").split()[-1] == "2"
    assert "    decode" in shown and "    agent" not in shown  # a stage with none is left out


def test_a_host_that_read_every_counter_prints_zeros_as_zeros(
        capsys: pytest.CaptureFixture[str]) -> None:
    """THEN without `uncounted` nothing changes: an absent counter is a zero."""
    print_summary({(RUNTIME, "events"): 5}, {}, {}, elapsed_s=1.0, model=ModelConfig())
    shown = capsys.readouterr().out

    assert "not counted" not in shown and " - " not in shown
    assert _line(shown, "events read").split()[-1] == "5"
    assert _line(shown, "retries").split()[-1] == "0"
    assert _line(shown, "errors by stage").split()[-1] == "0"


def test_a_distribution_no_sample_reached_is_no_peak_and_no_crash(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Prism sometimes reports a distribution with no samples: max None, once a TypeError."""
    from apache_beam.metrics.cells import DistributionData, DistributionResult  # noqa: PLC0415
    from apache_beam.metrics.execution import MetricKey, MetricResult  # noqa: PLC0415
    from apache_beam.metrics.metricbase import MetricName  # noqa: PLC0415

    from beam_agents.cli import _summarize  # noqa: PLC0415

    def distribution(name: str, data: DistributionData | None) -> MetricResult:
        key = MetricKey("Activate", MetricName("beam_agents.runtime", name))
        result = None if data is None else DistributionResult(data)
        return MetricResult(key, result, result)

    empty = DistributionResult(DistributionData(0, 0, None, None))
    assert empty.max is None  # what the runner hands over
    found = {"counters": [], "distributions": [
        distribution("in_flight_peak", DistributionData(0, 0, None, None)),
        distribution("in_flight_peak", DistributionData(12, 3, 2, 7)),
        distribution("queued_per_key_peak", None)], "gauges": []}

    class _Result:
        def metrics(self) -> object:
            class _Query:
                def query(self, _filter: object) -> dict[str, list[MetricResult]]:
                    return found
            return _Query()

    _summarize(_Result(), 1.0, ModelConfig())
    peak = next(line for line in capsys.readouterr().out.splitlines()
                if "peak activations in flight" in line)
    assert peak.split()[-1] == "7"
