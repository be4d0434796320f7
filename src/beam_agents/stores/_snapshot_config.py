"""Where a state snapshot lives, as picklable configs, and ``--state_snapshot URI`` to one.

A folder (a path, or ``gs://...`` through Beam's filesystems) or a Firestore
collection (``firestore://COLLECTION``, in ``--firestore_project`` and
``--firestore_database``). Building a config imports no SDK; `open` does,
on the worker.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from beam_agents.backend import SnapshotStore
from beam_agents.errors import ConfigError
from beam_agents.stores._config import check_firestore_settings

__all__ = ["FIRESTORE_SCHEME", "FileSnapshotConfig", "Files", "FirestoreSnapshotConfig",
           "LocalFiles", "snapshot_config_from_uri"]

#: How ``--state_snapshot`` names a Firestore collection.
FIRESTORE_SCHEME = "firestore://"


class Files(Protocol):
    """The few file operations a snapshot needs, on one filesystem; picklable."""

    def join(self, base: str, name: str) -> str:
        """`name` inside folder `base`."""
        ...

    def open_read(self, path: str) -> IO[bytes]:
        """Open for reading; FileNotFoundError when absent."""
        ...

    def open_write(self, path: str) -> IO[bytes]:
        """Create (or truncate) for writing, making parent folders."""
        ...

    def rename(self, source: str, target: str) -> None:
        """Move `source` onto `target`, replacing it in one step."""
        ...

    def delete(self, paths: list[str]) -> None:
        """Delete files or whole folders; absent ones are fine."""
        ...

    def children(self, folder: str) -> list[str]:
        """The names directly inside `folder`; empty when it is absent."""
        ...


@dataclass(frozen=True, slots=True)
class LocalFiles:
    """`Files` on the local filesystem (a shared mount counts)."""

    def join(self, base: str, name: str) -> str:
        """`name` inside `base`."""
        return os.path.join(base, name)

    def open_read(self, path: str) -> IO[bytes]:
        """Open for reading."""
        return open(path, "rb")

    def open_write(self, path: str) -> IO[bytes]:
        """Create for writing, with its folder."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return open(path, "wb")

    def rename(self, source: str, target: str) -> None:
        """`os.replace`: atomic on one filesystem."""
        os.replace(source, target)

    def delete(self, paths: list[str]) -> None:
        """Remove files and folders."""
        import shutil  # noqa: PLC0415 - only cleanup needs it

        for path in paths:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)

    def children(self, folder: str) -> list[str]:
        """Names inside `folder`."""
        try:
            return sorted(os.listdir(folder))
        except FileNotFoundError:
            return []


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSnapshotConfig:
    """A snapshot in folder `root`, reached through `files`; picklable.

    Attributes:
        root: The snapshot's folder: a path, or a URI the `files` understand.
        files: The filesystem; `LocalFiles` by default.
    """

    root: str
    files: Files = field(default_factory=LocalFiles)

    @property
    def where(self) -> str:
        """The folder."""
        return self.root

    def open(self) -> SnapshotStore:
        """Build the store; it opens files as it needs them."""
        from beam_agents.stores.files._snapshot import FileSnapshotStore  # noqa: PLC0415

        return FileSnapshotStore(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class FirestoreSnapshotConfig:
    """A snapshot in Firestore collection `collection`; picklable, no client inside.

    Attributes:
        project: Google Cloud project id.
        database: Firestore database id.
        collection: The collection the snapshot owns: nothing else may live in it.
    """

    project: str
    database: str = "(default)"
    collection: str = "beam_agents_state"

    def __post_init__(self) -> None:
        check_firestore_settings("FirestoreSnapshotConfig", project=self.project,
                                 database=self.database, collection=self.collection,
                                 timeout_ms=60_000)

    @property
    def where(self) -> str:
        """``firestore://COLLECTION`` with its project and database."""
        return (f"firestore://{self.collection} (project {self.project}, database "
                f"{self.database})")

    def open(self) -> SnapshotStore:
        """Build the store; its client connects on first use."""
        from beam_agents.stores.firestore._snapshot import (  # noqa: PLC0415 - SDK on use
            FirestoreSnapshotStore,
        )

        return FirestoreSnapshotStore(self)




def snapshot_config_from_uri(
    uri: str, *, project: str | None = None, database: str | None = None,
    files: Files | None = None,
) -> FileSnapshotConfig | FirestoreSnapshotConfig:
    """``--state_snapshot URI`` -> its config.

    Args:
        uri: ``firestore://COLLECTION``, or a folder.
        project: ``--firestore_project``, for a collection.
        database: ``--firestore_database``, for a collection.
        files: The filesystem of a folder; `LocalFiles` by default.

    Raises:
        ConfigError: an empty URI, or a collection without a project; names the flag.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise ConfigError("--state_snapshot must name a folder or firestore://COLLECTION, "
                          f"got {uri!r}", field="state_snapshot")
    if uri.startswith(FIRESTORE_SCHEME):
        collection = uri.removeprefix(FIRESTORE_SCHEME).strip("/")
        if not project:
            raise ConfigError(f"--state_snapshot {uri} needs --firestore_project",
                              field="firestore_project")
        return FirestoreSnapshotConfig(project=project, database=database or "(default)",
                                       collection=collection)
    return FileSnapshotConfig(root=uri.rstrip("/") or "/", files=files or LocalFiles())
