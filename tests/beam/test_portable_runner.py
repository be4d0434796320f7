"""The agent pipeline on Beam's portable runner stack, the one the FlinkRunner uses, offline.

- ``PortableRunner --job_endpoint=embed`` (Beam's in-process job service) runs the pipeline
  and writes byte-identical intents and error records to the DirectRunner's. It does so with
  LOOPBACK workers and with an EXTERNAL worker pool in another process, which is how SDK
  workers sit beside Flink TaskManagers.
- FlinkRunner: what Beam does with ``--flink_job_server_jar`` and ``--flink_version``, and
  what reaches a Flink job server: ``--checkpointing_interval`` (a Java-side option) and
  ``--output_executable_path``, from ``beam-agents run`` and from
  ``templates/flink/build_beam_jar.sh``.

The Flink job server (a Maven jar) and a Flink cluster cannot be fetched here. A recording job
service stands in for the job server: it describes options the way Beam's Java job server does,
records the job it is handed, and refuses to run it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from urllib.error import URLError

import apache_beam
import grpc
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import Pipeline
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc
from apache_beam.portability.api import beam_runner_api_pb2 as runner_api
from apache_beam.runners.portability import flink_runner
from apache_beam.runners.runner import PipelineState
from apache_beam.utils import subprocess_server
from google.protobuf import json_format

from beam_agents.beam import build_pipeline
from beam_agents.beam._runner import FINISH_BUNDLE_BEFORE_CHECKPOINTING as FINISH
from beam_agents.beam._runner import FLINK_STREAMING_BUNDLE_SIZE, with_runner_safeguards
from beam_agents.cli import main
from tests._emulators import free_port

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "events.jsonl"
BUILD_JAR = ROOT / "templates" / "flink" / "build_beam_jar.sh"
EMBED_LOOPBACK = ("--runner=PortableRunner", "--job_endpoint=embed",
                  "--environment_type=LOOPBACK")


def counter_events(path: Path) -> Path:
    """Three keys, one agent failure, one undecodable line."""
    lines = [json.dumps({"entity_key": f"u{i % 3}", "event_id": f"e{i}",
                         "event_time_ms": 1000 + i, "payload": "fail" if i == 4 else "hi"})
             for i in range(12)]
    path.write_text("\n".join([*lines, "not json"]) + "\n")
    return path


def sample_slice(path: Path) -> Path:
    """The main job's first 340 input lines: a malformed line and a message the agent rejects."""
    path.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:340]))
    return path


def run_pipeline(out_dir: Path, source: Path, agent: str,
                 runner: tuple[str, ...]) -> tuple[list[bytes], list[bytes]]:
    """Run the agent pipeline; return its intent and error lines, each exactly as written."""
    out_dir.mkdir()
    intents, errors = out_dir / "intents.jsonl", out_dir / "errors.jsonl"
    options = PipelineOptions([*runner, f"--input_files={source}", f"--output_path={intents}",
                               f"--errors_path={errors}", f"--agent={agent}"])
    pipeline = Pipeline(options=options)
    build_pipeline(pipeline, options)
    result = pipeline.run()
    result.wait_until_finish()
    assert result.state == PipelineState.DONE
    # Runners may order lines differently; every record must be byte-identical.
    return sorted(intents.read_bytes().splitlines()), sorted(errors.read_bytes().splitlines())


def error_stages(errors: list[bytes]) -> set[str]:
    return {json.loads(line)["stage"] for line in errors}


@pytest.mark.parametrize(("agent", "make_source", "stages"), [
    ("tests.agents:counter", counter_events, {"STAGE_AGENT", "STAGE_DECODE"}),
    ("examples.support_agent:agent", sample_slice, {"STAGE_AGENT", "STAGE_DECODE"}),
], ids=["counter", "support_agent"])
def test_the_embedded_portable_runner_with_loopback_writes_what_the_direct_runner_writes(
        tmp_path: Path, agent: str, make_source: Callable[[Path], Path],
        stages: set[str]) -> None:
    source = make_source(tmp_path / "events.jsonl")
    direct = run_pipeline(tmp_path / "direct", source, agent, ("--runner=DirectRunner",))
    portable = run_pipeline(tmp_path / "portable", source, agent, EMBED_LOOPBACK)

    intents, errors = direct
    assert len(intents) >= 11 and error_stages(errors) == stages
    assert portable == direct


