"""flex_template.json, the Dockerfile and the pipeline options stay in step.

Fast and offline: parses files and builds an argparse parser; no Docker, gcloud or network.
"""

from __future__ import annotations

import argparse
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from beam_agents.beam import AgentPipelineOptions
from tests.terraform.test_structure import FLEX_TEMPLATE_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
METADATA = ROOT / "flex_template.json"
DOCKERFILE = ROOT / "templates" / "dataflow" / "Dockerfile"

# ParameterType values of the Dataflow v1beta3 API that a metadata file may name.
PARAM_TYPES = frozenset(
    {
        "DEFAULT",
        "TEXT",
        "GCS_READ_BUCKET",
        "GCS_WRITE_BUCKET",
        "GCS_READ_FILE",
        "GCS_WRITE_FILE",
        "GCS_READ_FOLDER",
        "GCS_WRITE_FOLDER",
        "PUBSUB_TOPIC",
        "PUBSUB_SUBSCRIPTION",
        "BIGQUERY_TABLE",
        "JAVASCRIPT_UDF_FILE",
        "SERVICE_ACCOUNT",
        "MACHINE_TYPE",
        "KMS_KEY_NAME",
        "WORKER_REGION",
    }
)
REQUIRED_KEYS = frozenset({"name", "label", "helpText", "isOptional", "paramType"})
REQUIRED_PARAMETERS = frozenset({"agent"})

# parameter -> (values its regexes must accept, values they must reject)
REGEX_CASES: dict[str, tuple[list[str], list[str]]] = {
    "input_subscription": (
        ["projects/my-proj/subscriptions/events"],
        ["projects/my-proj/topics/events", "events", "projects/p/subscriptions/a/b"],
    ),
    "output_topic": (["projects/my-proj/topics/intents"], ["projects/p/subscriptions/s", ""]),
    "errors_topic": (["projects/my-proj/topics/errors"], ["topics/errors"]),
    "agent": (
        ["examples.support_agent:agent", "pkg.mod:Factory.build", "_m:_a"],
        ["examples.support_agent", "1pkg:agent", "pkg:mod:agent", "pkg-x:agent", ""],
    ),
    "model_provider": (["local", "gemini", "openai"], ["vertex", "Gemini", "gemini "]),
    "input_format": (["json", "proto"], ["jsonl", "JSON"]),
    "longterm_store": (["none", "sqlite", "firestore"], ["redis", ""]),
    "activation_timeout_ms": (["1", "60000"], ["0", "-5", "1.5", "10s", ""]),
    "model_location": (["us-central1", "global"], ["us-central1-a", "US"]),
    "firestore_database": (["(default)", "beam-agents"], ["Beam", "(other)"]),
    "input_files": (["gs://bucket/events/*.jsonl"], ["/local/events.jsonl", "gs://bucket"]),
}


@cache
def _metadata() -> dict[str, Any]:
    return json.loads(METADATA.read_text(encoding="utf-8"))


def _parameters() -> dict[str, dict[str, Any]]:
    params = _metadata()["parameters"]
    by_name = {p["name"]: p for p in params}
    assert len(by_name) == len(params), "a parameter name is declared twice"
    return by_name


def _option_names() -> set[str]:
    parser = argparse.ArgumentParser()
    AgentPipelineOptions._add_argparse_args(parser)
    return {action.dest for action in parser._actions if action.dest != "help"}


def _dockerfile() -> str:
    return DOCKERFILE.read_text(encoding="utf-8")


def _env(name: str) -> str:
    match = re.search(rf"^ENV\s+{name}=\"?([^\"\s]+)\"?\s*$", _dockerfile(), flags=re.M)
    assert match, f"Dockerfile does not set {name}"
    return match.group(1)


def test_metadata_has_name_and_description() -> None:
    assert _metadata()["name"]
    assert _metadata()["description"]


def test_parameters_match_pipeline_options_exactly() -> None:
    options = _option_names()
    declared = set(_parameters())
    assert declared - options == set(), "metadata parameters with no pipeline option"
    assert options - declared == set(), "pipeline options missing from flex_template.json"


@pytest.mark.parametrize("name", sorted(_option_names()))
def test_parameter_is_complete(name: str) -> None:
    param = _parameters()[name]
    assert param.keys() >= REQUIRED_KEYS, f"{name} lacks {REQUIRED_KEYS - param.keys()}"
    assert param["paramType"] in PARAM_TYPES
    assert isinstance(param["isOptional"], bool)
    assert param["isOptional"] is (name not in REQUIRED_PARAMETERS)
    assert param["label"].strip() and param["helpText"].strip()
    for pattern in param.get("regexes", []):
        re.compile(pattern)


def test_pubsub_parameters_have_pubsub_types() -> None:
    params = _parameters()
    assert params["input_subscription"]["paramType"] == "PUBSUB_SUBSCRIPTION"
    assert params["output_topic"]["paramType"] == "PUBSUB_TOPIC"
    assert params["errors_topic"]["paramType"] == "PUBSUB_TOPIC"


def test_choice_regexes_cover_exactly_the_argparse_choices() -> None:
    parser = argparse.ArgumentParser()
    AgentPipelineOptions._add_argparse_args(parser)
    for action in parser._actions:
        if not action.choices:
            continue
        (pattern,) = _parameters()[action.dest]["regexes"]
        for choice in action.choices:
            assert re.fullmatch(pattern, choice), f"{action.dest} rejects {choice!r}"


@pytest.mark.parametrize("name", sorted(REGEX_CASES))
def test_regexes_accept_good_and_reject_bad_values(name: str) -> None:
    patterns = _parameters()[name]["regexes"]
    good, bad = REGEX_CASES[name]
    for value in good:
        assert all(re.fullmatch(p, value) for p in patterns), f"{name} rejects {value!r}"
    for value in bad:
        assert not all(re.fullmatch(p, value) for p in patterns), f"{name} accepts {value!r}"


def test_terraform_job_parameters_are_declared() -> None:
    assert set(FLEX_TEMPLATE_PARAMETERS) <= set(_parameters())


def test_dockerfile_entry_file_exists_and_runs_the_pipeline() -> None:
    py_file = _env("FLEX_TEMPLATE_PYTHON_PY_FILE")
    workdir = re.search(r"^ARG\s+WORKDIR=(\S+)\s*$", _dockerfile(), flags=re.M)
    assert workdir, "Dockerfile has no ARG WORKDIR"
    prefix = workdir.group(1).rstrip("/") + "/"
    assert py_file.startswith(prefix), f"{py_file} is not under WORKDIR {prefix}"
    entry = ROOT / py_file.removeprefix(prefix)
    assert entry.is_file(), f"{entry} does not exist"
    assert "run(" in entry.read_text(encoding="utf-8")
    assert (ROOT / _env("FLEX_TEMPLATE_PYTHON_SETUP_FILE").removeprefix(prefix)).is_file()


def test_dockerfile_copies_boot_and_launcher_and_starts_boot() -> None:
    # Which Beam and which Python the images are: tests/unit/test_pins.py.
    text = _dockerfile()
    assert re.search(r"^COPY --from=\S+ /opt/apache/beam /opt/apache/beam\s*$", text, flags=re.M)
    launcher = "/opt/google/dataflow/python_template_launcher"
    assert re.search(rf"^COPY --from=\S+ {launcher} {launcher}\s*$", text, flags=re.M)
    assert re.search(r'^ENTRYPOINT \["/opt/apache/beam/boot"\]\s*$', text, flags=re.M)
