"""The contributor loop stays wired: the pre-commit ruff is the dev extra's, make check exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_pre_commit_ruff_is_the_ruff_the_dev_extra_pins() -> None:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["optional-dependencies"]["dev"]
    [pin] = [spec for spec in dev if spec.startswith("ruff")]
    assert pin.startswith("ruff=="), f"the dev extra must pin ruff exactly, got {pin!r}"
    found = re.search(r"ruff-pre-commit\s+rev:\s*v(\S+)",
                      (ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    assert found is not None and found.group(1) == pin.removeprefix("ruff==")


def test_make_check_runs_lint_types_and_the_unit_tests() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ncheck:", 1)[1].split("\n\n", 1)[0]
    for step in ("ruff check .", "mypy src benchmarks", "pytest", "tests/unit"):
        assert step in recipe, step
