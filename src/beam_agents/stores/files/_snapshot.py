"""A state snapshot in a folder: a manifest file, and one folder of part files per generation.

Layout under the snapshot's root::

    MANIFEST                     the current generation's manifest (JSON)
    <generation>/<part>          base64 lines, one key's record a line
    <generation>/<part>.info     the part's size, key count and sha256 (native Flink job)

Every write goes to a temporary name first and is renamed into place, so a
part appears whole or not at all, and the manifest is replaced in one
rename: a reader sees the old snapshot or the new one (the `SnapshotStore`
contract). The folder is reached through a `Files`: `LocalFiles` here, and
Beam's ``FileSystems`` (``gs://``, ``s3://``) through
`beam_agents.beam.BeamFiles`, so the core and this module import no Beam.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable, Iterator

from beam_agents.backend import PartInfo
from beam_agents.errors import SnapshotUnavailable, StateCorruptError
from beam_agents.stores._snapshot_config import Files, FileSnapshotConfig

__all__ = ["FileSnapshotStore"]

_MANIFEST = "MANIFEST"
_INFO = ".info"
_CHUNK_BYTES = 1 << 20


class _Sink:
    """A part written to a temporary name, renamed into place on close."""

    def __init__(self, files: Files, path: str) -> None:
        self._files = files
        self._path = path
        self._temp = f"{path}.tmp-{uuid.uuid4().hex}"
        self._handle = files.open_write(self._temp)

    def write(self, data: bytes) -> None:
        self._handle.write(data)

    def close(self) -> None:
        self._handle.close()
        self._files.rename(self._temp, self._path)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self._handle.close()
        self._files.delete([self._temp])


class FileSnapshotStore:
    """A `SnapshotStore` in a folder (see the module docstring).

    An ``OSError`` becomes `SnapshotUnavailable` naming the path; a part the
    manifest lists and the folder lacks, a `StateCorruptError`.
    """

    def __init__(self, config: FileSnapshotConfig) -> None:
        self._files = config.files
        self._root = config.root
        self.where = config.root

    def _path(self, *names: str) -> str:
        path = self._root
        for name in names:
            path = self._files.join(path, name)
        return path

    def _failed(self, what: str, exc: OSError) -> SnapshotUnavailable:
        return SnapshotUnavailable(f"state snapshot {self._root}: {what} failed: {exc}")

    def read_manifest(self) -> bytes | None:
        """The MANIFEST file, or None before the first commit."""
        try:
            with self._files.open_read(self._path(_MANIFEST)) as handle:
                return handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._failed("reading the manifest", exc) from exc

    def write_manifest(self, data: bytes) -> None:
        """Write a temporary manifest, then rename it over MANIFEST."""
        try:
            sink = _Sink(self._files, self._path(_MANIFEST))
            sink.write(data)
            sink.close()
        except OSError as exc:
            raise self._failed("writing the manifest", exc) from exc

    def read_part(self, generation: str, part: PartInfo) -> Iterator[bytes]:
        """The part file's bytes, a MiB at a time."""
        path = self._path(generation, part.name)
        try:
            with self._files.open_read(path) as handle:
                while chunk := handle.read(_CHUNK_BYTES):
                    yield chunk
        except FileNotFoundError as exc:
            raise StateCorruptError(f"state snapshot part {path} is missing; the manifest "
                                    "lists it", cell="state_snapshot") from exc
        except OSError as exc:
            raise self._failed(f"reading {path}", exc) from exc

    def write_part(self, generation: str, name: str) -> _Sink:
        """A part written to a temporary file first."""
        try:
            return _Sink(self._files, self._path(generation, name))
        except OSError as exc:
            raise self._failed(f"writing part {name}", exc) from exc

    def write_info(self, generation: str, info: PartInfo) -> None:
        """``<part>.info`` beside the part."""
        try:
            sink = _Sink(self._files, self._path(generation, info.name + _INFO))
            sink.write(json.dumps(info.to_json(), sort_keys=True).encode())
            sink.close()
        except OSError as exc:
            raise self._failed(f"writing the info of part {info.name}", exc) from exc

    def list_infos(self, generation: str) -> list[PartInfo]:
        """Every ``.info`` file of the generation."""
        infos = []
        try:
            for name in self._files.children(self._path(generation)):
                if name.endswith(_INFO):
                    with self._files.open_read(self._path(generation, name)) as handle:
                        doc = json.loads(handle.read())
                    infos.append(PartInfo.from_json(doc, where=self._path(generation, name)))
        except OSError as exc:
            raise self._failed("listing the parts", exc) from exc
        return infos

    def delete_generations(self, keep: Iterable[str]) -> None:
        """Delete every generation folder not in `keep` (temporary manifests too)."""
        kept = set(keep) | {_MANIFEST}
        try:
            doomed = [self._path(name) for name in self._files.children(self._root)
                      if name not in kept]
            self._files.delete(doomed)
        except OSError as exc:
            raise self._failed("deleting old generations", exc) from exc

    def prune_generation(self, generation: str, keep: Iterable[str]) -> None:
        """Delete files of `generation` besides the parts in `keep` (failed attempts')."""
        kept = set(keep)
        try:
            doomed = [self._path(generation, name)
                      for name in self._files.children(self._path(generation))
                      if name not in kept]
            self._files.delete(doomed)
        except OSError as exc:
            raise self._failed(f"pruning generation {generation}", exc) from exc

    def close(self) -> None:
        """Nothing is held open between calls."""
