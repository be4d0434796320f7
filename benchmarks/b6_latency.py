"""B6. Model-latency-bound throughput: the provider answers after 200 ms, 64 keys in flight.

The agent (`benchmarks._agents.slow_reply`) makes one model call per event;
the local model waits 200 ms before answering
(``ModelConfig.local.latency_ms``), as a hosted model would, so CPU is not
what a worker runs out of: one activation at a time, a worker does 5
events/s whatever it runs on. The
engine runs up to ``AgentConfig.max_in_flight`` (64) activations of
different keys at once, one per key, so with 64 keys the ideal is 64 times
the serial rate. Each path runs the same events, round-robin over 64 keys,
and is measured against the serial rate taken in the same repetition:

* serial: `ActivationRuntime.activate`, one event at a time;
* batch: the library's batch path on the DirectRunner
  (``Create -> GroupByKey -> AgentBatchDoFn``, `benchmarks._beam.run_batch`);
* streaming: `AgentDoFn` on the streaming DirectRunner, fed by a TestStream
  one event per key per step, each stamped with its event time and followed
  by a watermark past it, with processing time advanced so that its wake
  timers fire (`benchmarks._beam.run_streaming`);
* streaming_floor: the same stream into `benchmarks._beam.StreamingFloorDoFn`,
  a DoFn with `AgentDoFn`'s state cells, timers and callbacks and no library
  code, whose "activation" is a 200 ms wait: the runner's own cost of the
  protocol, which the streaming path's figures are also given net of;
* flink: the native job (``templates/flink/agent_job.py``) on a local
  MiniCluster at parallelism 1, checkpointing every second
  (`benchmarks._flink.run_job`), its Python functions in worker processes
  (``--python_execution_mode process``, the default);
* flink_thread: the same job with its Python functions embedded in the
  task manager's JVM (``--python_execution_mode thread``).

Every runner takes seconds to start (the MiniCluster well over ten), so each
path runs at two sizes and its rate is the difference in events over the
difference in wall time; its CPU per activation is likewise the difference
in process CPU time (for Flink: of the job's interpreter, JVM and Python
workers) over the difference in events, and the cores it kept busy are
the CPU difference over the wall difference. A bounded Flink job also ends
with a tail that depends on what each key still holds when the input ends
(see the note), which two sizes do not cancel, so its rate is
taken from the job's own commits instead: the sink commits a part file on
every checkpoint, and the lines of all but the first and the last part,
over the time from the first commit to the one before the last, are the
rate in full flow. The paths run in an order that rotates from repetition
to repetition. Target: at least 32x serial on each path, half the ideal.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from beam_agents.hosting import KeyedState, start_runtime
from beam_agents.model import LocalModelConfig, ModelConfig
from beam_agents.runtime import AgentConfig, AgentEvent, Committed
from benchmarks import _flink
from benchmarks._beam import run_batch, run_streaming, run_streaming_floor
from benchmarks._harness import Profile, Stat, ratios, stat

__all__ = ["KEYS", "LATENCY_MS", "TARGET", "run"]

LATENCY_MS = 200
KEYS = 64
#: The least ratio to serial each path should reach: half of ``min(KEYS, max_in_flight)``.
TARGET = 32
_AGENT = "benchmarks._agents:slow_reply"
_CONFIG = AgentConfig(agent=_AGENT,
                      model=ModelConfig(local=LocalModelConfig(latency_ms=LATENCY_MS)))
_FLINK_FLAGS = ["--agent", _AGENT, "--model_latency_ms", str(LATENCY_MS)]
_PATHS = ("batch", "streaming", "flink", "flink_thread")
#: Measured like a path, reported inside the streaming path as its baseline.
_FLOOR = "streaming_floor"
#: The paths that run the native Flink job, and the flags that tell them apart.
_FLINK_MODES = {"flink": ["--python_execution_mode", "process"],
                "flink_thread": ["--python_execution_mode", "thread"]}
_RUNNERS = {
    "batch": "Create -> GroupByKey -> AgentBatchDoFn on the DirectRunner (FnApiRunner, 1 worker)",
    "streaming": ("TestStream -> AgentDoFn on the streaming DirectRunner, elements stamped "
                  "with their event time, the watermark advanced past each step, processing "
                  "time advanced past the wall clock"),
    _FLOOR: ("the streaming path's stream into StreamingFloorDoFn: AgentDoFn's state cells, "
             "timers and callbacks with no library code, each activation a 200 ms wait"),
    "flink": ("templates/flink/agent_job.py on a local MiniCluster, parallelism 1, "
              "checkpoints every 1 s, Python in worker processes"),
    "flink_thread": ("templates/flink/agent_job.py on a local MiniCluster, parallelism 1, "
                     "checkpoints every 1 s, Python embedded in the JVM (thread mode)"),
}


def _event(number: int) -> AgentEvent:
    return AgentEvent(entity_key=f"customer-{number % KEYS}".encode(), event_id=f"e{number}",
                      event_time_ms=1_700_000_000_000 + number * 1_000,
                      payload=f"question {number}".encode())


def _keyed(count: int) -> list[tuple[bytes, bytes]]:
    return [(e.entity_key, e.SerializeToString(deterministic=True))
            for e in map(_event, range(count))]


def _json_lines(count: int) -> list[bytes]:
    return [json.dumps({"entity_key": e.entity_key.decode(), "event_id": e.event_id,
                        "event_time_ms": e.event_time_ms, "payload": e.payload.decode()},
                       separators=(",", ":")).encode() for e in map(_event, range(count))]


def _serial(count: int) -> tuple[float, float]:
    """Wall and CPU seconds of `count` activations, one at a time."""
    with start_runtime(_CONFIG) as runtime:
        states: dict[bytes, KeyedState] = {}
        cpu, start = time.process_time(), time.perf_counter()
        for event in map(_event, range(count)):
            state = states.get(event.entity_key, KeyedState())
            outcome = runtime.activate(state, event)
            assert isinstance(outcome, Committed), outcome
            states[event.entity_key] = state.after(outcome)
        return time.perf_counter() - start, time.process_time() - cpu


def _in_process(run: Callable[[], float]) -> tuple[float, float]:
    """Wall and CPU seconds of a pipeline that runs in this process (the DirectRunner)."""
    cpu = time.process_time()
    wall = run()
    return wall, time.process_time() - cpu


class _Flink:
    """One Flink path: its job's input lines by size, and its runs, kept for their commits."""

    def __init__(self, flags: list[str], counts: tuple[int, int]) -> None:
        self.flags = [*_FLINK_FLAGS, *flags]
        self.lines = {"small": _json_lines(counts[0]), "large": _json_lines(counts[1])}
        self.runs: dict[str, list[_flink.JobRun]] = {"small": [], "large": []}

    def measure(self, size: str) -> tuple[float, float]:
        """Wall and CPU seconds of one job over the input of `size` ("small" or "large")."""
        run = _flink.run_job(self.lines[size], self.flags)
        self.runs[size].append(run)
        return run.wall_s, run.cpu_s

    def flow_rates(self) -> list[float] | None:
        """The large runs' rates in full flow; None if a run was too short to tell."""
        rates = [_flow_rate(run) for run in self.runs["large"]]
        return [rate for rate in rates if rate is not None] if None not in rates else None

    def final_gaps(self) -> dict[str, Any]:
        """Per size, how long the last commit took after the one before it."""
        gaps = {size: [run.commits[-1][0] - run.commits[-2][0] for run in runs
                       if len(run.commits) >= 2] for size, runs in self.runs.items()}
        return {size: stat(values).as_json(1) for size, values in gaps.items() if values}


