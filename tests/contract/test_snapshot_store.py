"""The `SnapshotStore` contract, on every backend: a folder (local, and through Beam's
filesystems) and a Firestore collection on the official emulator.

What a batch run relies on: a part appears whole or not at all, the manifest
is replaced in one write, a generation's records come back byte for byte in
any part size, a part that is not what the manifest lists is refused by name,
and cleanup keeps what it is told to keep.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from beam_agents.errors import StateCorruptError
from beam_agents.hosting import (
    Manifest,
    PartInfo,
    SnapshotStore,
    SnapshotWriter,
    commit_snapshot,
    read_manifest,
    read_part,
)
from beam_agents.stores import FirestoreSnapshotConfig, snapshot_config_from_uri

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(params=("local", "beam", "firestore"))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SnapshotStore]:
    """A fresh, empty snapshot store of each backend."""
    opened: SnapshotStore
    if request.param == "firestore":
        request.getfixturevalue("firestore_host")
        opened = FirestoreSnapshotConfig(project=f"snap-{uuid.uuid4().hex[:12]}",
                                         collection="state").open()
    elif request.param == "beam":
        from beam_agents.beam._snapshot import BeamFiles  # noqa: PLC0415 - Beam only here

        opened = snapshot_config_from_uri(str(tmp_path / "state"), files=BeamFiles()).open()
    else:
        opened = snapshot_config_from_uri(str(tmp_path / "state")).open()
    yield opened
    opened.close()


def records(count: int, size: int = 40) -> list[bytes]:
    return [f"{n:06d}".encode() + bytes([n % 251]) * size for n in range(count)]


def write(store: SnapshotStore, generation: str, data: list[bytes], *,
          max_part_bytes: int = 1 << 20, infos: bool = False) -> list[PartInfo]:
    writer = SnapshotWriter(store, generation, max_part_bytes=max_part_bytes,
                            record_infos=infos)
    parts = [part for record in data for part in writer.add(record)]
    return parts + writer.close()


def read_all(store: SnapshotStore, manifest: Manifest) -> list[bytes]:
    return [record for part in manifest.parts
            for record in read_part(store, manifest.generation, part)]


def test_records_come_back_byte_for_byte_across_parts(store: SnapshotStore) -> None:
    """Rolling parts and (in Firestore) chunks change nothing a reader sees."""
    data = records(300, size=3000)  # ~1.2 MB: several parts, several 512 KiB chunks
    parts = write(store, "g1", data, max_part_bytes=400_000)
    assert len(parts) >= 3
    assert read_manifest(store) is None
    manifest = commit_snapshot(store, generation="g1", parts=parts, previous=None,
                               writer="test", now_ms=1)
    assert read_manifest(store) == manifest
    assert manifest.keys == 300
    assert sorted(read_all(store, manifest)) == data


def test_a_new_commit_replaces_the_old_and_keeps_only_it_and_its_previous(
        store: SnapshotStore) -> None:
    """g3's commit keeps g2 (readers may still be on it) and removes g1."""
    first = commit_snapshot(store, generation="g1", parts=write(store, "g1", records(3)),
                            previous=None, writer="test", now_ms=1)
    second = commit_snapshot(store, generation="g2", parts=write(store, "g2", records(4)),
                             previous="g1", writer="test", now_ms=2)
    third = commit_snapshot(store, generation="g3", parts=write(store, "g3", records(5)),
                            previous="g2", writer="test", now_ms=3)
    assert read_manifest(store) == third
    assert len(read_all(store, second)) == 4
    with pytest.raises(StateCorruptError, match="missing"):
        read_all(store, first)


def test_parts_of_failed_attempts_are_never_listed_and_are_pruned(store: SnapshotStore) -> None:
    """Only the parts a commit names count; the rest of its generation goes."""
    kept = write(store, "g1", records(5))
    orphan = write(store, "g1", records(7))  # a bundle attempt that failed after writing
    abandoned = SnapshotWriter(store, "g1")
    abandoned.add(b"never closed")
    abandoned.abort()
    manifest = commit_snapshot(store, generation="g1", parts=kept, previous=None,
                               writer="test", now_ms=1)
    assert len(read_all(store, manifest)) == 5
    stray = Manifest(generation="g1", parts=tuple(orphan), written_at_ms=0, writer="t")
    with pytest.raises(StateCorruptError, match="missing"):
        read_all(store, stray)


def test_a_part_other_than_listed_is_refused_by_name(store: SnapshotStore) -> None:
    """A size or digest that differs from the manifest stops the reader."""
    (part,) = write(store, "g1", records(10))
    wrong = PartInfo(name=part.name, keys=part.keys, size_bytes=part.size_bytes,
                     sha256="0" * 64)
    with pytest.raises(StateCorruptError, match=part.name):
        list(read_part(store, "g1", wrong))
    longer = PartInfo(name=part.name, keys=part.keys + 1, size_bytes=part.size_bytes + 10,
                      sha256=part.sha256)
    with pytest.raises(StateCorruptError, match="holds 10 keys"):
        list(read_part(store, "g1", longer))


def test_recorded_infos_list_the_written_parts(store: SnapshotStore) -> None:
    """A committer that cannot receive the parts (the native Flink job) lists them."""
    parts = write(store, "g1", records(50, size=100), max_part_bytes=2_000, infos=True)
    write(store, "g2", records(2), infos=True)
    assert sorted(store.list_infos("g1"), key=lambda p: p.name) == sorted(
        parts, key=lambda p: p.name)
