"""The core stays pure: importing it loads no runner and no cloud client (STYLE, brief rule 6)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CORE = ["beam_agents.memory", "beam_agents.model", "beam_agents.runtime", "beam_agents.metrics",
        "beam_agents.errors", "beam_agents.stores", "beam_agents.testing"]

PROBE = """
import importlib, sys
importlib.import_module(sys.argv[1])
roots = {"apache_beam", "pyflink", "httpx", "grpc", "sqlite3"}
# Bare `google.cloud` may be pre-imported by a namespace-package .pth file; its
# submodules (the clients) and google.genai / google.api_core may not.
clients = ("google.cloud.", "google.genai", "google.api_core")
print(",".join(sorted(m for m in sys.modules
                      if m.split(".")[0] in roots or m.startswith(clients))))
"""


@pytest.mark.parametrize("package", CORE)
def test_importing_the_core_loads_no_runner_or_cloud_client(package: str) -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, package], capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "", f"{package} imported {result.stdout.strip()}"
