"""A state snapshot in a Firestore collection: a manifest document, and parts cut into chunks.

Documents of the collection:

* ``MANIFEST``: ``{"manifest": <the manifest's JSON>}``, the current generation;
* ``<generation>.<part>.<n>``: ``{"generation", "part", "chunk", "data"}``, the
  part's bytes from ``n * CHUNK_BYTES`` on; a part's chunks are read by id,
  their count following from its size in the manifest, so no query needs an
  index;
* ``<generation>.<part>.info``: ``{"info_of": <generation>, "info": <JSON>}``,
  written after the part's last chunk (native Flink job).

Chunks stay well inside Firestore's 1 MiB document limit, whatever one key's
state weighs (up to about 1.1 MiB: working memory plus the replay cache). A
part is invisible until a manifest lists it, and the manifest is one
document, replaced in one write: a reader sees the old snapshot or the new
one (the `SnapshotStore` contract). The sync ``Client`` reads
``FIRESTORE_EMULATOR_HOST`` itself; this module reads no environment.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud.firestore_v1 import Client
from google.cloud.firestore_v1.base_query import FieldFilter

from beam_agents.backend import PartInfo
from beam_agents.errors import ConfigError, SnapshotUnavailable, StateCorruptError
from beam_agents.stores._snapshot_config import FirestoreSnapshotConfig

__all__ = ["CHUNK_BYTES", "FirestoreSnapshotConfig", "FirestoreSnapshotStore"]

#: Bytes per chunk document: half of Firestore's 1 MiB limit, room for the rest.
CHUNK_BYTES = 512 << 10

#: Deletes and writes per batch: Firestore's limit is 500.
_BATCH = 400

_MANIFEST = "MANIFEST"
_T = TypeVar("_T")


class _Sink:
    """A part written chunk by chunk; a manifest that lists it is what makes it visible."""

    def __init__(self, store: FirestoreSnapshotStore, generation: str, name: str) -> None:
        self._store = store
        self._generation = generation
        self._name = name
        self._buffer = bytearray()
        self._chunks = 0

    def write(self, data: bytes) -> None:
        self._buffer += data
        while len(self._buffer) >= CHUNK_BYTES:
            self._flush(bytes(self._buffer[:CHUNK_BYTES]))
            del self._buffer[:CHUNK_BYTES]

    def _flush(self, data: bytes) -> None:
        self._store.put_chunk(self._generation, self._name, self._chunks, data)
        self._chunks += 1

    def close(self) -> None:
        if self._buffer:
            self._flush(bytes(self._buffer))
            self._buffer.clear()

    def abort(self) -> None:
        self._buffer.clear()  # written chunks are pruned at the next commit


class FirestoreSnapshotStore:
    """A `SnapshotStore` in a Firestore collection (see the module docstring).

    SDK failures become `SnapshotUnavailable`; missing credentials a
    `ConfigError` naming ``firestore_project``.
    """

    def __init__(self, config: FirestoreSnapshotConfig) -> None:
        self._config = config
        self._client: Client | None = None
        self.where = config.where

    def _collection(self) -> Any:
        if self._client is None:
            self._client = Client(project=self._config.project, database=self._config.database)
        return self._client.collection(self._config.collection)

    def _call(self, what: str, work: Callable[[Any], _T]) -> _T:
        try:
            return work(self._collection())
        except auth_exceptions.DefaultCredentialsError as exc:
            raise ConfigError(f"{self.where}: no Google credentials found ({exc})",
                              field="firestore_project") from exc
        except (api_exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError) as exc:
            raise SnapshotUnavailable(f"state snapshot {self.where}: {what} failed: "
                                      f"{exc}") from exc

    def read_manifest(self) -> bytes | None:
        """The MANIFEST document's manifest, or None before the first commit."""
        def work(collection: Any) -> bytes | None:
            found = collection.document(_MANIFEST).get()
            if not found.exists:
                return None
            text = (found.to_dict() or {}).get("manifest")
            if not isinstance(text, str):
                raise StateCorruptError(f"{self.where}: the MANIFEST document holds no "
                                        "'manifest' string", cell="state_snapshot")
            return text.encode()

        return self._call("reading the manifest", work)

    def write_manifest(self, data: bytes) -> None:
        """Replace the MANIFEST document: one write."""
        self._call("writing the manifest",
                   lambda collection: collection.document(_MANIFEST).set(
                       {"manifest": data.decode()}))

    def put_chunk(self, generation: str, name: str, index: int, data: bytes) -> None:
        """Write one chunk document of a part."""
        self._call(f"writing part {name}", lambda collection: collection.document(
            f"{generation}.{name}.{index:06d}").set(
            {"generation": generation, "part": name, "chunk": index, "data": data}))

    def read_part(self, generation: str, part: PartInfo) -> Iterator[bytes]:
        """The part's chunks by id, a batch of ids at a time, in order."""
        count = -(-part.size_bytes // CHUNK_BYTES)
        for first in range(0, count, 16):
            ids = [f"{generation}.{part.name}.{index:06d}"
                   for index in range(first, min(count, first + 16))]

            def work(collection: Any, ids: list[str] = ids) -> list[Any]:
                client = self._client
                assert client is not None
                found = {doc.id: doc for doc in client.get_all(
                    [collection.document(doc_id) for doc_id in ids])}
                return [found.get(doc_id) for doc_id in ids]

            for doc_id, found in zip(ids, self._call(f"reading part {part.name}", work),
                                     strict=True):
                data = None if found is None or not found.exists else (
                    found.to_dict() or {}).get("data")
                if not isinstance(data, bytes):
                    raise StateCorruptError(f"state snapshot {self.where}: chunk {doc_id} "
                                            "is missing; the manifest lists its part",
                                            cell="state_snapshot")
                yield data

    def write_part(self, generation: str, name: str) -> _Sink:
        """A part written in chunk documents."""
        return _Sink(self, generation, name)

    def write_info(self, generation: str, info: PartInfo) -> None:
        """The part's info document, after its chunks."""
        self._call(f"writing the info of part {info.name}", lambda collection: collection.document(
            f"{generation}.{info.name}.info").set(
            {"info_of": generation, "info": json.dumps(info.to_json(), sort_keys=True)}))

    def list_infos(self, generation: str) -> list[PartInfo]:
        """Every info document of the generation (one equality filter: no index needed)."""
        def work(collection: Any) -> list[PartInfo]:
            query = collection.where(filter=FieldFilter("info_of", "==", generation))
            return [PartInfo.from_json(json.loads((doc.to_dict() or {}).get("info", "null")),
                                       where=f"{self.where} {doc.id}")
                    for doc in query.stream()]

        return self._call("listing the parts", work)

    def _delete_where(self, what: str, doomed: Callable[[str, Any], bool]) -> None:
        """Delete every document `doomed(id, fields)` names, reading no part's data."""
        def work(collection: Any) -> None:
            client = self._client
            assert client is not None
            refs = [doc.reference for doc in collection.select(
                ["generation", "part", "info_of"]).stream()
                if doc.id != _MANIFEST and doomed(doc.id, doc.to_dict() or {})]
            for first in range(0, len(refs), _BATCH):
                batch = client.batch()
                for ref in refs[first:first + _BATCH]:
                    batch.delete(ref)
                batch.commit()

        self._call(what, work)

    def delete_generations(self, keep: Iterable[str]) -> None:
        """Delete the chunks and infos of every generation not in `keep`."""
        kept = set(keep)
        self._delete_where("deleting old generations", lambda _, fields: (
            fields.get("generation") or fields.get("info_of")) not in kept)

    def prune_generation(self, generation: str, keep: Iterable[str]) -> None:
        """Delete `generation`'s chunks and infos of parts not in `keep`."""
        kept = set(keep)
        self._delete_where(f"pruning generation {generation}", lambda doc_id, fields: (
            (fields.get("generation") == generation and fields.get("part") not in kept)
            or (fields.get("info_of") == generation
                and doc_id.removeprefix(f"{generation}.").removesuffix(".info") not in kept)))

    def close(self) -> None:
        """Close the client, if one was built."""
        client, self._client = self._client, None
        if client is not None:
            client.close()  # type: ignore[no-untyped-call]