def _flow_rate(run: _flink.JobRun) -> float | None:
    """The job's rate between its first and last commits.

    The sink rolls a part file on every checkpoint. The first part holds what
    came out during start-up and the last what came out after the input
    ended, so the parts in between give the rate while the job is in full
    flow, with neither start-up nor the end of the input in it. None when
    the run was too short to commit three parts.
    """
    times = [at for at, _ in run.commits]
    if len(times) < 3 or times[-2] <= times[0]:
        return None
    return sum(count for _, count in run.commits[1:-1]) / (times[-2] - times[0])


def _path_result(name: str, rates: list[float], cpus: list[float], cores: list[float],
                 serial: list[float], ideal: float) -> dict[str, Any]:
    to_serial = ratios(rates, serial)
    to_ideal = ratios(rates, [ideal * s for s in serial])
    return {
        "runner": _RUNNERS[name],
        "events_per_s": stat(rates).as_json(1),
        "ratio_to_serial": to_serial.as_json(2),
        "ideal_events_per_s": round(ideal * stat(serial).median, 1),
        "ratio_to_ideal": to_ideal.as_json(3),
        "cpu_ms_per_event": stat(cpus).scaled(1e3).as_json(2),
        "cpu_cores_busy": stat(cores).as_json(2),
        "met": to_serial.median >= TARGET,
    }


