"""checkov scan of terraform/: zero failed checks.

checkov pins dependencies that conflict with apache-beam, so it lives in its own virtualenv
(`.venv-tools`, built by `make test` from tools/checkov-requirements.txt). A missing checkov
fails these tests rather than skipping them: CI must run the scan.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(300)

REPO_ROOT = Path(__file__).resolve().parents[2]
TERRAFORM_DIR = REPO_ROOT / "terraform"
REQUIREMENTS = REPO_ROOT / "tools" / "checkov-requirements.txt"


def _checkov() -> str:
    """The checkov executable: $CHECKOV, then .venv-tools, then beside this Python, then PATH."""
    configured = os.environ.get("CHECKOV")
    if configured:
        if not Path(configured).is_file():
            pytest.fail(f"CHECKOV={configured} does not exist")
        return configured
    candidates = [
        REPO_ROOT / ".venv-tools" / "bin" / "checkov",
        Path(sys.executable).parent / "checkov",
    ]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    on_path = shutil.which("checkov")
    if on_path:
        return on_path
    pytest.fail(
        "checkov is not installed (looked at $CHECKOV, .venv-tools/bin/checkov, next to "
        f"{sys.executable}, and PATH). Run `make test`, which builds .venv-tools from "
        "tools/checkov-requirements.txt, or set CHECKOV to a checkov executable."
    )


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_checkov(), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _terraform_report(stdout: str) -> dict[str, Any]:
    report = json.loads(stdout)
    # One framework prints an object; several print a list of them.
    if isinstance(report, list):
        (report,) = [r for r in report if r.get("check_type") == "terraform"]
    # With no resources to scan checkov prints the bare summary.
    if "summary" not in report:
        report = {"summary": report, "results": {}}
    return report


def test_checkov_version_is_the_pinned_one() -> None:
    (pinned,) = re.findall(r"^checkov==(\S+)$", REQUIREMENTS.read_text(), flags=re.M)
    completed = _run("--version")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == pinned


def test_checkov_finds_no_failed_checks() -> None:
    # --skip-download keeps the scan offline (no Prisma Cloud guideline lookup).
    completed = _run(
        "-d",
        str(TERRAFORM_DIR),
        "--framework",
        "terraform",
        "--compact",
        "--quiet",
        "--skip-download",
        "-o",
        "json",
    )
    assert completed.stdout.strip(), f"checkov printed nothing:\n{completed.stderr}"
    report = _terraform_report(completed.stdout)
    summary = report["summary"]
    failed = report["results"].get("failed_checks", [])
    details = "\n".join(
        f"{c['check_id']} {c['resource']} {c['file_path']}:{c['file_line_range']} {c['check_name']}"
        for c in failed
    )
    assert summary["parsing_errors"] == 0, completed.stdout
    assert summary["resource_count"] > 0 and summary["passed"] > 0, summary
    assert summary["failed"] == 0 and not failed, f"checkov failed checks:\n{details}"
    assert completed.returncode == 0, completed.stderr
