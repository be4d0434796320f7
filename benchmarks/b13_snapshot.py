"""B13. The state snapshot's cost: writing and reading 10,000 keys, and its share of a batch run.

A batch run with ``--state_snapshot`` reads every key's record at its start
and writes every key's record at its end (docs/operations.md, "State between
batch runs"). Two measurements:

* **Per 10,000 keys, files store.** Real records: a ``beam-agents run`` of
  the README's ``chat`` agent (a ring of 20 turns in working memory, one
  model call per event) leaves 1,000 keys' records after 10 events each;
  they are copied under 10 names each, 10,000 keys in all. Writing is
  `SnapshotWriter` over them plus `commit_snapshot` (the manifest, written
  atomically); reading is `read_manifest`, every part checked whole by
  `read_part`, and each record parsed and restored into fresh cells
  (`restore_key`), as a run's hosts do. The baseline, timed alternating with
  them, is the same records' bytes written to one plain file and read back:
  the ratio is what the format (framing, digests, parts, an atomic commit)
  costs over the bytes themselves.
* **Share of a batch run.** ``beam-agents run`` at 1,000 keys x 10 events
  (the local model at 0 ms, so the run is the library's own work), with
  and without ``--state_snapshot``, alternating run by run. The runs with it
  read the previous generation (seeded once, untimed) and write the next:
  the steady state of a daily batch. The share is (with - without) / with;
  beside it, the store's own write and read at the batch's key count (from
  the first measurement) as a share of the run, which a loaded machine's
  run-to-run noise does not swamp.

No target: the share is what a user pays for state that carries between
runs, reported so a change that makes it grow is seen.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from beam_agents.hosting import (
    KeyStateSnapshot,
    SnapshotWriter,
    commit_snapshot,
    parse_record,
    read_manifest,
    read_part,
    restore_key,
)
from beam_agents.stores import FileSnapshotConfig
from benchmarks._cli import event_line, run_cli
from benchmarks._harness import Profile, interleaved, ratios, stat

__all__ = ["run"]

_AGENT = "benchmarks._agents:chat"
_FLAGS = ["--agent", _AGENT, "--model_latency_ms", "0"]
_T0 = 1_767_225_600_000
#: Keys per snapshot measurement, as the result's unit says.
_KEYS = 10_000


def _lines(keys: int, per_key: int) -> list[bytes]:
    """`keys` keys with `per_key` events each, in event-time order, keys interleaved."""
    return [event_line(f"customer-{index % keys:05d}", index, time_ms=_T0 + index * 1_000)
            for index in range(keys * per_key)]


def _records(folder: Path) -> list[bytes]:
    """Every key's record of the snapshot in `folder`."""
    store = FileSnapshotConfig(root=str(folder)).open()
    try:
        manifest = read_manifest(store)
        assert manifest is not None, f"{folder} holds no snapshot"
        return [record for part in manifest.parts
                for record in read_part(store, manifest.generation, part)]
    finally:
        store.close()


def _widened(records: list[bytes], keys: int) -> list[bytes]:
    """`keys` records: copies of `records` under new entity keys, as many as it takes."""
    out = []
    for index in range(keys):
        record = KeyStateSnapshot.FromString(records[index % len(records)])
        record.entity_key = f"key-{index:06d}".encode()
        out.append(record.SerializeToString(deterministic=True))
    return out


def _snapshot_cases(records: list[bytes], scratch: Path) -> dict[str, Callable[[], None]]:
    """Write and read `records` as a snapshot, and as one plain file (the baseline)."""
    folder = scratch / "snapshot"
    store = FileSnapshotConfig(root=str(folder)).open()
    plain = scratch / "plain.bin"
    previous: list[str | None] = [None]

    def write() -> None:
        generation = f"g-{uuid.uuid4().hex[:12]}"
        writer = SnapshotWriter(store, generation)
        parts = [part for record in records for part in writer.add(record)]
        parts += writer.close()
        commit_snapshot(store, generation=generation, parts=parts, previous=previous[0],
                        writer="b13", now_ms=_T0)
        previous[0] = generation

    def read() -> None:
        manifest = read_manifest(store)
        assert manifest is not None
        count = 0
        for part in manifest.parts:
            for record in read_part(store, manifest.generation, part):
                restore_key(parse_record(record).entity_key, [record])
                count += 1
        assert count == len(records), count

    def write_plain() -> None:
        scratch_file = plain.with_suffix(".tmp")
        scratch_file.write_bytes(b"".join(records))
        scratch_file.replace(plain)

    def read_plain() -> None:
        assert len(plain.read_bytes()) == sum(map(len, records))

    return {"write": write, "read": read, "write_plain": write_plain, "read_plain": read_plain}


