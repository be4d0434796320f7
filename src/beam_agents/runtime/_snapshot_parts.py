"""A state snapshot's parts and manifest, the store port that keeps them, and how to write one.

The records of `beam_agents.runtime._snapshot` are written as lines (base64,
one record a line) into parts, which any worker writes and any worker reads:
a writer starts a new part past `PART_MAX_BYTES`, so reading scales with the
workers. A generation's manifest (`Manifest`, JSON) lists its parts with the
size, key count and sha256 of each, so a part cut short or swapped is
refused by name. A store makes a generation current by writing its manifest
last, in one atomic write (`SnapshotStore.write_manifest`): a run that fails
before that leaves the last good snapshot, and a reader never sees half of
one. The generation before it stays until the next commit, for a reader that
was still reading it. Why: docs/operations.md, "State between batch runs".

Pure, but for the port: the stores in `beam_agents.stores` move the bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from beam_agents.errors import StateCorruptError, UnsupportedSchemaVersionError

__all__ = ["MANIFEST_FORMAT", "MANIFEST_VERSION", "PART_MAX_BYTES", "Manifest", "PartDecoder",
           "PartEncoder", "PartInfo", "PartSink", "SnapshotStore", "SnapshotStoreConfig",
           "SnapshotWriter", "commit_snapshot", "read_manifest", "read_part"]

#: What the manifest's ``format`` says, and the manifest layout's version.
MANIFEST_FORMAT = "beam-agents/state-snapshot"
MANIFEST_VERSION = 1

#: A writer starts a new part past this many bytes, so no part is too big for one reader.
PART_MAX_BYTES = 64 << 20

#: The cell that names a whole snapshot in errors.
_CELL = "state_snapshot"


@dataclass(frozen=True, slots=True, kw_only=True)
class PartInfo:
    """One written part: where it is, how many keys and bytes it holds, and their sha256."""

    name: str
    keys: int
    size_bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The part as the manifest lists it."""
        return {"name": self.name, "keys": self.keys, "bytes": self.size_bytes,
                "sha256": self.sha256}

    @classmethod
    def from_json(cls, doc: Any, *, where: str) -> PartInfo:
        """Read a part as the manifest lists it.

        Raises:
            StateCorruptError: a field is missing or of the wrong type; names it.
        """
        if not isinstance(doc, dict):
            raise StateCorruptError(f"{where}: a part must be a JSON object", cell=_CELL)
        name, keys, size, digest = (doc.get(k) for k in ("name", "keys", "bytes", "sha256"))
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise StateCorruptError(f"{where}: a part's name must be a plain file name, got "
                                    f"{name!r}", cell=_CELL)
        for field, number in (("keys", keys), ("bytes", size)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise StateCorruptError(f"{where}: part {name}: {field!r} must be a count",
                                        cell=_CELL)
        if not isinstance(digest, str) or len(digest) != 64:
            raise StateCorruptError(f"{where}: part {name}: 'sha256' must be 64 hex digits",
                                    cell=_CELL)
        assert isinstance(keys, int) and isinstance(size, int)
        return cls(name=name, keys=keys, size_bytes=size, sha256=digest)


class PartEncoder:
    """Turns records into a part's bytes, one base64 line each, and keeps its `PartInfo`."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._hash = hashlib.sha256()
        self._keys = 0
        self._size = 0

    @property
    def size_bytes(self) -> int:
        """Bytes encoded so far."""
        return self._size

    def encode(self, record: bytes) -> bytes:
        """One record's line, to be written after the lines before it."""
        line = base64.b64encode(record) + b"\n"
        self._hash.update(line)
        self._keys += 1
        self._size += len(line)
        return line

    def info(self) -> PartInfo:
        """What the part holds once every line was written."""
        return PartInfo(name=self._name, keys=self._keys, size_bytes=self._size,
                        sha256=self._hash.hexdigest())


class PartDecoder:
    """Turns a part's bytes, fed in chunks of any size, back into records, and checks them.

    Args:
        part: What the manifest says the part holds.
        where: How errors name the part (its path or document).
    """

    def __init__(self, part: PartInfo, *, where: str) -> None:
        self._part = part
        self._where = where
        self._hash = hashlib.sha256()
        self._size = 0
        self._keys = 0
        self._rest = b""

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The records whose lines `chunk` completes.

        Raises:
            StateCorruptError: a line is not base64, or the part runs past its size.
        """
        self._hash.update(chunk)
        self._size += len(chunk)
        if self._size > self._part.size_bytes:
            raise self._corrupt(f"holds more than the {self._part.size_bytes} bytes the "
                                "manifest lists")
        lines = (self._rest + chunk).split(b"\n")
        self._rest = lines.pop()
        for line in lines:
            self._keys += 1
            try:
                yield base64.b64decode(line, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise self._corrupt(f"line {self._keys} is not base64 ({exc})") from exc

    def finish(self) -> None:
        """Check the part was whole: its size, key count and sha256 as listed.

        Raises:
            StateCorruptError: it was cut short, or its bytes differ.
        """
        if self._rest:
            raise self._corrupt("ends inside a line (cut short)")
        if self._size != self._part.size_bytes or self._keys != self._part.keys:
            raise self._corrupt(f"holds {self._keys} keys in {self._size} bytes; the manifest "
                                f"lists {self._part.keys} keys in {self._part.size_bytes}")
        if self._hash.hexdigest() != self._part.sha256:
            raise self._corrupt("has another sha256 than the manifest lists")

    def _corrupt(self, why: str) -> StateCorruptError:
        return StateCorruptError(f"state snapshot part {self._where} {why}; the snapshot "
                                 "cannot be read, and the run stops before it changes "
                                 "anything", cell=_CELL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    """One generation of a snapshot: its parts, and what wrote it.

    Attributes:
        generation: The generation's id; its parts live under it.
        parts: Every part, as written.
        written_at_ms: When the run that wrote it committed it (wall clock).
        writer: Which host wrote it (``"beam"``, ``"flink"``).
        previous: The generation it replaced, kept until the next commit, or None.
    """

    generation: str
    parts: tuple[PartInfo, ...]
    written_at_ms: int
    writer: str
    previous: str | None = None

    @property
    def keys(self) -> int:
        """Keys in all parts."""
        return sum(part.keys for part in self.parts)

    @property
    def size_bytes(self) -> int:
        """Bytes in all parts."""
        return sum(part.size_bytes for part in self.parts)

    def to_bytes(self) -> bytes:
        """The manifest's JSON."""
        doc = {"format": MANIFEST_FORMAT, "format_version": MANIFEST_VERSION,
               "generation": self.generation, "written_at_ms": self.written_at_ms,
               "writer": self.writer, "previous": self.previous, "keys": self.keys,
               "bytes": self.size_bytes, "parts": [part.to_json() for part in self.parts]}
        return json.dumps(doc, indent=1, sort_keys=True).encode() + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> Manifest:
        """Read a manifest.

        Raises:
            StateCorruptError: not a manifest, or a field is wrong; names it.
            UnsupportedSchemaVersionError: written by a newer version of the library.
        """
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise StateCorruptError(f"{where} is not JSON: {exc}", cell=_CELL) from exc
        if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
            raise StateCorruptError(f"{where} is not a beam-agents state snapshot manifest "
                                    f"(its 'format' is not {MANIFEST_FORMAT!r})", cell=_CELL)
        if doc.get("format_version") != MANIFEST_VERSION:
            version = doc.get("format_version")
            raise UnsupportedSchemaVersionError(
                cell=_CELL, version=version if isinstance(version, int) else -1,
                supported=(MANIFEST_VERSION,))
        generation, parts = doc.get("generation"), doc.get("parts")
        if not isinstance(generation, str) or not generation or "/" in generation:
            raise StateCorruptError(f"{where}: 'generation' must be a plain name", cell=_CELL)
        if not isinstance(parts, list):
            raise StateCorruptError(f"{where}: 'parts' must be a list", cell=_CELL)
        previous = doc.get("previous")
        written = doc.get("written_at_ms")
        return cls(generation=generation,
                   parts=tuple(PartInfo.from_json(part, where=where) for part in parts),
                   written_at_ms=written if isinstance(written, int) else 0,
                   writer=str(doc.get("writer") or "?"),
                   previous=previous if isinstance(previous, str) and previous else None)



class PartSink(Protocol):
    """A part being written; readers never see it before `close` returns."""

    def write(self, data: bytes) -> None:
        """Append bytes."""
        ...

    def close(self) -> None:
        """Make the part whole and visible under its name."""
        ...

    def abort(self) -> None:
        """Drop what was written; the part never appears."""
        ...


@runtime_checkable
class SnapshotStore(Protocol):
    """Where a state snapshot's manifest and parts live: a folder, or a Firestore collection.

    Contract (``tests/contract/test_snapshot_store.py`` holds every backend to it):

    * **Atomic commit.** `write_manifest` replaces the manifest in one write:
      a reader sees the old one or the new one, never a mix. Nothing else
      makes a generation current.
    * **Parts are immutable.** A part appears whole at `PartSink.close`, under
      a name the writer chose unique (a retried writer picks another), and is
      never rewritten.
    * **Cleanup.** `delete_generations` removes every generation but those
      named; `prune_generation` removes what a generation holds besides the
      named parts (those of failed attempts).
    * **Errors.** An unreachable or failing store raises
      `beam_agents.errors.SnapshotUnavailable`; a missing part, a
      `StateCorruptError` naming it.
    * **Lifecycle.** Built from a picklable config on the worker; `close`
      releases its client.

    Attributes:
        where: The snapshot's URI, for messages.
    """

    where: str

    def read_manifest(self) -> bytes | None:
        """The current manifest's bytes, or None before the first commit."""
        ...

    def write_manifest(self, data: bytes) -> None:
        """Make `data` the current manifest, atomically."""
        ...

    def read_part(self, generation: str, part: PartInfo) -> Iterator[bytes]:
        """The part's bytes, in chunks of any size."""
        ...

    def write_part(self, generation: str, name: str) -> PartSink:
        """Start writing part `name` of `generation`."""
        ...

    def write_info(self, generation: str, info: PartInfo) -> None:
        """Record a written part beside it, for a committer that lists them (`list_infos`)."""
        ...

    def list_infos(self, generation: str) -> list[PartInfo]:
        """Every part recorded with `write_info` in `generation`."""
        ...

    def delete_generations(self, keep: Iterable[str]) -> None:
        """Delete every generation not in `keep`."""
        ...

    def prune_generation(self, generation: str, keep: Iterable[str]) -> None:
        """Delete what `generation` holds besides the parts named in `keep`."""
        ...

    def close(self) -> None:
        """Release the client; idempotent."""
        ...


class SnapshotStoreConfig(Protocol):
    """Picklable settings that build a `SnapshotStore` on the worker (no client inside)."""

    @property
    def where(self) -> str:
        """The snapshot's URI."""
        ...

    def open(self) -> SnapshotStore:
        """Build the store."""
        ...


def read_manifest(store: SnapshotStore) -> Manifest | None:
    """The current generation's manifest, or None when the snapshot holds none yet.

    Raises:
        StateCorruptError: it is not a manifest this version reads; names it.
    """
    data = store.read_manifest()
    return None if data is None else Manifest.from_bytes(data, where=f"{store.where} manifest")


def read_part(store: SnapshotStore, generation: str, part: PartInfo) -> Iterator[bytes]:
    """The records of one part, checked whole against the manifest as the last one is read.

    Raises:
        StateCorruptError: the part is missing, cut short, or not as listed.
    """
    decoder = PartDecoder(part, where=f"{store.where}/{generation}/{part.name}")
    for chunk in store.read_part(generation, part):
        yield from decoder.feed(chunk)
    decoder.finish()


class SnapshotWriter:
    """Writes records into parts of one generation, starting a new part past `PART_MAX_BYTES`.

    Args:
        store: Where the parts go.
        generation: The generation being written.
        prefix: Starts every part's name; a random suffix makes each unique,
            so a retried writer never collides with a failed one.
        max_part_bytes: When to start a new part.
        record_infos: Also `SnapshotStore.write_info` each part (for a committer
            that lists them instead of receiving them).
    """

    def __init__(self, store: SnapshotStore, generation: str, *, prefix: str = "part",
                 max_part_bytes: int = PART_MAX_BYTES, record_infos: bool = False,
                 unique: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self._store = store
        self._generation = generation
        self._prefix = prefix
        self._max = max_part_bytes
        self._record_infos = record_infos
        self._unique = unique
        self._sink: PartSink | None = None
        self._encoder: PartEncoder | None = None

    def add(self, record: bytes) -> list[PartInfo]:
        """Write one key's record; returns the parts this closed (past the size)."""
        if self._sink is None or self._encoder is None:
            name = f"{self._prefix}-{self._unique()}"
            self._encoder = PartEncoder(name)
            self._sink = self._store.write_part(self._generation, name)
        self._sink.write(self._encoder.encode(record))
        if self._encoder.size_bytes >= self._max:
            return self.close()
        return []

    def close(self) -> list[PartInfo]:
        """Close the part being written; returns it (none when nothing was written)."""
        sink, encoder, self._sink, self._encoder = self._sink, self._encoder, None, None
        if sink is None or encoder is None:
            return []
        sink.close()
        info = encoder.info()
        if self._record_infos:
            self._store.write_info(self._generation, info)
        return [info]

    def abort(self) -> None:
        """Drop the part being written."""
        sink, self._sink, self._encoder = self._sink, None, None
        if sink is not None:
            sink.abort()


def commit_snapshot(store: SnapshotStore, *, generation: str, parts: Iterable[PartInfo],
                    previous: str | None, writer: str, now_ms: int) -> Manifest:
    """Make `generation` current, then delete all but it and `previous`.

    Args:
        store: The snapshot's store.
        generation: What this run wrote.
        parts: Every part this run's committed work wrote (no failed attempt's).
        previous: The generation this run read, kept for readers still on it.
        writer: Which host wrote it.
        now_ms: The wall clock, for the manifest.
    """
    ordered = tuple(sorted(parts, key=lambda part: part.name))
    manifest = Manifest(generation=generation, parts=ordered, written_at_ms=now_ms,
                        writer=writer, previous=previous)
    store.write_manifest(manifest.to_bytes())
    store.prune_generation(generation, [part.name for part in ordered])
    store.delete_generations([name for name in (generation, previous) if name])
    return manifest
