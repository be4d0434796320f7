"""A key's keyed state as one record, so it outlives a batch run.

A streaming job keeps each key's cells in the runner, and a Flink savepoint
carries them; a batch run starts from whatever its hosts hand it. A state
snapshot (`beam_agents.runtime._snapshot_parts`; docs/operations.md, "State
between batch runs") hands it each key's record:

* **A key's record** (`KeyStateSnapshot`) holds every cell the engine keeps
  for it, by cell name (`cells_by_name`), so a cell added later (pending
  waits) travels without a format change. `snapshot_record` writes it,
  `restore_cells` reads it back into fresh cells.
* **Joined by key.** A host feeds a key's record into the key's stream of
  events with `SNAPSHOT_MARK` in front: a serialized `AgentEvent` never starts
  with a zero byte (field number 0 does not exist), so one grouping by key
  joins state and events on whatever worker holds the key, with no step that
  sees every key.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from google.protobuf.message import DecodeError

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents._proto.snapshot_pb2 import KeyStateSnapshot, StateCellValue
from beam_agents._proto.waits_pb2 import PendingWait
from beam_agents.errors import StateCorruptError, StateError, UnsupportedSchemaVersionError
from beam_agents.metrics import MetricsSink
from beam_agents.runtime._activation import NAMESPACE, count_dead_letter
from beam_agents.runtime._codec import error_to_json
from beam_agents.runtime._engine import KeyCells
from beam_agents.runtime._errors import error_record
from beam_agents.runtime._keyed import Channel, QueueCell, StateCell, StateCells
from beam_agents.runtime._queue import EventQueue
from beam_agents.runtime._waits import PendingWaits

__all__ = ["SNAPSHOT_MARK", "SNAPSHOT_SCHEMA_VERSION", "KeyStateSnapshot", "cells_by_name", "mark",
           "parse_record", "pending_waits", "queued_events", "refuse_events", "restore_cells",
           "restore_key", "snapshot_record", "split_marked"]

#: The version of every `KeyStateSnapshot` this library writes.
SNAPSHOT_SCHEMA_VERSION = 1

#: Marks a key's snapshot record among its AgentEvent bytes (see the module docstring).
SNAPSHOT_MARK = b"\x00"

#: The cell that names a whole snapshot in errors.
_CELL = "state_snapshot"


def cells_by_name(cells: KeyCells) -> dict[str, StateCell | QueueCell]:
    """Every cell of a key, by its name: the fields of `StateCells` and of `KeyCells`.

    Read from the dataclasses' fields, so a cell added to either is in every
    snapshot without a change here.
    """
    named: dict[str, StateCell | QueueCell] = {}
    for holder in dataclasses.fields(cells):
        value = getattr(cells, holder.name)
        if isinstance(value, StateCells):
            named.update({cell.name: getattr(value, cell.name)
                          for cell in dataclasses.fields(value)})
        else:
            named[holder.name] = value
    return named


def _is_bag(cell: StateCell | QueueCell) -> bool:
    return hasattr(cell, "add") and hasattr(cell, "clear")


def snapshot_record(entity_key: bytes, cells: KeyCells) -> bytes:
    """The key's cells as one deterministic `KeyStateSnapshot`; unset cells are left out."""
    record = KeyStateSnapshot(state_schema_version=SNAPSHOT_SCHEMA_VERSION,
                              entity_key=entity_key)
    for name, cell in sorted(cells_by_name(cells).items()):
        value = cell.read()
        if _is_bag(cell):
            items = [bytes(item) for item in value or ()]
            if items:
                record.cells.add(name=name).bag.items.extend(items)
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            record.cells.append(StateCellValue(name=name, number=value))
        else:
            record.cells.append(StateCellValue(name=name, blob=bytes(value)))
    return record.SerializeToString(deterministic=True)


def parse_record(data: bytes, *, where: str = "state snapshot",
                 any_version: bool = False) -> KeyStateSnapshot:
    """Decode one record and check its version.

    Args:
        data: The record.
        where: Names the part in errors.
        any_version: Only route it (its entity key); its key's host checks the rest.

    Raises:
        StateCorruptError: the bytes are not a `KeyStateSnapshot`, or name no entity.
        UnsupportedSchemaVersionError: written by a newer version of the library.
    """
    try:
        record = KeyStateSnapshot.FromString(data)
    except DecodeError as exc:
        raise StateCorruptError(f"{where}: a record is not a KeyStateSnapshot: {exc}",
                                cell=_CELL) from exc
    if not any_version and record.state_schema_version != SNAPSHOT_SCHEMA_VERSION:
        raise UnsupportedSchemaVersionError(cell=_CELL, version=record.state_schema_version,
                                            supported=(SNAPSHOT_SCHEMA_VERSION,))
    if not record.entity_key:
        raise StateCorruptError(f"{where}: a record names no entity", cell=_CELL)
    return record


