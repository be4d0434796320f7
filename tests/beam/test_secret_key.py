"""The model API key never travels in the Beam job graph, and still reaches the model.

The job graph is what Beam serializes when the job is submitted: the
pipeline proto, whose ParDo payloads are the DoFns pickled with their
config, and the pipeline options. Each test below builds it for one way of
giving the key and searches every byte of it, decompressed, for the key.
A key written into the config must be found there: that control proves the
search sees inside the pickles, so the other ways' "not found" means
something. The DirectRunner runs then show the key read on the worker, in
``setup()``, and sent to a local OpenAI-compatible server.
"""

from __future__ import annotations

import base64
import bz2
import importlib.util
import json
import logging
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.testing.test_pipeline import TestPipeline

from beam_agents.beam import build_pipeline, run
from beam_agents.model._config import API_KEY_ENV, API_KEY_SECRET
from tests._key_servers import ChatServer, SecretManagerPeer, new_key

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
SECRET = "projects/my-project/secrets/model-api-key/versions/1"
VAR = "BEAM_AGENTS_TEST_MODEL_KEY"
WAYS = ["secret", "env", "config"]
#: Beam's picklers this environment has: dill is optional from Beam 2.69 on.
PICKLERS = ["cloudpickle", *(["dill"] if importlib.util.find_spec("dill") else [])]


@pytest.fixture
def key() -> str:
    return new_key()


def _key_flags(way: str, key: str, tmp_path: Path, endpoint: str = "http://127.0.0.1:1"
               ) -> list[str]:
    if way == "secret":
        return ["--model_api_key_secret", SECRET, "--secret_manager_endpoint", endpoint]
    if way == "env":
        return ["--model_api_key_env", VAR]
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"model": {"api_key": key}}))
    return ["--agent_config", str(config)]


def _flags(tmp_path: Path, base_url: str, *extra: str) -> list[str]:
    events = tmp_path / "events.jsonl"
    events.write_text("".join(
        json.dumps({"entity_key": f"c{n % 3}", "event_id": f"e{n}", "event_time_ms": 1_000 + n,
                    "payload": f"question {n}"}) + "\n" for n in range(6)))
    return ["--runner=DirectRunner", "--input_files", str(events),
            "--output_path", str(tmp_path / "out" / "intents.jsonl"),
            "--errors_path", str(tmp_path / "out" / "errors.jsonl"),
            "--agent", "tests.agents:ask", "--model_provider", "openai", "--model_id", "m",
            "--model_base_url", base_url, *extra]


def _unpickled(payload: bytes) -> bytes:
    """The raw pickle inside one of Beam's pickled payloads (base64 of bz2 or zlib)."""
    compressed = base64.b64decode(payload)
    try:
        return bz2.decompress(compressed)
    except OSError:
        return zlib.decompress(compressed)


def _job_graph(options: PipelineOptions) -> tuple[list[bytes], list[bytes]]:
    """The serialized job: [the proto, the options], and each ParDo's DoFn, unpickled."""
    pipeline = TestPipeline(options=options)
    build_pipeline(pipeline, options)
    proto = pipeline.to_runner_api()
    dofns = [_unpickled(beam_runner_api_pb2.ParDoPayload.FromString(
                 transform.spec.payload).do_fn.payload)
             for transform in proto.components.transforms.values()
             if transform.spec.urn == "beam:transform:pardo:v1"]
    return [proto.SerializeToString(),
            json.dumps(options.get_all_options(), default=str).encode()], dofns


@pytest.fixture(params=PICKLERS)
def beam_pickler(request: pytest.FixtureRequest) -> Iterator[str]:
    """Beam's pickler, as each Beam line defaults it (2.61: dill; 2.65+: cloudpickle)."""
    pickler.set_library(request.param)
    try:
        yield request.param
    finally:
        pickler.set_library()  # this Beam line's default


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
@pytest.mark.parametrize("way", WAYS)
def test_the_key_is_in_the_job_graph_only_when_written_into_the_config(
        way: str, streaming: bool, beam_pickler: str, key: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Secret and env: the graph holds the name only. Config: the key is found (the control).

    The key is reachable on the launcher too (the variable set, the secret served), so
    reading it while building the graph would show here.
    """
    monkeypatch.setenv(VAR, key)
    with SecretManagerPeer({SECRET: key.encode()}) as peer:
        flags = _flags(tmp_path, "http://127.0.0.1:1", *_key_flags(way, key, tmp_path, peer.url))
        options = PipelineOptions([*flags, *(["--streaming"] if streaming else [])])
        graph, dofns = _job_graph(options)
    (activate,) = [p for p in dofns if b"AgentBatchDoFn" in p or b"AgentDoFn" in p]
    found = [piece for piece in (*graph, *dofns) if key.encode() in piece]

    assert len(dofns) > 3, "too few ParDo payloads decoded"
    if way == "config":
        assert found == [activate]
    else:
        assert found == []
        assert (SECRET if way == "secret" else VAR).encode() in activate


def test_the_template_metadata_takes_key_names_never_keys(key: str) -> None:
    """flex_template.json has no parameter for a key; its name parameters check what the
    config checks, and refuse a key."""
    parameters = {p["name"]: p for p in json.loads(
        (ROOT / "flex_template.json").read_text(encoding="utf-8"))["parameters"]}
    assert not [name for name in parameters if name.endswith("api_key")]
    for name, pattern in (("model_api_key_secret", API_KEY_SECRET),
                          ("model_api_key_env", API_KEY_ENV)):
        assert parameters[name]["regexes"] == [
            "^" + pattern.pattern.replace("(?:", "(") + "$"], f"{name} drifted from ModelConfig"
        assert not re.fullmatch(parameters[name]["regexes"][0], key), f"{name} accepts a key"


@pytest.mark.parametrize("way", ["env", "secret"])
def test_the_directrunner_reads_the_key_on_the_worker_and_sends_it_to_the_model(
        way: str, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Every call carries ``Bearer <key>``; every event commits; no log line holds the key."""
    monkeypatch.setenv(VAR, key)
    with ChatServer() as chat, SecretManagerPeer({SECRET: key.encode()}) as peer, \
            caplog.at_level(logging.DEBUG):
        run(_flags(tmp_path, chat.url, *_key_flags(way, key, tmp_path, peer.url)))

    out = tmp_path / "out"
    intents = (out / "intents.jsonl").read_text().splitlines()
    assert len(intents) == 6
    assert (out / "errors.jsonl").read_text() == ""
    assert chat.authorizations == [f"Bearer {key}"] * 6
    assert bool(peer.requests) is (way == "secret")
    assert key not in caplog.text


@pytest.mark.parametrize("way", ["env", "secret"])
def test_a_rejected_key_is_in_no_dead_letter_or_log_of_a_directrunner_run(
        way: str, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The server answers 401 echoing the header: six dead letters, none holding the key."""
    monkeypatch.setenv(VAR, key)
    with ChatServer(status=401) as chat, SecretManagerPeer({SECRET: key.encode()}) as peer, \
            caplog.at_level(logging.DEBUG):
        run(_flags(tmp_path, chat.url, *_key_flags(way, key, tmp_path, peer.url)))

    errors = (tmp_path / "out" / "errors.jsonl").read_text()
    records = [json.loads(line) for line in errors.splitlines()]
    assert len(records) == 6
    assert all("HTTP 401" in r["message"] and "[redacted]" in r["message"] for r in records)
    assert chat.authorizations == [f"Bearer {key}"] * 6
    assert key not in errors and key not in caplog.text