@pytest.fixture
def worker_pool(tmp_path: Path) -> Iterator[str]:
    """Beam's Python worker pool in its own process: what an EXTERNAL environment points at."""
    port = free_port()
    # The pool starts each worker as `python` from PATH, so this interpreter's bin/ goes first.
    env = dict(os.environ,
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])))
    with (tmp_path / "worker_pool.log").open("wb") as log:
        pool = subprocess.Popen(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
             f"--service_port={port}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with grpc.insecure_channel(f"localhost:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
        yield f"localhost:{port}"
    finally:
        os.killpg(pool.pid, signal.SIGTERM)  # the pool and the workers it started
        pool.wait(timeout=10)


def test_the_embedded_portable_runner_with_an_external_worker_pool_writes_the_same(
        tmp_path: Path, worker_pool: str) -> None:
    source = counter_events(tmp_path / "events.jsonl")
    direct = run_pipeline(tmp_path / "direct", source, "tests.agents:counter",
                          ("--runner=DirectRunner",))
    external = run_pipeline(tmp_path / "external", source, "tests.agents:counter",
                            ("--runner=PortableRunner", "--job_endpoint=embed",
                             "--environment_type=EXTERNAL",
                             f"--environment_config={worker_pool}"))

    assert external == direct


# --- FlinkRunner: the job-server jar ------------------------------------------------------


def flink_run_argv(tmp_path: Path, *extra: str) -> list[str]:
    source = counter_events(tmp_path / "events.jsonl")
    return ["run", "--runner=FlinkRunner", "--flink_master=jobmanager:8081",
            "--environment_type=EXTERNAL", "--environment_config=localhost:50000",
            f"--input_files={source}", f"--output_path={tmp_path / 'out' / 'intents.jsonl'}",
            f"--errors_path={tmp_path / 'out' / 'errors.jsonl'}",
            "--agent=tests.agents:counter", *extra]


@pytest.fixture
def no_downloads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Beam's jar download fails at once, as offline, and records what it tried to fetch."""
    attempts: list[str] = []
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # Beam's job-server scratch dirs

    def offline(request: object, *args: object, **kwargs: object) -> object:
        attempts.append(getattr(request, "full_url", request))
        raise URLError("offline (test)")

    monkeypatch.setattr(subprocess_server, "urlopen", offline)
    return attempts


def test_a_job_server_jar_path_that_does_not_exist_fails_before_any_download(
        tmp_path: Path, no_downloads: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(flink_run_argv(tmp_path, "--flink_job_server_jar=/nonexistent.jar")) == 2

    assert 'ValueError: Unable to parse jar URL "/nonexistent.jar"' in capsys.readouterr().err
    assert no_downloads == []


def test_without_a_job_server_jar_beam_fetches_it_from_maven_and_names_the_cache_path(
        tmp_path: Path, no_downloads: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "jars"
    name = f"beam-runners-flink-1.19-job-server-{apache_beam.__version__}.jar"

    # --debug: the whole message, which names where to stage the jar.
    assert main(["--debug", *flink_run_argv(tmp_path, "--flink_version=1.19",
                                            f"--jar_cache_dir={cache}")]) == 2
    failure = capsys.readouterr().err
    assert "RuntimeError: Unable to fetch remote job server jar" in failure

    maven = ("https://repo.maven.apache.org/maven2/org/apache/beam/"
             f"beam-runners-flink-1.19-job-server/{apache_beam.__version__}/{name}")
    assert no_downloads[0] == maven  # Beam 2.7x then tries Google's Maven mirror
    assert f"stage the jar at {cache / name}" in failure


def test_a_job_server_jar_in_the_cache_is_used_without_a_download(
        tmp_path: Path, no_downloads: list[str]) -> None:
    options = PipelineOptions(["--flink_version=1.19", f"--jar_cache_dir={tmp_path}"])
    maven_url = flink_runner.FlinkJarJobServer(options).path_to_jar()
    staged = tmp_path / Path(maven_url).name
    staged.write_bytes(b"PK")

    assert subprocess_server.JavaJarServer.local_jar(maven_url, str(tmp_path)) == str(staged)
    assert no_downloads == []


def test_a_flink_version_beam_does_not_publish_is_rejected_when_flags_are_parsed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(flink_run_argv(tmp_path, "--flink_version=2.3"))

    assert exit_info.value.code == 2
    assert "argument --flink_version: invalid choice: '2.3'" in capsys.readouterr().err


# --- FlinkRunner: what reaches the Flink job server ---------------------------------------

INTEGER = beam_job_api_pb2.PipelineOptionType.INTEGER
STRING = beam_job_api_pb2.PipelineOptionType.STRING
# A few of the options Beam's Java Flink job server describes (FlinkPipelineOptions and
# PortablePipelineOptions), named as it names them: lower_underscore.
JAVA_OPTIONS = (("checkpointing_interval", INTEGER), ("checkpointing_mode", STRING),
                ("flink_master", STRING), ("parallelism", INTEGER),
                ("output_executable_path", STRING))


class RecordingJobService(beam_job_api_pb2_grpc.JobServiceServicer):
    """Answers like the Java job server up to Prepare, records the job, then refuses it."""

    def __init__(self) -> None:
        self.prepared: list[beam_job_api_pb2.PrepareJobRequest] = []

    def DescribePipelineOptions(self, request: object, context: object) -> object:
        group = "org.apache.beam.runners.flink.FlinkPipelineOptions"
        return beam_job_api_pb2.DescribePipelineOptionsResponse(options=[
            beam_job_api_pb2.PipelineOptionDescriptor(name=name, type=kind, group=group)
            for name, kind in JAVA_OPTIONS])

    def Prepare(self, request: beam_job_api_pb2.PrepareJobRequest,
                context: grpc.ServicerContext) -> object:
        self.prepared.append(request)
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "recorded by the test job service")

    def options(self) -> dict[str, object]:
        [request] = self.prepared
        return json_format.MessageToDict(request.pipeline_options)

    def environments(self) -> list[runner_api.Environment]:
        [request] = self.prepared
        pipeline = request.pipeline
        return [pipeline.components.environments[t.environment_id]
                for t in pipeline.components.transforms.values()
                if t.spec.urn == "beam:transform:pardo:v1"]


@pytest.fixture
def job_service() -> Iterator[tuple[RecordingJobService, str]]:
    service = RecordingJobService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    beam_job_api_pb2_grpc.add_JobServiceServicer_to_server(service, server)
    port = server.add_insecure_port("localhost:0")
    server.start()
    try:
        yield service, f"localhost:{port}"
    finally:
        server.stop(0)


def external_endpoint(environment: runner_api.Environment) -> str:
    assert environment.urn == "beam:env:external:v1"
    return runner_api.ExternalPayload.FromString(environment.payload).endpoint.url


def test_beam_agents_run_hands_flink_options_to_the_job_server(
        tmp_path: Path, job_service: tuple[RecordingJobService, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    service, endpoint = job_service

    assert main(flink_run_argv(tmp_path, f"--job_endpoint={endpoint}", "--parallelism=4",
                               "--checkpointing_interval=60000")) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines()
              if line.startswith("beam-agents:")]
    assert "recorded by the test job service" in line and "Traceback" not in line

    options = service.options()
    assert options["beam:option:checkpointing_interval:v1"] == "60000"
    assert options["beam:option:parallelism:v1"] == "4"
    assert options["beam:option:flink_master:v1"] == "jobmanager:8081"
    assert options["beam:option:agent:v1"] == "tests.agents:counter"  # our flags travel too
    assert {external_endpoint(e) for e in service.environments()} == {"localhost:50000"}


@pytest.mark.parametrize(("uber_jar", "kept"), [(True, True), (False, False)],
                         ids=["flink_submit_uber_jar", "job_service_without_java_options"])
def test_java_side_options_survive_only_where_a_java_job_server_will_read_them(
        uber_jar: bool, kept: bool) -> None:
    """With --flink_submit_uber_jar Beam keeps unknown flags; a job service that does not
    describe them (like --job_endpoint=embed's) drops them with a warning."""

    class DescribesNothing:
        def DescribePipelineOptions(self, request: object, timeout: object = None) -> object:
            return beam_job_api_pb2.DescribePipelineOptionsResponse()

    flags = ["--flink_master=jobmanager:8081", "--checkpointing_interval=60000"]
    options = PipelineOptions([*flags, *(["--flink_submit_uber_jar"] if uber_jar else [])])
    handle = flink_runner.FlinkRunner().create_job_service_handle(DescribesNothing(), options)

    sent = json_format.MessageToDict(handle.get_pipeline_options())
    assert ("beam:option:checkpointing_interval:v1" in sent) is kept
    if kept:
        assert sent["beam:option:checkpointing_interval:v1"] == "60000"


def test_build_beam_jar_sh_hands_the_executable_path_to_the_job_server(
        tmp_path: Path, job_service: tuple[RecordingJobService, str]) -> None:
    service, endpoint = job_service
    jar = tmp_path / "job.jar"
    source = counter_events(tmp_path / "events.jsonl")

    done = subprocess.run(
        [str(BUILD_JAR), "--flink-version", "1.19", "--output", str(jar),
         "--environment-type", "EXTERNAL", "--environment-config", "localhost:50000",
         "--", f"--job_endpoint={endpoint}", f"--input_files={source}",
         f"--output_path={tmp_path / 'intents.jsonl'}", f"--errors_path={tmp_path / 'e.jsonl'}",
         "--agent=tests.agents:counter", "--checkpointing_interval=60000"],
        cwd=ROOT, env=dict(os.environ, PYTHON=sys.executable), capture_output=True, text=True,
        timeout=50, check=False)

    assert done.returncode != 0 and "recorded by the test job service" in done.stderr
    options = service.options()
    assert options["beam:option:output_executable_path:v1"] == str(jar)
    assert options["beam:option:checkpointing_interval:v1"] == "60000"
    assert {external_endpoint(e) for e in service.environments()} == {"localhost:50000"}
    assert not jar.exists()  # only the Java job server writes it


def test_a_streaming_flink_run_finishes_small_bundles_before_checkpoints_unless_told() -> None:
    """The FlinkRunner on --streaming finishes small bundles before unaligned checkpoints.

    Without the switch a checkpoint can buffer a bundle's lines behind the
    final watermark; without the bound a barrier waits for a bundle as long
    as the input (`with_runner_safeguards`; tests/portable runs both for real).
    A flag the user gave is kept as given; nothing else gets them.
    """
    small = f"--max_bundle_size={FLINK_STREAMING_BUNDLE_SIZE}"
    unaligned = "--unaligned_checkpoint_enabled"
    flink = ["--runner=FlinkRunner", "--input_files=x.jsonl"]
    assert with_runner_safeguards(flink, streaming=True) == [*flink, FINISH, small, unaligned]
    assert with_runner_safeguards(flink, streaming=False) == flink
    given = [*flink, FINISH, "--max_bundle_size=100", "--unaligned_checkpoint_enabled=false"]
    assert with_runner_safeguards(given, streaming=True) == given  # not twice, not overridden
    dataflow = ["--runner=DataflowRunner", "--input_files=x.jsonl"]
    assert with_runner_safeguards(dataflow, streaming=True) == dataflow
    dotted = ["--runner=apache_beam.runners.portability.flink_runner.FlinkRunner"]
    assert with_runner_safeguards(dotted, streaming=True) == [*dotted, FINISH, small, unaligned]


def test_prism_and_the_direct_runner_are_told_not_to_split_a_bundle() -> None:
    """Prism, tried first by the DirectRunner, gets ``prism_disable_sdf_split``, once.

    A split Prism bundle could run one key in two bundles at once
    (`with_runner_safeguards` says how); experiments already given are kept.
    """
    no_split = "--experiments=prism_disable_sdf_split"
    for runner in ([], ["--runner=DirectRunner"], ["--runner=PrismRunner"]):
        for streaming in (True, False):
            assert with_runner_safeguards(runner, streaming=streaming) == [*runner, no_split]
    given = ["--runner=PrismRunner", "--experiments=a,prism_disable_sdf_split"]
    assert with_runner_safeguards(given, streaming=True) == given
    other = ["--runner=PrismRunner", "--experiments=disable_prism_server_singleton"]
    added = with_runner_safeguards(other, streaming=True)
    assert added == [*other, no_split]
    experiments = PipelineOptions(added).get_all_options()["experiments"]
    assert set(experiments) == {"disable_prism_server_singleton", "prism_disable_sdf_split"}
