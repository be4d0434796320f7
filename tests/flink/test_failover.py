"""A real failover on Flink: a worker dies after a committed flush; checkpoints restore it.

The job runs with checkpointing and a fixed-delay restart strategy. The
store wrapper in ``_faults`` crashes the worker exactly once, right after
the flush of activation N has committed and before keyed state records
it; N is the first activation from CRASH_SEQ on whose entity a completed
checkpoint already covers and beside which other entities' activations are
in flight (the agent asks a model with latency, so a worker runs several
keys at once). Flink restores the last checkpoint and replays: the restored
queues and timers run activation N again, which re-flushes (invariant 5's
seq guard makes that converge), and the abandoned in-flight activations run
again too; nothing is lost or emitted twice once intents are de-duplicated
by ``(entity_key, seq, index)``.

It runs twice over: on MiniClusters against SQLite and the Firestore server
(the crash is an exception that fails the task), and on a standalone cluster
where the crash kills the Python worker process outright and the task
manager starts a new one.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from beam_agents.memory import LongtermStoreConfig
from beam_agents.stores import FirestoreLongtermConfig, SqliteLongtermConfig
from tests.flink.conftest import REPO, flink_run, job_env, part_lines, run_job, store_rows

pytestmark = pytest.mark.timeout(400)

# Enough entities that the crashing one shares its subtask with others.
ENTITIES = [f"customer-{n}".encode() for n in range(8)]
# The crash waits for a checkpoint to commit the entity's progress, which on a
# slow machine can take a few seconds of stream: leave it most of the stream.
EVENTS_PER_ENTITY = 100
CRASH_ENTITY, CRASH_SEQ = ENTITIES[2], 30
#: The local model's latency: long enough that a worker's keys overlap.
MODEL_LATENCY_MS = 30


def _write_events(path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for n in range(EVENTS_PER_ENTITY):
            for entity in ENTITIES:
                out.write(json.dumps({"entity_key": entity.decode(),
                                      "event_id": f"{entity.decode()}-{n}",
                                      "event_time_ms": 1_700_000_000_000 + n,
                                      "payload": f"note {n} for {entity.decode()}"}) + "\n")


def _run(events: Path, out: Path, store_flags: list[str], *, crash_seq: int,
         env: dict[str, str], cluster: str | None = None) -> list[tuple[str, str, int]]:
    """Run the job, crashing once at `crash_seq` or later (0 for never); returns the flush log.

    The crash also waits for a completed checkpoint that covers the entity
    (see ``_faults``), so the restart restores state instead of starting over.

    Locally the job runs on a MiniCluster, where PyFlink runs the Python
    operator inside the client process, so the crash is an exception that
    fails the task. On a `cluster` the operator runs in a Python worker
    process of its own, and the crash kills that process.
    """
    log = out / "flushes.log"
    agent_config = out / "agent.json"
    agent_config.write_text(json.dumps({"model": {"local": {"latency_ms": MODEL_LATENCY_MS}}}))
    fault = ["--crash_entity", CRASH_ENTITY.decode(), "--crash_seq", str(crash_seq),
             "--marker", str(out / "crashed.marker"), "--flush_log", str(log),
             "--flush_delay_ms", "10", "--min_in_flight", "1",
             *(["--kill_process"] if cluster else []), "--"]
    job = ["--input_files", str(events), "--output_path", str(out / "intents"),
           "--errors_path", str(out / "errors"), "--agent", "tests.agents:paced_journal",
           "--agent_config", str(agent_config), "--model_provider", "local",
           *store_flags, "--python_executable", sys.executable, "--parallelism", "2",
           # Restart after 2 s (production waits 10 s), not at once: a restart
           # racing the failed attempt's teardown is not the failure under test.
           "--checkpointing_interval_ms", "200", "--restart_attempts", "2",
               # Activations run as events arrive, so checkpoints land between
               # them: the crash under test comes mid-run, after one covered a
               # commit. (In event-time order a bounded input runs at its end.)
               "--event_order", "arrival",
           "--restart_delay_ms", "2000"]
    if cluster is None:
        run_job(["-m", "tests.flink.failover_job", *fault, *job], env=env,
                log_dir=out / "flink-log")
    else:
        flink_run(cluster, env, REPO / "tests" / "flink" / "failover_job.py", [*fault, *job])
    entries = []
    for line in log.read_text().splitlines():
        phase, entity, seq = line.split()
        entries.append((phase, entity, int(seq)))
    return entries


def _store(backend: str, tmp_path: Path, run_name: str,
           request: pytest.FixtureRequest) -> tuple[LongtermStoreConfig, list[str], dict[str, str]]:
    if backend == "firestore":
        host = request.getfixturevalue("firestore_host")
        project = f"failover-{run_name}-{uuid.uuid4().hex[:8]}"
        return (FirestoreLongtermConfig(project=project, timeout_ms=10_000),
                ["--longterm_store", "firestore", "--firestore_project", project],
                job_env(FIRESTORE_EMULATOR_HOST=host))
    path = str(tmp_path / run_name / "longterm.sqlite")
    return (SqliteLongtermConfig(path=path), ["--longterm_store", "sqlite", "--sqlite_path", path],
            job_env())


def _dedup(lines: list[bytes]) -> dict[tuple[str, int, int], bytes]:
    by_id: dict[tuple[str, int, int], bytes] = {}
    for line in lines:
        intent = json.loads(line)
        ident = (intent["entity_key"], intent["seq"], intent["index"])
        assert by_id.setdefault(ident, line) == line, f"{ident} was emitted with other bytes"
    return by_id


def _check_convergence(tmp_path: Path, clean_config: LongtermStoreConfig,
                       chaos_config: LongtermStoreConfig, clean_log: list[tuple[str, str, int]],
                       chaos_log: list[tuple[str, str, int]]) -> None:
    # The fault-free run is the reference: it must have dead-lettered nothing.
    assert part_lines(tmp_path / "clean" / "errors") == []

    # The fault happened once, after N's flush, and Flink restored a checkpoint:
    dead_letters = part_lines(tmp_path / "chaos" / "errors")
    marker = tmp_path / "chaos" / "crashed.marker"
    assert marker.exists(), (chaos_log[-5:], dead_letters[:3])
    crashed_seq = int(marker.read_text())  # CRASH_SEQ or later: it waits for a checkpoint
    crash_entity = CRASH_ENTITY.decode()
    assert ("before", crash_entity, crashed_seq) in chaos_log
    in_flight = (tmp_path / "chaos" / "crashed.marker.in_flight").read_text().split()
    assert in_flight and crash_entity not in in_flight  # other keys were mid-activation
    assert ("after", crash_entity, crashed_seq) in chaos_log  # N ran again and re-flushed
    replayed = [seq for phase, entity, seq in chaos_log
                if phase == "after" and entity == crash_entity]
    assert 1 < min(replayed) <= crashed_seq  # restored from a checkpoint, not from the start
    assert all(phase == "before" for phase, _, _ in clean_log)

    # Rows: byte-identical to the fault-free run.
    clean_rows = store_rows(clean_config, ENTITIES)
    assert len(clean_rows) == len(ENTITIES) * (EVENTS_PER_ENTITY + 1)  # notes + a profile
    assert store_rows(chaos_config, ENTITIES) == clean_rows

    # Intents: identical once de-duplicated, and none missing.
    clean = _dedup(part_lines(tmp_path / "clean" / "intents"))
    chaos = _dedup(part_lines(tmp_path / "chaos" / "intents"))
    assert len(clean) == len(ENTITIES) * EVENTS_PER_ENTITY
    assert chaos == clean
    assert dead_letters == []


@pytest.mark.spec("M21")
@pytest.mark.parametrize("backend", ["sqlite", "firestore"])
def test_a_worker_crash_after_a_flush_restores_and_converges_on_flink(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """THEN the retry re-flushes byte-identical rows and emits byte-identical intents."""
    events = tmp_path / "events.jsonl"
    _write_events(events)
    clean_config, clean_flags, env = _store(backend, tmp_path, "clean", request)
    chaos_config, chaos_flags, _ = _store(backend, tmp_path, "chaos", request)
    (tmp_path / "clean").mkdir(exist_ok=True)
    (tmp_path / "chaos").mkdir(exist_ok=True)

    clean_log = _run(events, tmp_path / "clean", clean_flags, crash_seq=0, env=env)
    chaos_log = _run(events, tmp_path / "chaos", chaos_flags, crash_seq=CRASH_SEQ, env=env)

    _check_convergence(tmp_path, clean_config, chaos_config, clean_log, chaos_log)


@pytest.mark.spec("M21")
def test_a_killed_python_worker_on_a_cluster_restores_and_converges(
        tmp_path: Path, request: pytest.FixtureRequest,
        flink_cluster: tuple[str, dict[str, str]]) -> None:
    """THEN the retry re-flushes byte-identical rows and emits byte-identical intents."""
    address, cluster_env = flink_cluster
    events = tmp_path / "events.jsonl"
    _write_events(events)
    clean_config, clean_flags, env = _store("sqlite", tmp_path, "clean", request)
    chaos_config, chaos_flags, _ = _store("sqlite", tmp_path, "chaos", request)
    (tmp_path / "clean").mkdir(exist_ok=True)
    (tmp_path / "chaos").mkdir(exist_ok=True)

    clean_log = _run(events, tmp_path / "clean", clean_flags, crash_seq=0, env=env)
    chaos_log = _run(events, tmp_path / "chaos", chaos_flags, crash_seq=CRASH_SEQ,
                     env=cluster_env, cluster=address)

    _check_convergence(tmp_path, clean_config, chaos_config, clean_log, chaos_log)
