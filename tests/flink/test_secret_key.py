"""The model API key never travels in the Flink job graph, and still reaches the model.

PyFlink ships a Python function to its workers as ``cloudpickle.dumps(func)``
(``pyflink.datastream.data_stream._create_j_data_stream_python_function_info``);
those bytes are what the job graph, its checkpoints' operator metadata and a
savepoint carry. The pickle tests search them for the key; a key written into
the config must be found there, the control that proves the search works.
The MiniCluster jobs then show the key read in ``open()`` on the worker,
from the task's environment or from a local Secret Manager peer, and sent to
a local OpenAI-compatible server.

Found by these tests: Beam's ``DefaultJobBundleFactory`` (inside PyFlink)
logs the whole environment it starts the Python worker with when it closes
it (at INFO, and at WARN when the cleanup fails, as it does when a bounded
job ends), so a key in a task manager's environment lands in the task
manager's log. The environment-variable run therefore uses the log4j setting
docs/operations.md prescribes (`QUIET_ENVIRONMENT_LOG`); the secret
run needs none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cloudpickle
import pyflink
import pytest

from beam_agents.flink import AgentKeyedProcessFunction
from beam_agents.model import ModelConfig
from beam_agents.runtime import AgentConfig
from tests._key_servers import ChatServer, SecretManagerPeer, new_key
from tests.flink.conftest import job_env, part_lines, run_job

pytestmark = pytest.mark.timeout(300)

SECRET = "projects/my-project/secrets/model-api-key/versions/1"
VAR = "BEAM_AGENTS_TEST_MODEL_KEY"
#: The log4j lines docs/operations.md tells a cluster to add with --model_api_key_env.
QUIET_ENVIRONMENT_LOG = """
logger.beam_environment.name = org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory
logger.beam_environment.level = ERROR
"""
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.fixture
def key() -> str:
    return new_key()


def _model(way: str, key: str, endpoint: str) -> ModelConfig:
    source = {"secret": {"api_key_secret": SECRET, "secret_manager_endpoint": endpoint},
              "env": {"api_key_env": VAR},
              "config": {"api_key": key}}[way]
    return ModelConfig(provider="openai", model_id="m", base_url="http://127.0.0.1:1", **source)


@pytest.mark.parametrize("way", ["secret", "env", "config"])
def test_the_function_pyflink_ships_holds_the_key_only_when_written_into_the_config(
        way: str, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is reachable on the launcher too, so reading it there would show here."""
    monkeypatch.setenv(VAR, key)
    with SecretManagerPeer({SECRET: key.encode()}) as peer:
        shipped = cloudpickle.dumps(AgentKeyedProcessFunction(
            AgentConfig(agent="tests.agents:ask", model=_model(way, key, peer.url))))
    assert (key.encode() in shipped) is (way == "config")
    if way != "config":
        assert (SECRET if way == "secret" else VAR).encode() in shipped


@pytest.mark.parametrize("way", ["env", "secret"])
def test_a_minicluster_job_reads_the_key_in_open_and_sends_it_to_the_model(
        way: str, key: str, tmp_path: Path) -> None:
    """Every call carries ``Bearer <key>``; neither the job's output nor Flink's logs hold it."""
    events = tmp_path / "events.jsonl"
    events.write_text("".join(
        json.dumps({"entity_key": f"c{n % 2}", "event_id": f"e{n}", "event_time_ms": 1_000 + n,
                    "payload": f"question {n}"}) + "\n" for n in range(4)))
    logs = tmp_path / "flink-log"
    env = job_env()
    if way == "env":
        log4j = tmp_path / "log4j.properties"
        log4j.write_text((Path(pyflink.__file__).parent / "conf" / "log4j-cli.properties")
                         .read_text() + QUIET_ENVIRONMENT_LOG)
        env = job_env(**{VAR: key, "LOG4J_PROPERTIES": str(log4j)})
    with ChatServer() as chat, SecretManagerPeer({SECRET: key.encode()}) as peer:
        source = (["--model_api_key_env", VAR] if way == "env" else
                  ["--model_api_key_secret", SECRET, "--secret_manager_endpoint", peer.url])
        output = run_job(
            ["templates/flink/agent_job.py", "--input_files", str(events),
             "--output_path", str(tmp_path / "intents"), "--errors_path", str(tmp_path / "errors"),
             "--agent", "tests.agents:ask", "--model_provider", "openai", "--model_id", "m",
             "--model_base_url", chat.url, *source,
             "--python_executable", sys.executable, "--parallelism", "1"],
            env=env, log_dir=logs)

    assert len(part_lines(tmp_path / "intents")) == 4
    assert part_lines(tmp_path / "errors") == []
    assert chat.authorizations == [f"Bearer {key}"] * 4
    assert bool(peer.requests) is (way == "secret")
    assert key not in output
    for log in logs.glob("*"):
        assert key not in log.read_text(errors="replace"), log.name


def test_the_operations_guide_prescribes_the_log_setting_the_environment_way_needs() -> None:
    guide = {line.strip() for line in GUIDE.read_text(encoding="utf-8").splitlines()}
    assert set(QUIET_ENVIRONMENT_LOG.strip().splitlines()) <= guide