def _net_of_floor(marginal: dict[str, list[float]], cpus: dict[str, list[float]],
                  cores: dict[str, list[float]], serial: list[float],
                  ideal: float) -> dict[str, Any]:
    """The streaming path against the runner's floor, each repetition with its own floor.

    ``library_cpu_ms_per_event`` is what the library adds per activation to
    what any DoFn of `AgentDoFn`'s shape costs this runner, and
    ``ratio_to_floor`` the path's rate over the floor's: the share of what
    this runner lets a DoFn of that shape reach.
    """
    floor = _path_result(_FLOOR, marginal[_FLOOR], cpus[_FLOOR], cores[_FLOOR], serial, ideal)
    del floor["met"]
    return {
        "runner_floor": floor,
        "library_cpu_ms_per_event": stat(
            [path - base for path, base in zip(cpus["streaming"], cpus[_FLOOR], strict=True)]
        ).scaled(1e3).as_json(2),
        "ratio_to_floor": ratios(marginal["streaming"], marginal[_FLOOR]).as_json(3),
    }


def _note(paths: dict[str, Any], serial: Stat, ideal: float, skipped: dict[str, str]) -> str:
    def said(name: str) -> str:
        path = paths[name]
        return (f"{name} {path['events_per_s']['median']:.0f} events/s "
                f"({path['ratio_to_serial']['median']:.1f}x serial, "
                f"{path['ratio_to_ideal']['median']:.2f} of the ideal; "
                f"{path['cpu_ms_per_event']['median']:.2f} ms CPU per activation, "
                f"{path['cpu_cores_busy']['median']:.2f} cores busy)")

    text = (f"With a {LATENCY_MS} ms model and {KEYS} keys, serial runs "
            f"{serial.median:.2f} events/s and the ideal is {ideal:.0f}x that "
            f"({ideal * serial.median:.0f}/s): "
            + "; ".join(said(name) for name in _PATHS if name in paths) + ". "
            "A key runs one activation at a time (invariant 10), so the model's latency "
            f"bounds each key to {1000 // LATENCY_MS} events/s and {KEYS} keys to {ideal:.0f} "
            "calls in flight; what a path loses against that is its own work between "
            "activations. ")
    if "batch" in paths:
        text += ("Batch: the GroupByKey hands the DoFn each key with all its events, and "
                 "the DoFn runs every key of the bundle at once on the engine, pumping a key "
                 "when its activation finishes; it loses the turn between one activation's "
                 "end and the key's next start, and the runner's per-element work. ")
    if "streaming" in paths:
        text += ("Streaming: each event runs once the watermark has passed it, while the "
                 "input still arrives; the engine is driven by the arrival, the release "
                 "timer and each key's wake timer, about three callbacks per event. With "
                 "the runner's processing time a day ahead of the wall clock, every wake "
                 "is due at once and waits there for its key's activation; the runner "
                 "fires the due timers of a step in one bundle, one after another on one "
                 "thread, and adds the test stream's next step only when no timer is due, "
                 "so a key often finds its next event not yet arrived. ")
        floor = paths["streaming"]["runner_floor"]
        text += ("The runner's floor, a DoFn of the same state cells, timers and callbacks "
                 "with no library code, costs "
                 f"{floor['cpu_ms_per_event']['median']:.2f} ms CPU per activation and reaches "
                 f"{floor['ratio_to_ideal']['median']:.2f} of the ideal on the same stream; "
                 "the library adds "
                 f"{paths['streaming']['library_cpu_ms_per_event']['median']:.2f} ms to it, "
                 "and the path runs at "
                 f"{paths['streaming']['ratio_to_floor']['median']:.2f} of the floor's rate. ")
    flink = paths.get("flink")
    if flink is not None:
        text += (f"Flink ({flink['rate_from']}): in event-time order, the default, the job "
                 "queues each key's events in keyed state as the file is read and runs "
                 "them when it ends, in rounds: every key's next event at once. Its CPU "
                 "per activation is the JVM's and the Python worker's together: keyed "
                 "state and timers live in the JVM, and at each bundle's end the worker "
                 "writes every state the bundle touched with one blocking request, so "
                 "bundles of 100,000 (the event-time default) write a key once for several "
                 "rounds where bundles of 16 wrote it every round. ")
        gaps = flink["final_commit_gap_s"]
        if "large" in gaps:
            text += (f"When the bounded input ends, the last commit comes "
                     f"{gaps['large']['median']:.1f} s after the one before at "
                     "the large size")
            if "small" in gaps:
                text += f" and {gaps['small']['median']:.1f} s at the small one"
            text += (": the end-of-input timers run the keys' queues out in rounds, each "
                     "round starting every key's next event at once, so the tail is about "
                     f"{LATENCY_MS} ms for each event the longest queue still holds (drained "
                     f"key after key it was {KEYS} keys x {LATENCY_MS} ms per event left). "
                     "The rate from the two sizes counts that tail wherever it differs "
                     "between them: "
                     f"{flink['two_size_events_per_s']['median']:.0f} events/s "
                     f"[{flink['two_size_events_per_s']['min']:.0f}-"
                     f"{flink['two_size_events_per_s']['max']:.0f}] for the whole job. ")
    thread = paths.get("flink_thread")
    if thread is not None:
        text += ("Flink in thread mode (--python_execution_mode thread) runs the same job "
                 "with its Python functions in an interpreter embedded in the task manager's "
                 "JVM: keyed state and timers are read and written in process instead of "
                 "over gRPC at each bundle's end, and no worker process starts")
        if flink is not None:
            text += (f" (the small job took {thread['job_wall_s']['small']['median']:.1f} s "
                     f"against {flink['job_wall_s']['small']['median']:.1f} s)")
        text += ". "
    for name, reason in skipped.items():
        text += f"{name}: not measured: {reason}. "
    return text.strip()


