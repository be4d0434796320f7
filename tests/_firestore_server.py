"""Start and stop the Firestore server the tests run against.

Which server:

* **The Cloud SDK's official emulator** (a Java server, `tests._emulators`)
  whenever this machine has the SDK with its Firestore emulator and Java.
  It is Firestore's own implementation: it enforces Firestore's limits (a
  query value over 1,500 bytes, a document over 1 MiB, an id over 1,500
  bytes) and its integer and ordering rules, which the npm server does not.
* **The npm ``@firestore-emulator/server``** (an in-memory gRPC implementation
  of the Firestore v1 API, pinned in ``tools/firestore-emulator`` and installed
  with ``npm ci`` on first use) *only* when the SDK or Java is absent, i.e.
  when probing for them raises `EmulatorError`, or when
  ``BEAM_AGENTS_NO_CLOUD_SDK=1`` hides the SDK to prove the fallback passes. An
  official emulator that is installed but fails to start is a test failure,
  never a silent fallback.

The choice is made once per process (`server_kind`): every server a test run
starts is of that kind, so outage tests stop and restart the kind the rest of
the suite uses. When ``FIRESTORE_EMULATOR_HOST`` already points at a server,
the tests use it as is; private servers (outage tests, which must kill
theirs) follow its kind when it is an npm server, and are official otherwise.

Servers and their cost (the official emulator takes ~2-3.5 s to start, the npm
one ~0.2 s):

* one **shared** server per session (`firestore_host`), for every test that
  only needs a Firestore; tests isolate themselves by unique project ids;
* one **private** server (`private_firestore_server`) for the tests that take
  the store away: stopped and restarted on its port by each of them, shared
  between them so that a run starts it once plus once per outage.

`usage_line` says which server a run used and how many starts it cost;
tests/conftest.py prints it in the terminal summary.

The npm launcher binds the gRPC server to 127.0.0.1 only and lets the OS pick
the port; it relies on the server object's ``server`` field, stable in the
pinned version (a version bump that breaks this fails loudly).

Failures raise `FirestoreServerError` naming what is missing. Fixtures turn it
into a test *failure*: CI must run the Firestore tests, so they never skip.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests._emulators import (
    FIRESTORE,
    Emulator,
    EmulatorError,
    accepts_connections,
    stop_process_group,
)

__all__ = [
    "EMULATOR_HOST_ENV",
    "NO_CLOUD_SDK_ENV",
    "FirestoreServer",
    "FirestoreServerError",
    "ServerKind",
    "firestore_host",
    "firestore_server",
    "private_firestore_process",
    "private_firestore_server",
    "server_kind",
    "shared_firestore_host",
    "usage_line",
]

EMULATOR_HOST_ENV = "FIRESTORE_EMULATOR_HOST"
#: Set to 1 to run on the npm server although the Cloud SDK is installed.
NO_CLOUD_SDK_ENV = "BEAM_AGENTS_NO_CLOUD_SDK"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / "tools" / "firestore-emulator"
_PACKAGE = "@firestore-emulator/server"
_READY_MARK = "BEAM_AGENTS_FIRESTORE_LISTENING"
_START_TIMEOUT_S = 30.0
_NPM_TIMEOUT_S = 300.0
# The server the run was pointed at before any fixture exported its own.
_EXTERNAL_HOST = os.environ.get(EMULATOR_HOST_ENV) or None

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


# -- which server --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerKind:
    """The kind of server this process starts.

    Attributes:
        official: The Cloud SDK's emulator; otherwise the npm server.
        fallback: Why the npm server is used (empty for the official one).
    """

    official: bool
    fallback: str = ""

    def describe(self) -> str:
        if self.official:
            return "official Cloud SDK emulator (java)"
        return f"npm {_PACKAGE} (fallback: {self.fallback})"


def _probe_kind(host: str) -> str | None:
    """``"official"``, ``"npm"`` or None (unreachable): what serves `host`.

    The official emulator answers ``GET /`` with ``Ok``; the npm server speaks
    only HTTP/2 (gRPC), so an HTTP/1.1 request gets no valid status line.
    """
    address, _, port = host.rpartition(":")
    connection = http.client.HTTPConnection(address or "127.0.0.1", int(port), timeout=2)
    try:
        connection.request("GET", "/")
        answer = connection.getresponse()
        return "official" if answer.status == 200 and answer.read(2) == b"Ok" else "npm"
    except (http.client.HTTPException, ConnectionResetError):
        return "npm"
    except OSError:
        return None
    finally:
        connection.close()


@functools.cache
def server_kind() -> ServerKind:
    """The official emulator if the Cloud SDK and Java are here; npm only if they are not."""
    if os.environ.get(NO_CLOUD_SDK_ENV, "") not in ("", "0"):
        return ServerKind(official=False, fallback=f"{NO_CLOUD_SDK_ENV}=1 hides the Cloud SDK")
    if _EXTERNAL_HOST is not None and _probe_kind(_EXTERNAL_HOST) == "npm":
        return ServerKind(official=False,
                          fallback=f"{EMULATOR_HOST_ENV}={_EXTERNAL_HOST} is an npm server")
    try:
        FIRESTORE.jar()
        if shutil.which("java") is None:
            raise EmulatorError("`java` is not on PATH; the official emulator needs Java 11+")
    except EmulatorError as exc:
        return ServerKind(official=False, fallback=str(exc).splitlines()[0])
    return ServerKind(official=True)


# -- what a run used -------------------------------------------------------------------


@dataclass
class _Usage:
    """What the run's servers cost, for `usage_line`."""

    host: str = ""  # the shared server (or the external one)
    starts: dict[str, int] = field(default_factory=lambda: {"shared": 0, "private": 0})
    seconds: float = 0.0
    private_servers: int = 0

    def started(self, role: str, seconds: float) -> None:
        self.starts[role] += 1
        self.seconds += seconds


