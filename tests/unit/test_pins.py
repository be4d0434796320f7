"""The Dataflow image runs the Beam and the Python that the Beam-latest test line runs.

templates/dataflow/beam-version.txt is the one Beam pin. The Makefile's Beam-latest
environment installs exactly that release, and the Dockerfile repeats it as the default of
ARG BEAM_VERSION (a FROM line cannot read a file), which the SDK image tag and the pip pin
use. These tests fail, naming the place, when any of them names another release or
another Python. Fast and offline: reads files and runs `make -n`, which executes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from functools import cache
from pathlib import Path

from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
PIN_FILE = ROOT / "templates" / "dataflow" / "beam-version.txt"
DOCKERFILE = ROOT / "templates" / "dataflow" / "Dockerfile"
MAKEFILE = ROOT / "Makefile"
METADATA = ROOT / "flex_template.json"
PYPROJECT = ROOT / "pyproject.toml"
LATEST_TARGET = ".venv-beam-latest/.installed"

SDK_IMAGE = re.compile(r"apache/beam_python(?P<python>\d+\.\d+)_sdk:(?P<tag>\S+)")
BEAM_PIN = re.compile(r"apache-beam\[gcp\]==(?P<version>[^'\"\s]+)")
LAUNCHER = re.compile(r"dataflow-templates-base/python(?P<python>\d+)-template-launcher-base[:@]")
SLIM = re.compile(r"^FROM\s+python:(?P<python>\d+\.\d+)-slim(?:\s+AS\s+\S+)?\s*$", re.M | re.I)


@cache
def _pin() -> str:
    text = PIN_FILE.read_text(encoding="utf-8").strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", text), f"{PIN_FILE.name} holds {text!r}, not X.Y.Z"
    return text


def _dockerfile() -> str:
    return DOCKERFILE.read_text(encoding="utf-8")


def _arg_defaults() -> dict[str, list[str]]:
    """Every `ARG NAME=default` in the Dockerfile, global or in a stage."""
    defaults: dict[str, list[str]] = {}
    for name, value in re.findall(r"^ARG\s+(\w+)=(\S+)\s*$", _dockerfile(), flags=re.M):
        defaults.setdefault(name, []).append(value.strip("\"'"))
    return defaults


def _expand(text: str) -> str:
    """Substitutes ${NAME} and $NAME with the Dockerfile's (single) ARG default."""
    defaults = _arg_defaults()

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        values = defaults.get(name)
        assert values, f"Dockerfile uses ${name} but gives ARG {name} no default"
        assert len(set(values)) == 1, f"Dockerfile gives ARG {name} several defaults: {values}"
        return values[0]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)


def _dockerfile_beam_versions() -> dict[str, str]:
    """Where the Dockerfile names a Beam release -> the release it names there."""
    found: dict[str, str] = {}
    for i, value in enumerate(_arg_defaults().get("BEAM_VERSION", [])):
        found[f"Dockerfile ARG BEAM_VERSION default #{i + 1}"] = value
    for i, match in enumerate(SDK_IMAGE.finditer(_dockerfile())):
        found[f"Dockerfile SDK image tag #{i + 1} ({match.group(0)})"] = _expand(match["tag"])
    for i, match in enumerate(BEAM_PIN.finditer(_dockerfile())):
        found[f"Dockerfile pip pin #{i + 1} ({match.group(0)})"] = _expand(match["version"])
    return found