def _batch_share(lines: list[bytes], snapshot: Path, reps: int, *,
                 seed: bool) -> dict[str, Any]:
    """Wall seconds of ``beam-agents run`` with and without the snapshot, alternating.

    With `seed`, an untimed first run writes the snapshot, so every timed run
    reads one and writes one; the quick profile skips it (its first timed run
    then only writes), to keep the smoke run short.
    """
    flags = [*_FLAGS, "--state_snapshot", str(snapshot)]
    if seed:
        run_cli(lines, flags)
    with_s: list[float] = []
    without_s: list[float] = []
    for rep in range(reps):
        pair = [(without_s, _FLAGS), (with_s, flags)]
        for sample, run_flags in (pair if rep % 2 == 0 else pair[::-1]):
            sample.append(run_cli(lines, run_flags))
    share = [100 * (w - wo) / w for w, wo in zip(with_s, without_s, strict=True)]
    return {
        "with_snapshot_s": stat(with_s).as_json(2),
        "without_snapshot_s": stat(without_s).as_json(2),
        "ratio_with_to_without": ratios(with_s, without_s).as_json(3),
        "share_percent": stat(share).as_json(1),
    }


def run(profile: Profile) -> dict[str, Any]:
    """Measure B13; see the module docstring."""
    keys, per_key = (50, 4) if profile.quick else (1_000, 10)
    reps = 1 if profile.quick else 3
    with tempfile.TemporaryDirectory(prefix="b13-snapshot-") as folder:
        scratch = Path(folder)
        batch = _batch_share(_lines(keys, per_key), scratch / "run-snapshot", reps,
                             seed=not profile.quick)
        seeded = _records(scratch / "run-snapshot")
        records = _widened(seeded, _KEYS if not profile.quick else 500)
        started = time.perf_counter()
        times = interleaved(_snapshot_cases(records, scratch), reps=profile.reps, inner=1)
        measured_s = time.perf_counter() - started
    per_keys = _KEYS / len(records)
    write_ms = stat(times["write"]).scaled(1e3 * per_keys)
    read_ms = stat(times["read"]).scaled(1e3 * per_keys)
    total_bytes = sum(map(len, records))
    share = batch["share_percent"]
    # The store's own I/O at the batch's size, against the batch's wall time: a
    # figure that holds where the difference of two whole runs is within their noise.
    io_ms = (write_ms.median + read_ms.median) * keys / _KEYS
    io_share = 100 * io_ms / 1e3 / batch["with_snapshot_s"]["median"]
    return {
        "name": "State snapshot cost",
        "workload": (f"files store, {len(records):,} keys' records of the chat agent after "
                     f"{per_key} events ({total_bytes / len(records):,.0f} B each); "
                     f"beam-agents run at {keys:,} keys x {per_key} events, local model 0 ms, "
                     "with and without --state_snapshot, alternating"),
        "unit": "% of a batch run's wall time spent on the snapshot (median)",
        "keys_measured": len(records),
        "record_bytes_mean": round(total_bytes / len(records)),
        "write_ms_per_10k_keys": write_ms.as_json(1),
        "read_ms_per_10k_keys": read_ms.as_json(1),
        "ratio_write_to_plain_file": ratios(times["write"], times["write_plain"]).as_json(2),
        "ratio_read_to_plain_file": ratios(times["read"], times["read_plain"]).as_json(2),
        "batch": {"keys": keys, "events_per_key": per_key, **batch},
        "store_io_ms_at_batch_size": round(io_ms, 1),
        "store_io_share_percent": round(io_share, 2),
        "ratio": share["median"],
        "ratio_min": share["min"],
        "ratio_max": share["max"],
        "measure_s": round(measured_s, 1),
        "note": (f"Per {_KEYS:,} keys: write {write_ms.median:.0f} ms "
                 f"[{write_ms.min:.0f}-{write_ms.max:.0f}], read and restore "
                 f"{read_ms.median:.0f} ms [{read_ms.min:.0f}-{read_ms.max:.0f}]. A batch run "
                 f"of {keys:,} keys x {per_key} events took "
                 f"{batch['with_snapshot_s']['median']:.1f} s with the snapshot and "
                 f"{batch['without_snapshot_s']['median']:.1f} s without: "
                 f"{share['median']:.1f} % [{share['min']:.1f}-{share['max']:.1f}] of the run "
                 "(which also holds joining each key's record to its events in the pipeline); "
                 f"the store's own write and read at {keys:,} keys, {io_ms:.0f} ms, are "
                 f"{io_share:.2f} % of it. Where the whole-run difference is within the runs' "
                 "noise (its range spans zero), the store's share is the figure to read."),
    }