def restore_cells(cells: KeyCells, record: KeyStateSnapshot) -> None:
    """Write `record`'s cells into `cells` (fresh ones: a key's state before its first event).

    Every cell is checked before the first is written, so a record that fails
    leaves `cells` as they were (invariant 8).

    Raises:
        StateCorruptError: a cell this version does not know, or of the wrong
            kind; names it. Dropping it would lose state, so nothing is restored.
    """
    named = cells_by_name(cells)
    writes: list[tuple[StateCell | QueueCell, Any]] = []
    key = record.entity_key.decode("utf-8", "backslashreplace")
    for value in record.cells:
        cell = named.get(value.name)
        if cell is None:
            raise StateCorruptError(
                f"the state snapshot of entity {key!r} holds cell {value.name!r}, which this "
                f"version of beam-agents does not know (it knows {', '.join(sorted(named))}); "
                "run the version that wrote it", cell=value.name)
        kind = value.WhichOneof("value")
        if (kind == "bag") != _is_bag(cell):
            raise StateCorruptError(f"the state snapshot of entity {key!r} holds cell "
                                    f"{value.name!r} as a {kind or 'nothing'}, which does not "
                                    "fit the cell", cell=value.name)
        writes.append((cell, list(value.bag.items) if kind == "bag" else getattr(value, kind)))
    for cell, stored in writes:
        if isinstance(stored, list):
            bag: Any = cell
            bag.clear()
            for item in stored:
                bag.add(item)
        else:
            cell.write(stored)  # type: ignore[union-attr]


def mark(record: bytes) -> bytes:
    """`record` as an element of its key's stream of AgentEvent bytes."""
    return SNAPSHOT_MARK + record


def split_marked(values: Iterable[bytes]) -> tuple[list[bytes], list[bytes]]:
    """A key's grouped values -> (AgentEvent bytes, snapshot records without their mark)."""
    events: list[bytes] = []
    records: list[bytes] = []
    for value in values:
        data = bytes(value)
        if data[:1] == SNAPSHOT_MARK:
            records.append(data[1:])
        else:
            events.append(data)
    return events, records


def restore_key(entity_key: bytes, records: list[bytes]) -> KeyCells:
    """Fresh cells holding the key's state from its snapshot record(s): there must be one.

    Raises:
        StateError: no single record that restores (two of them, a corrupt
            one, a newer version, a cell this version does not know).
    """
    if len(records) != 1:
        raise StateCorruptError(f"the state snapshot holds {len(records)} records for entity "
                                f"{entity_key!r}; one is expected", cell=_CELL)
    cells = KeyCells.in_process()
    restore_cells(cells, parse_record(records[0]))
    return cells


def refuse_events(entity_key: bytes, events: Iterable[bytes], exc: StateError,
                  metrics: MetricsSink) -> list[tuple[Channel, bytes]]:
    """The STATE_CORRUPT dead letters of a key whose record does not restore (invariant 8).

    Its events never run on other state than its own; each is redrivable once
    the record is repaired, and the host carries the record on as it was.
    """
    lines: list[tuple[Channel, bytes]] = []
    for event in events:
        parsed = AgentEvent.FromString(event)
        record = error_record(exc, stage=ErrorRecord.STAGE_STATE_CORRUPT,
                              entity_key=entity_key, seq=0, event=event,
                              event_id=parsed.event_id, traceback_bytes=0)
        metrics.inc(NAMESPACE, "activations")
        count_dead_letter(metrics, record)
        lines.append(("errors", error_to_json(record)))
    return lines


def queued_events(cells: KeyCells) -> list[AgentEvent]:
    """The key's queued events in the order they will run: what it still owes.

    Read through the queue's own cells (events minus the tombstones of those
    that left), so a person sees exactly what the next run starts with.
    """
    return [AgentEvent.FromString(event)
            for event in EventQueue().events(None, cells.queued)]


def pending_waits(cells: KeyCells) -> tuple[PendingWait, ...]:
    """The key's pending waits, oldest first; empty when it waits for nothing.

    Raises:
        StateCorruptError: the waits cell does not decode.
        UnsupportedSchemaVersionError: a newer version of the library wrote it.
    """
    blob = cells.state.waits.read()
    return PendingWaits(bytes(blob), limit=0).pending if blob else ()
