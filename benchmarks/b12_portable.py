# mypy: disable-error-code="attr-defined"
"""B12. Beam's portable runners: the library's paths on Prism, and what each runner costs to start.

B6 and B2 measure the library on the DirectRunner. Dataflow, Prism and the
Flink runner run a DoFn through the Fn API instead: state and timers over
the wire, bundles, a long-lived DoFn. This runs the same shapes on Prism (the
binary `make prism` builds for this Beam line; the SDK harness in this
process, LOOPBACK) beside the DirectRunner, in the same repetition:

* streaming: B6's streaming path (``TestStream -> AgentDoFn``, 64 keys, a
  200 ms model) and B6's runner floor (`benchmarks._beam.StreamingFloorDoFn`,
  the same state cells, timers and callbacks with no library code), on each
  runner. The library's CPU per activation is the path's less the floor's on
  the same runner; on Prism the CPU counts the Prism process's too.
* batch: B2's shapes (``Create -> GroupByKey -> AgentBatchDoFn`` with the
  README's agent, against a hand-written per-element stateful DoFn), on
  each runner.
* start-up, apart from the per-event figures: the first one-element
  pipeline on Prism in a process, which starts the binary, less a second
  one; and the Flink job server's JVM (``java -jar`` of the jar `make
  job-server` builds) until its job service listens.

* the FlinkRunner's streaming path: ``beam-agents run --runner=FlinkRunner
  --streaming`` over B6's events in a file, on the job server's embedded
  Flink (parallelism 1, LOOPBACK), from the FlinkRunner line's venv (the job
  server's Beam, `FLINK_RUNNER_BEAM` in tools/toolchain/portable.mk). A
  bounded input releases every event at its final watermark, so this is the
  end-of-input rounds (each key's next event beside the others'), not the
  watermark-paced release the TestStream gives on the other two; the CPU
  counts the child processes (the job server's JVM and embedded Flink
  included). Its floor is `benchmarks._beam.BoundedFloorDoFn` over the same
  file with the same runner flags (`benchmarks._flink_floor`), alternating
  with the path: `AgentDoFn`'s cells, timers and end-of-input rounds, one
  activation per key per round, with no library code
  (`StreamingFloorDoFn` would start every event of a key at once there).

Every path runs at two sizes and its per-event figures are the differences,
so start-up cancels out of them. B6's streaming targets (at most 1 ms of CPU
per activation, at least 0.9 of the ideal) are the ones to read the figures
against. Prism 2.61 stops a TestStream with processing-time timers, so the
Prism streaming figures come from the Beam-latest line (`make bench` runs
B12 there); on the dev line the result says why they are missing.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from beam_agents.runtime import AgentConfig
from benchmarks import b2_pipeline, b6_latency
from benchmarks._beam import run_bare, run_batch, run_streaming, run_streaming_floor
from benchmarks._harness import ROOT, Profile, ratios, repo_env, stat, write_events

__all__ = ["run"]

_DIRECT_BATCH = ["--runner=DirectRunner", "--direct_num_workers=1",
                 "--direct_running_mode=in_memory"]
_PINS = ROOT / "tools" / "toolchain" / "portable.mk"


def _prism() -> list[str]:
    binary = ROOT / ".toolchain" / f"prism-{beam.__version__}" / "prism"
    if not binary.exists():
        raise RuntimeError(f"Prism for Beam {beam.__version__} is missing at {binary}: "
                           "run `make prism`")
    # Each run its own Prism: Beam 2.7x shares the first one a process builds.
    return ["--runner=PrismRunner", f"--prism_location={binary}",
            "--experiments=disable_prism_server_singleton"]


def _pin(name: str) -> str:
    found = re.search(rf"^{name}\s*:=\s*(\S+)\s*$", _PINS.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{name} is not pinned in {_PINS}")
    return found.group(1)


def _prism_cpu_s() -> float:
    """CPU seconds of the Prism processes this process started (alive, so not yet reaped)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = path.read_text()
        except OSError:
            continue
        name, _, rest = text.partition("(")[2].rpartition(")")
        fields = rest.split()
        if name == "prism" and int(fields[1]) == os.getpid():
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _measure(run: Callable[[], float]) -> tuple[float, float]:
    """Wall and CPU seconds of one pipeline: this process's and Prism's."""
    cpu = time.process_time() + _prism_cpu_s()
    wall = run()
    return wall, time.process_time() + _prism_cpu_s() - cpu


