"""The streaming path on Beam's FlinkRunner: checkpoints, and a task manager killed mid-input.

Files on ``--streaming`` are a bounded input: the sources end once idle, the
final watermark runs every key's queue out (`AgentDoFn`'s end-of-input
timers), and the lines must be the batch path's. That only holds with
``--finish_bundle_before_checkpointing``, which `beam_agents.beam.run` adds
on the FlinkRunner (`with_runner_safeguards`, which says why); without it,
2 runs of 9 here ended DONE with the activations' lines missing
(docs/testing.md, "The streaming path on the FlinkRunner").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from beam_agents.beam import run as run_beam
from tests._quota_server import QuotaServer
from tests.portable.conftest import FlinkCluster, python_env
from tests.portable.test_flink_runner import AGENT, REPO, direct, flink_flags, io_flags, outputs

pytestmark = pytest.mark.timeout(300)

__all__ = ["direct"]  # the fixture, shared with the batch tests


def streaming_flags(*extra: str) -> list[str]:
    """Embedded Flink, checkpoints every 500 ms, sources shut down once idle for 1 s."""
    return flink_flags("--flink_master=[local]", "--environment_type=LOOPBACK", "--streaming",
                       "--checkpointing_interval=500", "--shutdown_sources_after_idle_ms=1000",
                       "--parallelism=2", *extra)


def test_embedded_flink_runs_the_streaming_path_with_checkpoints_byte_identically(
        tmp_path: Path, direct: tuple[Path, tuple[bytes, bytes]]) -> None:
    """--streaming: AgentDoFn's keyed state and timers on Flink, checkpointed every 500 ms.

    The files are a bounded input, so the sources end once idle and the end of
    input runs every key's queue out; the lines are the batch path's. Two
    runs, as one lost everything in about three before the safeguard.
    """
    source, expected = direct
    for attempt in range(2):
        out = tmp_path / f"run{attempt}"
        result = run_beam([*streaming_flags(), *io_flags(source, out), *AGENT])
        assert result.beam_agents_runner.ran == "FlinkRunner"
        assert outputs(out) == expected, f"run {attempt + 1} of 2"


def write_events(path: Path, *, keys: int, per_key: int) -> list[str]:
    """Events whose model calls are each unique: a call paid twice shows at the server."""
    events = [{"entity_key": f"k{k:02d}", "event_id": f"e{n:02d}", "event_time_ms": 1_000 * n + k,
               "payload": {"text": f"k{k:02d} asks question {n}"}}
              for n in range(per_key) for k in range(keys)]
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    return [f"{e['entity_key']}/{e['event_id']}" for e in events]


@pytest.mark.parametrize("checkpointed", [True, False],
                         ids=["after_a_checkpoint", "before_the_first_checkpoint"])
def test_a_task_manager_killed_mid_input_loses_no_event_and_repays_only_calls_in_flight(
        tmp_path: Path, flink_cluster: FlinkCluster, worker_pool: str, checkpointed: bool,
) -> None:
    """Streaming with checkpoints on the cluster; one of its two task managers is SIGKILLed.

    After a checkpoint, Flink restores it on the other one and replays the
    input since; before the first, it restarts the job from the source. Either
    way every event ends once, as an intent or a dead letter; each key's seqs
    run 1..n with no gap and no repeat (invariants 6, 8); and the model server
    is paid again only for calls that were in flight at the kill, at most
    max_in_flight per worker: the rest replay from the journal (invariant 9).
    A checkpoint completes mid-input because the job runs with small bundles
    and unaligned checkpoints (`with_runner_safeguards`; docs/testing.md).
    """
    events = write_events(tmp_path / "events.jsonl", keys=16, per_key=12)
    max_in_flight, parallelism = 2, 2
    # Before the first checkpoint: none for 90 s, and the kill once a tenth is paid. (With
    # 20 s, a loaded machine's job paid its first calls after its first checkpoint.)
    interval_ms, paid_before_kill = (500, len(events) // 3) if checkpointed else (
        90_000, len(events) // 10)
    flink_cluster.restore_task_managers()
    log_from = len(flink_cluster.job_manager_log())
    with QuotaServer(rps=10_000, latency_ms=200) as server:
        # The key lives in the worker pool's environment (POOL_KEY), where the workers run.
        command = [sys.executable, "-m", "beam_agents", "run",
                   *flink_flags(f"--flink_master={flink_cluster.rest}",
                                "--environment_type=EXTERNAL",
                                f"--environment_config={worker_pool}", "--streaming",
                                f"--checkpointing_interval={interval_ms}",
                                "--shutdown_sources_after_idle_ms=15000",
                                f"--parallelism={parallelism}",
                                "--number_of_execution_retries=5"),
                   *io_flags(tmp_path / "events.jsonl", tmp_path / "out"), *AGENT,
                   "--event_order=arrival",
                   "--model_provider=openai", "--model_id=m", f"--model_base_url={server.url}",
                   "--model_api_key_env=QUOTA_TEST_KEY", f"--max_in_flight={max_in_flight}",
                   "--call_journal=sqlite", f"--call_journal_path={tmp_path / 'calls.sqlite'}"]
        with (tmp_path / "run.log").open("w") as log:
            job = subprocess.Popen(command, cwd=REPO, env=python_env(),
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 180
            while (server.stats().ok < paid_before_kill
                   or bool(flink_cluster.checkpoints()) is not checkpointed):
                assert job.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
                assert time.monotonic() < deadline, (
                    f"in 180 s: {server.stats().ok} calls paid, "
                    f"{flink_cluster.checkpoints()} checkpoints")
                time.sleep(0.05)
            victim = flink_cluster.task_manager_pids()[0]
            os.kill(victim, signal.SIGKILL)
            paid_at_kill = server.stats().ok
            code = job.wait(timeout=240)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
        stats = server.stats()
    log_text = (tmp_path / "run.log").read_text()
    assert code == 0, f"{log_text[-3000:]}\n{flink_cluster.log_tail()}"
    assert paid_at_kill < len(events), "the kill came after the input was done"
    restart = flink_cluster.job_manager_log()[log_from:]
    if checkpointed:
        assert "Restoring job" in restart, "Flink did not restore a checkpoint"
    else:
        assert "No checkpoint found during restore" in restart, (
            "Flink did not restart from the source")

    intents = [json.loads(line) for line in (tmp_path / "out" / "intents.jsonl").open()]
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").open()]
    ended = [f"{i['entity_key']}/{i['event_id']}" for i in intents] + [
        f"{e['entity_key']}/{e['event_id']}" for e in errors]
    assert sorted(ended) == sorted(events)  # each once: nothing lost, nothing twice
    seqs: defaultdict[str, list[int]] = defaultdict(list)
    for intent in intents:
        seqs[intent["entity_key"]].append(intent["seq"])
    for key, found in seqs.items():
        assert sorted(found) == list(range(1, len(found) + 1)), key
    texts = [text for text, _, _ in stats.billed_calls]
    repaid = len(texts) - len(set(texts))
    assert repaid <= max_in_flight * parallelism, (repaid, stats.ok)
