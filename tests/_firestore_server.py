"""Start and stop the Firestore-protocol test server (npm ``@firestore-emulator/server``).

The server is an in-memory gRPC implementation of the Firestore v1 API. The
Python client reaches it through ``FIRESTORE_EMULATOR_HOST``; this helper only
provides ``host:port``. The package is pinned in ``tools/firestore-emulator``
(package.json + package-lock.json) and installed with ``npm ci`` on first use.

The package's public ``FirestoreServer.start(port)`` binds ``0.0.0.0``. The
launcher below binds the same gRPC server to 127.0.0.1 only and lets the OS
pick the port (no free-port race); it relies on the server object's ``server``
field, which is stable in the pinned version. A version bump that breaks this
fails loudly with the launcher's own message.

Failures raise :class:`FirestoreServerError` with a message naming what is
missing. Callers (pytest fixtures) turn it into a test *failure*: CI must run
the Firestore tests, so they never skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = [
    "EMULATOR_HOST_ENV",
    "FirestoreServer",
    "FirestoreServerError",
    "firestore_host",
    "firestore_server",
    "shared_firestore_host",
]

EMULATOR_HOST_ENV = "FIRESTORE_EMULATOR_HOST"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / "tools" / "firestore-emulator"
_PACKAGE = "@firestore-emulator/server"
_READY_MARK = "BEAM_AGENTS_FIRESTORE_LISTENING"
_START_TIMEOUT_S = 30.0
_NPM_TIMEOUT_S = 300.0

# argv: <host> <port>. Prints the ready mark and the bound port on stdout.
_LAUNCHER = r"""
const [host, portArg] = process.argv.slice(1);
let FirestoreServer, grpc;
try {
  ({ FirestoreServer } = require("@firestore-emulator/server"));
  grpc = require("@grpc/grpc-js");
} catch (err) {
  console.error("cannot load the pinned npm packages: " + err.message);
  process.exit(3);
}
const emulator = new FirestoreServer();
const inner = emulator.server;
if (!inner || typeof inner.bindAsync !== "function") {
  console.error("@firestore-emulator/server no longer exposes its gRPC server; "
    + "update tests/_firestore_server.py for the new version");
  process.exit(4);
}
inner.bindAsync(`${host}:${portArg}`, grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    console.error("bind failed: " + err.message);
    process.exit(5);
  }
  console.log(`__MARK__ ${port}`);
});
const stop = () => { emulator.stop(); process.exit(0); };
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
// The parent holds our stdin open; if it dies without stopping us, EOF ends us too.
process.stdin.on("end", stop);
process.stdin.resume();
""".replace("__MARK__", _READY_MARK)


class FirestoreServerError(RuntimeError):
    """The Firestore test server could not be installed or started."""


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise FirestoreServerError(
            f"`{name}` is not on PATH. The Firestore tests need Node.js >= 18 with npm to run "
            f"the pinned {_PACKAGE} (tools/firestore-emulator); install Node.js, or point "
            f"{EMULATOR_HOST_ENV} at a running Firestore emulator."
        )
    return path


def ensure_installed() -> None:
    """Run ``npm ci`` in tools/firestore-emulator unless the package is already there."""
    if (PACKAGE_DIR / "node_modules" / _PACKAGE / "package.json").is_file():
        return
    npm = _require_tool("npm")
    if not (PACKAGE_DIR / "package-lock.json").is_file():
        raise FirestoreServerError(f"{PACKAGE_DIR / 'package-lock.json'} is missing")
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=PACKAGE_DIR,
            capture_output=True,
            text=True,
            timeout=_NPM_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FirestoreServerError(
            f"`npm ci` in {PACKAGE_DIR} did not finish in {_NPM_TIMEOUT_S:.0f}s"
        ) from exc
    if done.returncode != 0:
        raise FirestoreServerError(
            f"`npm ci` in {PACKAGE_DIR} failed (exit {done.returncode}); is the npm registry "
            f"reachable? Run `npm ci --prefix tools/firestore-emulator` by hand.\n"
            f"{done.stderr[-2000:]}"
        )


class FirestoreServer:
    """One server process on 127.0.0.1; :meth:`stop` and :meth:`start` keep its port.

    Keeping the port lets a test take the server away and bring it back, which is
    how the Firestore backend's outage tests simulate an unreachable store.
    """

    def __init__(self, *, port: int = 0) -> None:
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @property
    def host(self) -> str:
        """``host:port`` for ``FIRESTORE_EMULATOR_HOST``."""
        if self.port == 0:
            raise FirestoreServerError("the server has not been started")
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> str:
        """Start the process, wait until it accepts connections, return ``host:port``."""
        if self.running:
            return self.host
        ensure_installed()
        node = _require_tool("node")
        fd, log_name = tempfile.mkstemp(prefix="firestore-emulator-", suffix=".log")
        self._log_path = Path(log_name)
        with os.fdopen(fd, "wb") as log:
            # A new session gives the server its own process group, so stop()
            # reaches every process it may spawn.
            self._process = subprocess.Popen(
                [node, "-e", _LAUNCHER, "127.0.0.1", str(self.port)],
                cwd=PACKAGE_DIR,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self.port = self._await_ready()
        except BaseException:
            self.stop()
            raise
        return self.host

    def _await_ready(self) -> int:
        assert self._process is not None and self._log_path is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        port: int | None = None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise FirestoreServerError(
                    f"{_PACKAGE} exited with code {self._process.returncode} during start:\n"
                    f"{self._log_tail()}"
                )
            if port is None:
                for line in self._log_path.read_text(errors="replace").splitlines():
                    if line.startswith(_READY_MARK):
                        port = int(line.split()[1])
            if port is not None and _accepts_connections(port):
                return port
            time.sleep(0.05)
        raise FirestoreServerError(
            f"{_PACKAGE} did not accept connections within {_START_TIMEOUT_S:.0f}s:\n"
            f"{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        return self._log_path.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        """Kill the process group (TERM, then KILL) and remove the log; idempotent."""
        process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            process.stdin.close()
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        if process is not None:
            _wait_port_closed(self.port)
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None


def _accepts_connections(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_port_closed(port: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while port and time.monotonic() < deadline and _accepts_connections(port):
        time.sleep(0.05)


@contextlib.contextmanager
def firestore_server() -> Iterator[str]:
    """Yield ``host:port`` of a Firestore server for the duration of the block.

    When ``FIRESTORE_EMULATOR_HOST`` is already set, that server is used as is
    and nothing is started. Otherwise a private server is started and killed on
    exit, also when the block raises.
    """
    existing = os.environ.get(EMULATOR_HOST_ENV)
    if existing:
        yield existing
        return
    server = FirestoreServer()
    try:
        yield server.start()
    finally:
        server.stop()


class _SharedServer:
    """A reference-counted :func:`firestore_server` shared by several session fixtures."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._stack: contextlib.ExitStack | None = None
        self._host = ""

    def acquire(self) -> str:
        with self._lock:
            if self._stack is None:
                stack = contextlib.ExitStack()
                self._host = stack.enter_context(firestore_server())
                self._stack = stack
            self._users += 1
            return self._host

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._stack is not None:
                stack, self._stack = self._stack, None
                stack.close()


_SHARED = _SharedServer()


@contextlib.contextmanager
def shared_firestore_host() -> Iterator[str]:
    """Like :func:`firestore_server`, but one server for every concurrent user.

    The contract and Firestore test packages each have a session fixture; when
    both run in one session they share a single process through this reference
    count, and the last user stops it.
    """
    host = _SHARED.acquire()
    try:
        yield host
    finally:
        _SHARED.release()


@pytest.fixture(scope="session")
def firestore_host() -> Iterator[str]:
    """Session fixture: the shared server's ``host:port``, exported as FIRESTORE_EMULATOR_HOST.

    Import it into a conftest to use it. If the server cannot start, every test
    that needs it fails with the reason; none is skipped, because CI must run
    them.
    """
    problem = None
    try:
        with shared_firestore_host() as host, pytest.MonkeyPatch.context() as patch:
            patch.setenv(EMULATOR_HOST_ENV, host)
            yield host
    except FirestoreServerError as exc:
        problem = str(exc)
    if problem is not None:
        pytest.fail(f"the Firestore test server is required and could not start: {problem}",
                    pytrace=False)
