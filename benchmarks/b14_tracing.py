"""B14. What tracing costs: B2's batch path with tracing off, at 100 % and at 1 % sampling.

The README's agent over the local model, its spans (``invoke_agent`` and
``chat``, with their attributes) and the two ``gen_ai.client.*`` histograms
exported over OTLP/HTTP to a Jaeger started on loopback (built by ``make``;
it takes traces, not metrics, so the metrics exporter's sends fail and are
dropped, as they would against a collector that is down). CPU time of this
process, every thread included (the runner's, the runtime's, the
exporter's), per event, from the difference of two input sizes, so start-up
cancels out; the three variants alternate, in an order reversed every
repetition. Targets (issue "traces"): at most 10 % more CPU per event at
100 % sampling, 2 % at 1 %.
"""

from __future__ import annotations

from typing import Any

from benchmarks._harness import Profile
from benchmarks.b2_pipeline import tracing_overhead

__all__ = ["run"]


def run(profile: Profile) -> dict[str, Any]:
    """Measure B14; see the module docstring."""
    result = tracing_overhead(profile)
    full, sampled = result["traced_100"], result["traced_1"]
    cpu = result["cpu_us_per_event"]
    alone = result["tracing_alone_us_per_event"]
    return {
        "name": "Tracing cost (B2's batch path, CPU per event)",
        "workload": "B2's batch path (300 vs 1,800 events over 50 keys), spans to Jaeger",
        "unit": "CPU per event, traced / untraced (median)",
        **result,
        "ratio": full["ratio"], "ratio_min": full["ratio_min"], "ratio_max": full["ratio_max"],
        "target": full["target"], "met": full["met"] and sampled["met"],
        "note": (f"CPU per event: off {cpu['off']['median']:.0f} us, 100 % sampling "
                 f"{cpu['traced_100']['median']:.0f} us ({full['ratio']:.2f}x, target "
                 f"<= {full['target']}), 1 % sampling {cpu['traced_1']['median']:.0f} us "
                 f"({sampled['ratio']:.2f}x, target <= {sampled['target']}); Jaeger "
                 f"received {result['spans_received_at_100']:,} spans of the 100 % runs; "
                 f"tracing's own calls alone {alone['traced_100']['median']:.0f} us (100 %) "
                 f"and {alone['traced_1']['median']:.0f} us (1 %) per event."),
    }