def run(profile: Profile) -> dict[str, Any]:
    """Measure B6; see the module docstring."""
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    small, large = (KEYS, 10 * KEYS) if profile.quick else (4 * KEYS, 24 * KEYS)
    # A Flink job's start-up alone costs 15-35 s of CPU, varying by seconds
    # from run to run; its large size is sixteen times the others' so that
    # this noise stays under 0.2 ms an event of the difference.
    flink_large = large if profile.quick else 16 * large
    counts = {name: (small, flink_large if name in _FLINK_MODES else large)
              for name in (*_PATHS, _FLOOR)}
    serial_count = 10 if profile.quick else 25
    reps = 1 if profile.quick else 3
    orphans_adopted = _flink.adopt_orphans()
    jobs = {name: _Flink(flags, counts[name]) for name, flags in _FLINK_MODES.items()}
    sizes = {"small": _keyed(small), "large": _keyed(large)}
    measures: dict[str, Callable[[str], tuple[float, float]]] = {
        "batch": lambda size: _in_process(lambda: run_batch(_CONFIG, sizes[size])),
        "streaming": lambda size: _in_process(
            lambda: run_streaming(_CONFIG, sizes[size], step=KEYS)),
        _FLOOR: lambda size: _in_process(
            lambda: run_streaming_floor(LATENCY_MS, sizes[size], step=KEYS)),
        **{name: job.measure for name, job in jobs.items()},
    }
    measured = (*_PATHS, _FLOOR)
    marginal: dict[str, list[float]] = {name: [] for name in measured}
    cpus: dict[str, list[float]] = {name: [] for name in measured}
    walls: dict[str, list[tuple[float, float]]] = {name: [] for name in measured}
    cores: dict[str, list[float]] = {name: [] for name in measured}
    serial_rates: list[float] = []
    serial_cpus: list[float] = []
    skipped: dict[str, str] = {}
    cases = ["serial", *measured]
    for rep in range(reps):
        for case in cases[rep % len(cases):] + cases[:rep % len(cases)]:
            if case == "serial":
                wall, cpu = _serial(serial_count)
                serial_rates.append(serial_count / wall)
                serial_cpus.append(cpu / serial_count)
                continue
            if case in skipped:
                continue
            try:
                (wall_small, cpu_small), (wall_large, cpu_large) = (
                    measures[case]("small"), measures[case]("large"))
            except Exception as exc:
                if case not in jobs:
                    raise
                # The Flink job runs out of process, on a JVM; one that cannot
                # run here is reported as not measured, not as a failed suite.
                skipped[case] = f"{type(exc).__name__}: {exc}"[:500]
                continue
            low, high = counts[case]
            marginal[case].append((high - low) / max(wall_large - wall_small, 1e-3))
            cpus[case].append((cpu_large - cpu_small) / (high - low))
            walls[case].append((wall_small, wall_large))
            cores[case].append((cpu_large - cpu_small) / max(wall_large - wall_small, 1e-3))
    ideal = float(min(KEYS, _CONFIG.max_in_flight))
    paths: dict[str, Any] = {}
    for name in _PATHS:
        if name in skipped:
            continue
        job = jobs.get(name)
        flows = job.flow_rates() if job is not None else None
        rates = flows if flows else marginal[name]
        paths[name] = _path_result(name, rates, cpus[name], cores[name], serial_rates,
                                   ideal)
        paths[name]["job_wall_s"] = {
            size: stat([pair[index] for pair in walls[name]]).as_json(2)
            for index, size in enumerate(("small", "large"))}
        if job is not None:
            paths[name]["rate_from"] = ("commits in full flow" if flows
                                        else "two sizes (too few commits for the flow)")
            paths[name]["two_size_events_per_s"] = stat(marginal[name]).as_json(1)
            paths[name]["final_commit_gap_s"] = job.final_gaps()
            if not orphans_adopted:
                paths[name]["cpu_note"] = ("this platform cannot adopt the job's JVM, so its "
                                           "CPU time is missing")
    if "streaming" in paths:
        paths["streaming"].update(_net_of_floor(marginal, cpus, cores, serial_rates, ideal))
    worst = min(paths, key=lambda name: paths[name]["ratio_to_serial"]["median"])
    serial = stat(serial_rates)
    return {
        "name": "Model-latency-bound throughput",
        "workload": (f"one model call per event, the model answers after {LATENCY_MS} ms; "
                     f"{large} vs {small} events round-robin over {KEYS} keys per path "
                     f"({flink_large} vs {small} on Flink), "
                     f"max_in_flight {_CONFIG.max_in_flight}; serial: {serial_count} events "
                     "one at a time; rates and CPU from the difference between the two sizes "
                     "(Flink's rate: from its commits in full flow)"),
        "unit": "events/s (marginal)",
        "latency_ms": LATENCY_MS,
        "keys": KEYS,
        "max_in_flight": _CONFIG.max_in_flight,
        "events": {"small": small, "large": large, "flink_large": flink_large},
        "serial_events_per_s": serial.as_json(2),
        "serial_cpu_ms_per_event": stat(serial_cpus).scaled(1e3).as_json(2),
        "ideal_ratio": ideal,
        **{name: paths.get(name, f"not measured: {skipped.get(name)}") for name in _PATHS},
        "ratio": paths[worst]["ratio_to_serial"]["median"],
        "ratio_min": paths[worst]["ratio_to_serial"]["min"],
        "ratio_max": paths[worst]["ratio_to_serial"]["max"],
        "ratio_path": worst,
        "target": TARGET,
        "met": all(path["met"] for path in paths.values()),
        "note": _note(paths, serial, ideal, skipped),
    }