def _make_dry_run(target: str) -> str:
    make = shutil.which("make")
    assert make, "GNU make is needed to read the Makefile's Beam-latest install line"
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    completed = subprocess.run(
        [make, "--no-print-directory", "-n", "-B", "-C", str(ROOT), target],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def _makefile_beam_versions() -> dict[str, str]:
    recipe = _make_dry_run(LATEST_TARGET)
    installs = [line for line in recipe.replace("\\\n", " ").splitlines() if "pip install" in line]
    pins = [m["version"] for line in installs for m in BEAM_PIN.finditer(line)]
    assert pins, f"the Makefile's {LATEST_TARGET} rule installs no apache-beam[gcp]==X:\n{recipe}"
    return {f"Makefile {LATEST_TARGET} pip install #{i + 1}": v for i, v in enumerate(pins)}


def _metadata_beam_versions() -> dict[str, str]:
    text = METADATA.read_text(encoding="utf-8")
    json.loads(text)  # a metadata file that does not parse is another test's failure
    found = {f"flex_template.json image {m.group(0)}": m["tag"] for m in SDK_IMAGE.finditer(text)}
    found |= {f"flex_template.json pin {m.group(0)}": m["version"] for m in BEAM_PIN.finditer(text)}
    return found


def _latest_python() -> str:
    """The Python the Makefile runs the Beam-latest line on (when the machine has it)."""
    match = re.search(r"^LATEST_PY\s*:?=\s*(\d+\.\d+)\s*$", MAKEFILE.read_text("utf-8"), re.M)
    assert match, "the Makefile sets no LATEST_PY, the Beam-latest line's Python"
    return match.group(1)


def _disagreements(found: dict[str, str], expected: str) -> list[str]:
    return [f"{where}: {value}" for where, value in found.items() if value != expected]


def test_pin_file_holds_one_release() -> None:
    assert _pin()


def test_dockerfile_names_the_pinned_beam_everywhere() -> None:
    found = _dockerfile_beam_versions()
    kinds = ("ARG BEAM_VERSION", "SDK image tag", "pip pin")
    for kind in kinds:
        assert any(kind in where for where in found), f"the Dockerfile has no {kind}"
    bad = _disagreements(found, _pin())
    assert not bad, f"{PIN_FILE.name} pins Beam {_pin()}, but " + "; ".join(bad)


def test_makefile_latest_line_installs_exactly_the_pinned_beam() -> None:
    bad = _disagreements(_makefile_beam_versions(), _pin())
    assert not bad, f"{PIN_FILE.name} pins Beam {_pin()}, but " + "; ".join(bad)


def test_makefile_latest_line_reads_the_pin_file() -> None:
    text = MAKEFILE.read_text(encoding="utf-8")
    assert PIN_FILE.relative_to(ROOT).as_posix() in text, "the Makefile does not read the pin file"


def test_flex_template_names_no_other_beam() -> None:
    bad = _disagreements(_metadata_beam_versions(), _pin())
    assert not bad, f"{PIN_FILE.name} pins Beam {_pin()}, but " + "; ".join(bad)


def test_dockerfile_images_share_the_latest_lines_python() -> None:
    text = _dockerfile()
    python = _latest_python()
    found: dict[str, str] = {}
    found |= {f"FROM python:{m['python']}-slim": m["python"] for m in SLIM.finditer(text)}
    found |= {m.group(0): m["python"] for m in SDK_IMAGE.finditer(text)}
    found |= {
        m.group(0).rstrip(":@"): f"{m['python'][0]}.{m['python'][1:]}"
        for m in LAUNCHER.finditer(text)
    }
    for kind in ("python:", "beam_python", "template-launcher-base"):
        assert any(kind in where for where in found), f"the Dockerfile names no {kind} image"
    bad = _disagreements(found, python)
    assert not bad, f"the Makefile runs the Beam-latest line on Python {python}, but " + "; ".join(
        bad
    )


def test_pyproject_admits_the_images_python() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    python = _latest_python()
    major, minor = (int(part) for part in python.split("."))
    spec = SpecifierSet(project["requires-python"])
    for version in ("3.11.0", f"{python}.0"):  # the dev line's and the image's Python
        assert version in spec, f"requires-python {spec} excludes Python {version}"
    newer = f"{major}.{minor + 1}"
    assert f"{newer}.0" not in spec, f"requires-python {spec} admits {newer}, which no test runs"
    assert f"Programming Language :: Python :: {python}" in project["classifiers"]


def test_dockerfile_pip_pin_allowed_by_the_gcp_extra() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    (beam,) = [d for d in project["optional-dependencies"]["gcp"] if d.startswith("apache-beam")]
    floor = re.fullmatch(r"apache-beam\[gcp\]>=(\d+)\.(\d+)\.(\d+)", beam)
    assert floor, f"the gcp extra's Beam requirement {beam!r} is not a plain floor"
    pinned = tuple(int(part) for part in _pin().split("."))
    assert pinned >= tuple(int(part) for part in floor.groups()), f"{beam} excludes {_pin()}"


def test_the_dev_lines_prism_is_built_at_the_dev_extras_beam() -> None:
    """Prism must match the dev line's SDK; the Makefile reads it from pyproject, not a copy."""
    done = subprocess.run(["make", "-s", "-n", "-p", "prism"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    made = re.search(r"^DEV_BEAM_VERSION := (\S+)$", done.stdout, re.M)
    dev = {m["version"].rstrip(";") for m in BEAM_PIN.finditer(
        (ROOT / "pyproject.toml").read_text(encoding="utf-8"))}
    assert made is not None, done.stderr[-500:]
    assert dev == {made.group(1)}, f"pyproject pins Beam {dev}, Prism is built at {made.group(1)}"
