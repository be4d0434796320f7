"""Jaeger v2 on loopback, built by `make jaeger`: the OTLP receiver the tests query."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests._emulators import free_port

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "tools" / "jaeger" / "version.txt").read_text().strip()
BINARY = ROOT / ".toolchain" / f"jaeger-{VERSION}" / "jaeger"
CONFIG = ROOT / "tools" / "jaeger" / "config.yaml"


@dataclass
class Jaeger:
    """A running Jaeger: where to send OTLP, and its query API."""

    process: subprocess.Popen[bytes]
    otlp_port: int
    query_port: int
    metrics_port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}"

    def _get(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.query_port}{path}",
                                        timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return {"data": []}
            raise

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans of one trace (empty when Jaeger has none), each with its process's service."""
        data = self._get(f"/api/traces/{trace_id}")["data"] or []
        spans: list[dict[str, Any]] = []
        for found in data:
            for span in found["spans"]:
                span["service"] = found["processes"][span["processID"]]["serviceName"]
                spans.append(span)
        return spans

    def traces(self, service: str, *, limit: int = 2000) -> list[dict[str, Any]]:
        """Every trace of `service` that Jaeger holds."""
        return self._get(f"/api/traces?service={service}&limit={limit}&lookback=24h")["data"] or []

    def wait_for_spans(self, service: str, count: int, *, timeout_s: float = 30.0) -> int:
        """Wait until `service` has at least `count` spans (Jaeger stores asynchronously)."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            seen = sum(len(t["spans"]) for t in self.traces(service))
            if seen >= count:
                return seen
            time.sleep(0.2)
        return seen

    def metrics_text(self) -> str:
        """What the metrics pipeline's Prometheus exporter shows."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=10) as response:
            return str(response.read().decode())


def start_jaeger(log_path: Path) -> Jaeger:
    """Start Jaeger on free loopback ports and wait until its query API answers."""
    if not BINARY.exists():
        raise AssertionError(f"Jaeger {VERSION} is missing at {BINARY}: build it with "
                             "`make jaeger` (go install from the Go module proxy)")
    ports = {name: free_port() for name in ("JAEGER_OTLP_PORT", "JAEGER_QUERY_PORT",
                                            "JAEGER_QUERY_GRPC_PORT", "JAEGER_METRICS_PORT")}
    env = {**os.environ, **{name: str(port) for name, port in ports.items()}}
    log = log_path.open("wb")
    process = subprocess.Popen([str(BINARY), "--config", str(CONFIG)], env=env, stdout=log,
                               stderr=subprocess.STDOUT)
    jaeger = Jaeger(process, ports["JAEGER_OTLP_PORT"], ports["JAEGER_QUERY_PORT"],
                    ports["JAEGER_METRICS_PORT"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"Jaeger exited with {process.returncode}; see {log_path}")
        try:
            jaeger._get("/api/services")
            with socket.create_connection(("127.0.0.1", jaeger.otlp_port), timeout=1):
                return jaeger
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError(f"Jaeger did not answer within 60 s; see {log_path}")


def stop_jaeger(jaeger: Jaeger) -> None:
    jaeger.process.terminate()
    try:
        jaeger.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        jaeger.process.kill()
        jaeger.process.wait()