def _tiny(runner: list[str]) -> float:
    """Wall seconds of a one-element pipeline on `runner`."""
    start = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(runner)) as pipeline:
        _ = pipeline | beam.Create([1]) | beam.Map(str)  # type: ignore[no-untyped-call]
    return time.perf_counter() - start


def _job_server_start_s() -> float | str:
    """Seconds from ``java -jar`` of the Flink job server to its job service listening."""
    jar = (ROOT / ".toolchain" / "jars" /
           f"beam-runners-flink-{_pin('FLINK_MINOR')}-job-server-{_pin('FLINK_RUNNER_BEAM')}.jar")
    if not jar.exists():
        return f"not measured: {jar} is missing (make job-server)"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.perf_counter()
    server = subprocess.Popen(["java", "-jar", str(jar), "--job-port", str(port),
                               "--artifact-port", "0", "--expansion-port", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - start < 120:
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    return time.perf_counter() - start
            time.sleep(0.05)
        return "not measured: the job server did not listen within 120 s"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _rates(counts: tuple[int, int], pairs: list[tuple[tuple[float, float], tuple[float, float]]],
           ) -> tuple[list[float], list[float]]:
    """Marginal events/s and CPU s per event of each repetition's (small, large) pair."""
    low, high = counts
    rates = [(high - low) / max(large[0] - small[0], 1e-3) for small, large in pairs]
    cpus = [(large[1] - small[1]) / (high - low) for small, large in pairs]
    return rates, cpus


def _streaming(profile: Profile, prism: list[str]) -> dict[str, Any]:
    keys, latency = b6_latency.KEYS, b6_latency.LATENCY_MS
    config = AgentConfig(agent="benchmarks._agents:slow_reply",
                         model=b6_latency._CONFIG.model)
    small, large = (keys, 3 * keys) if profile.quick else (2 * keys, 10 * keys)
    sizes = {size: b6_latency._keyed(count)
             for size, count in (("small", small), ("large", large))}
    runners = {"direct": None, "prism": prism}
    def path(flags: list[str] | None) -> Callable[[str], tuple[float, float]]:
        return lambda size: _measure(
            lambda: run_streaming(config, sizes[size], step=keys, runner=flags))

    def floor(flags: list[str] | None) -> Callable[[str], tuple[float, float]]:
        return lambda size: _measure(
            lambda: run_streaming_floor(latency, sizes[size], step=keys, runner=flags))

    cases: dict[str, Callable[[str], tuple[float, float]]] = {}
    for name, flags in runners.items():
        cases[f"{name}_path"], cases[f"{name}_floor"] = path(flags), floor(flags)
    pairs: dict[str, list[Any]] = {name: [] for name in cases}
    serial: list[float] = []
    for rep in range(1 if profile.quick else 3):
        wall, _ = b6_latency._serial(10 if profile.quick else 20)
        serial.append((10 if profile.quick else 20) / wall)
        order = list(cases) if rep % 2 == 0 else list(reversed(cases))
        for name in order:
            pairs[name].append((cases[name]("small"), cases[name]("large")))
    ideal = float(min(keys, config.max_in_flight))
    result: dict[str, Any] = {"events": {"small": small, "large": large}, "keys": keys,
                              "latency_ms": latency,
                              "serial_events_per_s": stat(serial).as_json(2)}
    for runner in runners:
        path_rates, path_cpus = _rates((small, large), pairs[f"{runner}_path"])
        floor_rates, floor_cpus = _rates((small, large), pairs[f"{runner}_floor"])
        result[runner] = {
            "events_per_s": stat(path_rates).as_json(1),
            "ratio_to_ideal": ratios(path_rates, [ideal * s for s in serial]).as_json(3),
            "cpu_ms_per_event": stat(path_cpus).scaled(1e3).as_json(2),
            "floor_events_per_s": stat(floor_rates).as_json(1),
            "floor_ratio_to_ideal": ratios(floor_rates, [ideal * s for s in serial]).as_json(3),
            "floor_cpu_ms_per_event": stat(floor_cpus).scaled(1e3).as_json(2),
            "library_cpu_ms_per_event": stat(
                [p - f for p, f in zip(path_cpus, floor_cpus, strict=True)]).scaled(
                1e3).as_json(2),
            "ratio_to_floor": ratios(path_rates, floor_rates).as_json(3),
        }
    return result


def _flink_once(python: Path, lines: list[bytes], *, floor: bool = False) -> tuple[float, float]:
    """Wall and CPU seconds (the child processes') of one streaming FlinkRunner run.

    `floor`: `benchmarks._flink_floor` over the same file with the same runner
    flags, instead of ``beam-agents run``.
    """
    minor, version = _pin("FLINK_MINOR"), _pin("FLINK_RUNNER_BEAM")
    jar = ROOT / ".toolchain" / "jars" / f"beam-runners-flink-{minor}-job-server-{version}.jar"
    with tempfile.TemporaryDirectory(prefix="bench-flink-") as scratch:
        work = Path(scratch)
        source = write_events(work, lines)
        runner = ["--runner=FlinkRunner", f"--flink_version={minor}",
                  f"--flink_job_server_jar={jar}", "--flink_master=[local]",
                  "--environment_type=LOOPBACK", "--streaming", "--parallelism=1"]
        if floor:
            command = [str(python), "-m", "benchmarks._flink_floor", "--input_files", str(source),
                       "--output_path", str(work / "intents.jsonl"),
                       "--latency_ms", str(b6_latency.LATENCY_MS), *runner]
            (work / "errors.jsonl").write_bytes(b"")
        else:
            command = [str(python), "-m", "beam_agents", "run", *runner,
                       "--input_files", str(source), "--output_path", str(work / "intents.jsonl"),
                       "--errors_path", str(work / "errors.jsonl"), *b6_latency._FLINK_FLAGS]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=repo_env(), capture_output=True,
                              text=True, timeout=1_800, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"the FlinkRunner run exited {done.returncode}: "
                               f"{done.stderr[-1500:]}")
        intents = len((work / "intents.jsonl").read_bytes().splitlines())
        errors = len((work / "errors.jsonl").read_bytes().splitlines())
        if errors or intents != len(lines):
            raise RuntimeError(f"the FlinkRunner run gave {intents} intents and {errors} dead "
                               f"letters for {len(lines)} events")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu


def _flink_streaming(profile: Profile) -> dict[str, Any] | str:
    """B6's path on the FlinkRunner (see the module docstring), at two sizes per repetition."""
    python = ROOT / f".venv-beam-{_pin('FLINK_RUNNER_BEAM')}" / "bin" / "python"
    if not python.exists():
        return f"not measured: {python} is missing (make toolchain)"
    keys = b6_latency.KEYS
    small, large = (keys, 3 * keys) if profile.quick else (2 * keys, 10 * keys)
    lines = {size: b6_latency._json_lines(count) for size, count in
             (("small", small), ("large", large))}
    pairs: list[tuple[tuple[float, float], tuple[float, float]]] = []
    floor_pairs: list[tuple[tuple[float, float], tuple[float, float]]] = []
    serial: list[float] = []
    for rep in range(1 if profile.quick else 3):
        wall, _ = b6_latency._serial(10 if profile.quick else 20)
        serial.append((10 if profile.quick else 20) / wall)
        for floor in ((False, True) if rep % 2 == 0 else (True, False)):
            measured = (_flink_once(python, lines["small"], floor=floor),
                        _flink_once(python, lines["large"], floor=floor))
            (floor_pairs if floor else pairs).append(measured)
    rates, cpus = _rates((small, large), pairs)
    floor_rates, floor_cpus = _rates((small, large), floor_pairs)
    ideal = float(min(keys, AgentConfig(agent="benchmarks._agents:slow_reply").max_in_flight))
    return {"events": {"small": small, "large": large}, "keys": keys,
            "latency_ms": b6_latency.LATENCY_MS, "apache_beam": _pin("FLINK_RUNNER_BEAM"),
            "serial_events_per_s": stat(serial).as_json(2),
            "events_per_s": stat(rates).as_json(1),
            "ratio_to_ideal": ratios(rates, [ideal * s for s in serial]).as_json(3),
            "cpu_ms_per_event": stat(cpus).scaled(1e3).as_json(2),
            "run_s": {"small": stat([p[0][0] for p in pairs]).as_json(1),
                      "large": stat([p[1][0] for p in pairs]).as_json(1)},
            "floor_events_per_s": stat(floor_rates).as_json(1),
            "floor_ratio_to_ideal": ratios(floor_rates, [ideal * s for s in serial]).as_json(3),
            "floor_cpu_ms_per_event": stat(floor_cpus).scaled(1e3).as_json(2),
            "library_cpu_ms_per_event": stat(
                [p - f for p, f in zip(cpus, floor_cpus, strict=True)]).scaled(1e3).as_json(2),
            "ratio_to_floor": ratios(rates, floor_rates).as_json(3)}


def _batch(profile: Profile, prism: list[str]) -> dict[str, Any]:
    small, large, keys = (20, 80, 5) if profile.quick else (300, 1500, 50)
    config = AgentConfig(agent="benchmarks._agents:chat")
    sizes = {"small": b2_pipeline._events(small, keys),
             "large": b2_pipeline._events(large, keys)}
    runners = {"direct": _DIRECT_BATCH, "prism": prism}
    per_event: dict[str, list[float]] = {}
    for rep in range(1 if profile.quick else 3):
        for runner, flags in (runners.items() if rep % 2 == 0
                              else reversed(list(runners.items()))):
            for shape in ("agent", "bare"):
                def once(size: str, shape: str = shape, flags: list[str] = flags) -> float:
                    if shape == "agent":
                        return run_batch(config, sizes[size], runner=flags)
                    return run_bare(b2_pipeline.BareChatDoFn, sizes[size], runner=flags)
                t_small, t_large = once("small"), once("large")
                per_event.setdefault(f"{runner}_{shape}", []).append(
                    max(t_large - t_small, 1e-9) / (large - small))
    result: dict[str, Any] = {"events": {"small": small, "large": large}, "keys": keys}
    for runner in runners:
        agent, bare = per_event[f"{runner}_agent"], per_event[f"{runner}_bare"]
        result[runner] = {"agent_us_per_event": stat(agent).scaled(1e6).as_json(0),
                          "bare_us_per_event": stat(bare).scaled(1e6).as_json(0),
                          "ratio_agent_to_bare": ratios(agent, bare).as_json(2)}
    result["prism_agent_to_direct_agent"] = ratios(per_event["prism_agent"],
                                                   per_event["direct_agent"]).as_json(2)
    return result


def run(profile: Profile) -> dict[str, Any]:
    """Measure B12; see the module docstring."""
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    prism = _prism()
    first, second = _tiny(prism), _tiny(prism)  # before anything else starts Prism here
    start_up: dict[str, float | str] = {"prism_s": round(first - second, 2),
                                        "prism_first_pipeline_s": round(first, 2),
                                        "prism_next_pipeline_s": round(second, 2)}
    job_server = _job_server_start_s()
    start_up["flink_job_server_s"] = (round(job_server, 2) if isinstance(job_server, float)
                                      else job_server)
    batch = _batch(profile, prism)
    streaming: dict[str, Any] | str
    flink: dict[str, Any] | str
    if profile.quick:
        streaming = flink = "not measured: quick mode"
    else:
        try:
            streaming = _streaming(profile, prism)
        except RuntimeError as exc:
            streaming = f"not measured: {exc}"[:500]
        try:
            flink = _flink_streaming(profile)
        except RuntimeError as exc:
            flink = f"not measured: {exc}"[:500]
    ratio = batch["prism_agent_to_direct_agent"]
    note = (
        f"Batch (B2's shapes) on Prism {beam.__version__}: the library's path costs "
        f"{batch['prism']['agent_us_per_event']['median']:.0f} us an event, "
        f"{batch['prism']['ratio_agent_to_bare']['median']:.2f}x the bare DoFn "
        f"({batch['prism']['bare_us_per_event']['median']:.0f} us); on the DirectRunner in the "
        f"same repetitions {batch['direct']['agent_us_per_event']['median']:.0f} us, "
        f"{batch['direct']['ratio_agent_to_bare']['median']:.2f}x its bare DoFn "
        f"({batch['direct']['bare_us_per_event']['median']:.0f} us). Start-up, kept out of "
        f"those: Prism {start_up['prism_s']} s (the first pipeline in a process took "
        f"{start_up['prism_first_pipeline_s']} s, the next "
        f"{start_up['prism_next_pipeline_s']} s), the Flink job server "
        f"{start_up['flink_job_server_s']} s to listen. ")
    if isinstance(streaming, dict):
        on_prism, direct = streaming["prism"], streaming["direct"]
        note += (
            f"Streaming path on Prism: {on_prism['cpu_ms_per_event']['median']:.2f} ms of CPU "
            f"per activation (Prism's process included) and "
            f"{on_prism['ratio_to_ideal']['median']:.2f} of the ideal; its floor "
            f"{on_prism['floor_cpu_ms_per_event']['median']:.2f} ms and "
            f"{on_prism['floor_ratio_to_ideal']['median']:.2f}; on the DirectRunner "
            f"{direct['cpu_ms_per_event']['median']:.2f} ms and "
            f"{direct['ratio_to_ideal']['median']:.2f}. ")
    else:
        note += f"Streaming path on Prism: {streaming}. "
    if isinstance(flink, dict):
        note += (
            f"Streaming path on the FlinkRunner (Beam {flink['apache_beam']}, embedded Flink, "
            f"end-of-input rounds): {flink['cpu_ms_per_event']['median']:.2f} ms of CPU per "
            f"activation (the JVM's included) and {flink['ratio_to_ideal']['median']:.2f} of "
            f"the ideal; its floor {flink['floor_cpu_ms_per_event']['median']:.2f} ms and "
            f"{flink['floor_ratio_to_ideal']['median']:.2f}, so the library adds "
            f"{flink['library_cpu_ms_per_event']['median']:.2f} ms.")
    else:
        note += f"Streaming path on the FlinkRunner: {flink}."
    return {
        "name": "Portable runners: Prism beside the DirectRunner, and start-up",
        "workload": ("B2's batch shapes and B6's streaming path and floor, each at two sizes "
                     "on Prism and the DirectRunner in the same repetition"),
        "unit": "ratio of the batch path's cost per event on Prism to the DirectRunner's",
        "apache_beam": beam.__version__,
        "start_up": start_up,
        "batch": batch,
        "streaming": streaming,
        "flink_runner_streaming": flink,
        "ratio": ratio["median"],
        "ratio_min": ratio["min"],
        "ratio_max": ratio["max"],
        "note": note.strip(),
    }
