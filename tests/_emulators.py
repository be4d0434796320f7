"""Start and stop the Cloud SDK's official emulators (Firestore, Pub/Sub) for tests.

Both are Java servers shipped with the Google Cloud SDK. They run offline and
need no credentials; the clients reach them through ``FIRESTORE_EMULATOR_HOST``
and ``PUBSUB_EMULATOR_HOST``. The jars are run directly rather than through
``gcloud emulators``, which adds a Python wrapper, forwards signals badly and
(for Pub/Sub) needs ``beta``.

* **Port.** Given port 0 the emulators report ``:0`` instead of the port they
  bound, so the port is chosen here; a stop and a start keep it, which is how
  outage tests take a store away and bring it back.
* **Ready.** When the ready line has been printed *and* a TCP connect succeeds.
* **Stop.** Each server runs in its own session; `Emulator.stop` sends SIGTERM
  to its process group, then SIGKILL after ~5 s.

A missing SDK or Java raises `EmulatorError` naming what is missing; callers
decide whether to fall back (Firestore has the npm server) or fail (Pub/Sub).
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FIRESTORE",
    "PUBSUB",
    "Emulator",
    "EmulatorError",
    "EmulatorKind",
    "accepts_connections",
    "free_port",
    "running",
    "sdk_root",
    "stop_process_group",
]

_START_TIMEOUT_S = 60.0
_STOP_GRACE_S = 5.0


class EmulatorError(RuntimeError):
    """An official emulator is missing or could not start."""


@dataclass(frozen=True, slots=True)
class EmulatorKind:
    """How to find, start and recognise one emulator of the SDK.

    Attributes:
        name: For messages.
        host_env: The environment variable its clients read.
        jar_glob: The jar, relative to the SDK root.
        ready_line: Printed once the server listens.
    """

    name: str
    host_env: str
    jar_glob: str
    ready_line: str

    def jar(self) -> Path:
        """The emulator's jar in this machine's Cloud SDK."""
        root = sdk_root()
        found = sorted(root.glob(self.jar_glob))
        if not found:
            raise EmulatorError(
                f"the {self.name} emulator is not installed in the Cloud SDK at {root} "
                f"(no {self.jar_glob}); install the SDK component that ships it")
        return found[-1]

    def command(self, java: str, port: int) -> list[str]:
        """The argv that starts it on 127.0.0.1:`port`."""
        jar = str(self.jar())
        if self is FIRESTORE:
            return [java, "-Duser.language=en", "-cp", jar,
                    "com.google.cloud.datastore.emulator.firestore.CloudFirestore",
                    "start", "--host=127.0.0.1", f"--port={port}"]
        return [java, "-jar", jar, "--host=127.0.0.1", f"--port={port}"]


FIRESTORE = EmulatorKind(
    name="Firestore", host_env="FIRESTORE_EMULATOR_HOST",
    jar_glob="platform/cloud-firestore-emulator/cloud-firestore-emulator.jar",
    ready_line="Dev App Server is now running")
PUBSUB = EmulatorKind(
    name="Pub/Sub", host_env="PUBSUB_EMULATOR_HOST",
    jar_glob="platform/pubsub-emulator/lib/cloud-pubsub-emulator-*-all.jar",
    ready_line="Server started, listening on")


@functools.cache
def sdk_root() -> Path:
    """The Cloud SDK's root, as ``gcloud info`` reports it."""
    gcloud = shutil.which("gcloud")
    if gcloud is None:
        raise EmulatorError("`gcloud` is not on PATH: the Google Cloud SDK is not installed")
    done = subprocess.run(
        [gcloud, "info", "--format=value(installation.sdk_root)"],
        capture_output=True, text=True, timeout=60, check=False)
    root = done.stdout.strip()
    if done.returncode != 0 or not root:
        raise EmulatorError(f"`gcloud info` did not report the SDK root: {done.stderr[-500:]}")
    return Path(root)


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise EmulatorError("`java` is not on PATH; the official emulators need Java 11 or later")
    return java


#: Ports handed out by this process, never handed out twice.
_GIVEN: set[int] = set()
_PICK = random.SystemRandom()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 where it is unreadable)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def free_port() -> int:
    """A port free on 127.0.0.1 right now, for a server that cannot pick its own.

    Chosen below the kernel's ephemeral range: a port from ``bind(0)`` is one
    the kernel also gives to outgoing connections, and between this pick and
    the server's own bind (seconds, for a JVM on a busy machine) a client's
    connection can take it; CI saw Kafka fail to start with "Address already in
    use" that way. Below the range, only an explicit bind takes a port, and the
    pick is random across processes and unique within this one.
    """
    low = _ephemeral_low()
    if low > 12000:
        for _ in range(500):
            port = _PICK.randrange(10000, low)
            if port in _GIVEN:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _GIVEN.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        chosen: int = sock.getsockname()[1]
        _GIVEN.add(chosen)
        return chosen


def accepts_connections(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Emulator:
    """One official emulator process on 127.0.0.1; `stop` then `start` keeps its port."""

    def __init__(self, kind: EmulatorKind, *, port: int = 0) -> None:
        self.kind = kind
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    @property
    def host(self) -> str:
        """``host:port``, for the kind's ``*_EMULATOR_HOST`` variable."""
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> str:
        """Start the server and wait until it is ready; returns ``host:port``."""
        if self.running:
            return self.host
        command = self.kind.command(_java(), self.port)
        fd, log_name = tempfile.mkstemp(prefix=f"{self.kind.host_env.lower()}-", suffix=".log")
        self._log_path = Path(log_name)
        with os.fdopen(fd, "wb") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        try:
            self._await_ready()
        except BaseException:
            self.stop()
            raise
        return self.host

    def _await_ready(self) -> None:
        assert self._process is not None and self._log_path is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        printed = False
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmulatorError(
                    f"the {self.kind.name} emulator exited with code "
                    f"{self._process.returncode} during start:\n{self.log_tail()}")
            printed = printed or self.kind.ready_line in self._log_path.read_text(
                errors="replace")
            if printed and accepts_connections(self.port):
                return
            time.sleep(0.05)
        raise EmulatorError(
            f"the {self.kind.name} emulator was not ready on port {self.port} within "
            f"{_START_TIMEOUT_S:.0f}s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        """The end of the server's log, for failure messages."""
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        return self._log_path.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after ~5 s, wait for the port to close."""
        process, self._process = self._process, None
        if process is not None:
            stop_process_group(process, self.port)
        if self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None


def stop_process_group(process: subprocess.Popen[bytes], port: int) -> None:
    """End a server started in a session of its own, and wait until `port` is closed.

    SIGTERM to its process group, SIGKILL after ~5 s: the process and all it
    spawned. The port check keeps a restart on the same port from racing the
    old server.
    """
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=_STOP_GRACE_S)
    deadline = time.monotonic() + _STOP_GRACE_S
    while port and time.monotonic() < deadline and accepts_connections(port):
        time.sleep(0.05)


@contextlib.contextmanager
def running(kind: EmulatorKind) -> Iterator[Emulator]:
    """A started emulator of `kind` for the block, stopped on the way out."""
    emulator = Emulator(kind)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()