_USAGE = _Usage()


def usage_line() -> str | None:
    """One line naming the server the run used and its starts; None if it used none."""
    starts = _USAGE.starts
    if not _USAGE.host and not starts["private"]:
        return None
    if _EXTERNAL_HOST is not None and _USAGE.host == _EXTERNAL_HOST:
        probed = {"official": "official Cloud SDK emulator", "npm": f"npm {_PACKAGE}"}.get(
            _probe_kind(_EXTERNAL_HOST) or "", "server (not answering now)")
        where = f"external {probed} at {_EXTERNAL_HOST} ({EMULATOR_HOST_ENV})"
        if starts["private"]:
            where += f"; private servers: {server_kind().describe()}"
    else:
        where = f"{server_kind().describe()} at {_USAGE.host or '(no shared server)'}"
    return (f"firestore server: {where}; {starts['shared']} shared + {starts['private']} "
            f"private starts ({_USAGE.private_servers} private server(s)), "
            f"{_USAGE.seconds:.1f} s starting")


# -- the servers ---------------------------------------------------------------------------


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise FirestoreServerError(
            f"`{name}` is not on PATH. Without the Cloud SDK's Firestore emulator and Java, "
            f"the Firestore tests need Node.js >= 18 with npm to run the pinned {_PACKAGE} "
            f"(tools/firestore-emulator); install one of them, or point "
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


class _NpmServer:
    """The npm server's process on 127.0.0.1; `stop` and `start` keep its port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
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
            if port is not None and accepts_connections(port):
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
        process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            process.stdin.close()
        if process is not None:
            stop_process_group(process, self.port)
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None


# What the stores do, once each: a lookup, a two-equality query, a transaction
# (begin, batch get, commit) and a create. The emulator's first request of a
# kind after a start takes 0.3-5 s (class loading, JIT), longer than the
# deadlines of outage tests and chaos stores (0.5-1.5 s); later ones take
# milliseconds.
_WARM_UP_PROJECT = "beam-agents-warm-up"
_WARM_UP_QUERY = {"structuredQuery": {
    "from": [{"collectionId": "warm_up"}],
    "where": {"compositeFilter": {"op": "AND", "filters": [
        {"fieldFilter": {"field": {"fieldPath": "entity_key_hex"}, "op": "EQUAL",
                         "value": {"stringValue": "00"}}},
        {"fieldFilter": {"field": {"fieldPath": "seq"}, "op": "EQUAL",
                         "value": {"integerValue": "0"}}}]}}}}


def _rest(url: str, body: Mapping[str, object] | None = None) -> object:
    """One call of the emulator's REST API (the same engine serves gRPC); its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=_START_TIMEOUT_S) as answer:
            return json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        if exc.code != 404:  # the lookup finds nothing, as it should
            raise
        return None


def _warm_up(host: str) -> None:
    """Serve each kind of request the stores make once, so tests meet a warm server."""
    database = f"projects/{_WARM_UP_PROJECT}/databases/(default)"
    base = f"http://{host}/v1/{database}/documents"
    document = f"{database}/documents/warm_up/{time.monotonic_ns()}"
    _rest(f"{base}/warm_up/absent")
    _rest(f"{base}:runQuery", _WARM_UP_QUERY)
    begun = _rest(f"{base}:beginTransaction", {})
    transaction = begun["transaction"] if isinstance(begun, dict) else None
    _rest(f"{base}:batchGet", {"documents": [document], "transaction": transaction})
    _rest(f"{base}:commit", {"transaction": transaction, "writes": [
        {"update": {"name": document, "fields": {"seq": {"integerValue": "1"}}}}]})
    _rest(f"{base}:commit", {"writes": [
        {"update": {"name": document + "-created", "fields": {"seq": {"integerValue": "1"}}},
         "currentDocument": {"exists": False}}]})


class _OfficialServer:
    """The Cloud SDK's emulator (`tests._emulators.Emulator`) behind the same interface."""

    def __init__(self, port: int) -> None:
        self._emulator = Emulator(FIRESTORE, port=port)

    @property
    def port(self) -> int:
        return self._emulator.port

    @property
    def running(self) -> bool:
        return self._emulator.running

    def start(self) -> None:
        try:
            self._emulator.start()
            _warm_up(self._emulator.host)
        except EmulatorError as exc:
            raise FirestoreServerError(str(exc)) from exc
        except OSError as exc:
            self._emulator.stop()
            raise FirestoreServerError(
                f"the Firestore emulator did not answer its warm-up requests: {exc}") from exc

    def stop(self) -> None:
        self._emulator.stop()


class FirestoreServer:
    """One server on 127.0.0.1, of this process's `server_kind`; `stop` + `start` keep its port.

    Keeping the port lets a test take the server away and bring it back, which is
    how the Firestore backend's outage tests simulate an unreachable store.
    Neither kind keeps data across a stop.

    Args:
        port: The port; 0 picks one.
        role: ``"shared"`` or ``"private"``, for `usage_line`.
    """

    def __init__(self, *, port: int = 0, role: str = "private") -> None:
        self.kind = server_kind()
        self.role = role
        self._impl: _NpmServer | _OfficialServer = (
            _OfficialServer(port) if self.kind.official else _NpmServer(port))

    @property
    def port(self) -> int:
        return self._impl.port

    @property
    def host(self) -> str:
        """``host:port`` for ``FIRESTORE_EMULATOR_HOST``."""
        if self._impl.port == 0:
            raise FirestoreServerError("the server has not been started")
        return f"127.0.0.1:{self._impl.port}"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._impl.running

    def start(self) -> str:
        """Start the process, wait until it accepts connections, return ``host:port``."""
        if self.running:
            return self.host
        started = time.monotonic()
        self._impl.start()
        _USAGE.started(self.role, time.monotonic() - started)
        return self.host

    def stop(self) -> None:
        """Stop the process (TERM, then KILL) and wait until its port is closed; idempotent."""
        self._impl.stop()


# -- shared and private servers for fixtures ----------------------------------------------


@contextlib.contextmanager
def firestore_server() -> Iterator[str]:
    """Yield ``host:port`` of a Firestore server for the duration of the block.

    When ``FIRESTORE_EMULATOR_HOST`` is already set, that server is used as is
    and nothing is started. Otherwise a server is started and stopped on exit,
    also when the block raises.
    """
    existing = os.environ.get(EMULATOR_HOST_ENV)
    if existing:
        _USAGE.host = existing
        yield existing
        return
    server = FirestoreServer(role="shared")
    try:
        _USAGE.host = server.start()
        yield server.host
    finally:
        server.stop()


class _Refcounted:
    """One resource for all users at once: the first `acquire` opens it, the last release closes."""

    def __init__(self, opener: Callable[[contextlib.ExitStack], object]) -> None:
        self._opener = opener
        self._lock = threading.Lock()
        self._users = 0
        self._stack: contextlib.ExitStack | None = None
        self._value: object = None

    def acquire(self) -> object:
        with self._lock:
            if self._stack is None:
                stack = contextlib.ExitStack()
                try:
                    self._value = self._opener(stack)
                except BaseException:
                    stack.close()
                    raise
                self._stack = stack
            self._users += 1
            return self._value

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._stack is not None:
                stack, self._stack = self._stack, None
                stack.close()


_SHARED = _Refcounted(lambda stack: stack.enter_context(firestore_server()))


def _open_private(stack: contextlib.ExitStack) -> FirestoreServer:
    server = FirestoreServer(role="private")
    stack.callback(server.stop)
    _USAGE.private_servers += 1
    return server


_PRIVATE = _Refcounted(_open_private)


@contextlib.contextmanager
def shared_firestore_host() -> Iterator[str]:
    """Like :func:`firestore_server`, but one server for every concurrent user.

    The Firestore test packages each have a session fixture; when several run
    in one session they share a single process through this reference count,
    and the last user stops it.
    """
    host = _SHARED.acquire()
    assert isinstance(host, str)
    try:
        yield host
    finally:
        _SHARED.release()


def _fail(exc: FirestoreServerError) -> None:
    pytest.fail(f"the Firestore test server is required and could not start: {exc}",
                pytrace=False)


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
        problem = exc
    if problem is not None:
        _fail(problem)


@pytest.fixture(scope="session")
def private_firestore_process() -> Iterator[FirestoreServer]:
    """Session fixture: the private server (not yet started); see `private_firestore_server`.

    Conftests import it with `private_firestore_server`. One process serves
    every package's private tests: the reference count stops it when the last
    session fixture ends.
    """
    server = _PRIVATE.acquire()
    assert isinstance(server, FirestoreServer)
    try:
        yield server
    finally:
        _PRIVATE.release()


@pytest.fixture
def private_firestore_server(private_firestore_process: FirestoreServer,
                             monkeypatch: pytest.MonkeyPatch) -> FirestoreServer:
    """A running server no other fixture uses, exported as FIRESTORE_EMULATOR_HOST.

    For tests that stop and restart their server (outages); private also when
    ``FIRESTORE_EMULATOR_HOST`` names a server, which must not be killed. One
    process, of the run's `server_kind`, serves every such test of the session:
    each gets it running (started if it is not, e.g. after an earlier test
    left it stopped) and may stop and restart it. It keeps data between tests
    until it is stopped, so tests use unique project ids, as on the shared server.
    """
    try:
        monkeypatch.setenv(EMULATOR_HOST_ENV, private_firestore_process.start())
    except FirestoreServerError as exc:
        _fail(exc)
    return private_firestore_process
