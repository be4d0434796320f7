"""``beam-agents inspect``: what the stores hold for one entity, in a form a person reads.

When an agent did something odd for one customer, its operator asks what the
agent remembered and what it was told. This reads, for one entity key:

* its long-term rows (the store ``--longterm_store`` names), each with the seq
  that wrote it and its value as text (base64 when it is not UTF-8);
* its call journal entries (``--call_journal``): per activation, each paid
  model call's request digest (the replay-cache key a replay looks it up by),
  model, settings, tokens and answer, and each tool result;
* its working memory, seq, pending waits and queued events from a state
  snapshot (``--state_snapshot``), as the next run would start with them.

It only reads. Values are cut to ``--max_chars`` characters, so a line stays a
line; ``--max_chars 0`` prints them whole.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

from beam_agents.backend import JournalEntry
from beam_agents.errors import ConfigError
from beam_agents.hosting import add_agent_flags, agent_config_from_flags
from beam_agents.memory import LongtermRecord, Memory
from beam_agents.model import ModelResponse
from beam_agents.runtime import AgentEvent

__all__ = ["main"]

_LONGTERM_ROWS_MAX = 10_000


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="beam-agents inspect", description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    inspect = parser.add_argument_group("inspect")
    inspect.add_argument("--entity_key", required=True,
                         help="The entity to show (the input lines' entity_key).")
    inspect.add_argument("--state_snapshot", metavar="URI",
                         help="Also show its working memory, seq and pending waits from this "
                              "state snapshot (a folder, or firestore://COLLECTION).")
    inspect.add_argument("--max_chars", type=int, default=200,
                         help="Cut each value to this many characters (0: never cut).")
    add_agent_flags(parser)
    return parser


def _text(value: bytes, max_chars: int) -> str:
    """A value as a person reads it: UTF-8 text when it is, base64 when not; cut to max_chars."""
    try:
        shown = json.dumps(value.decode("utf-8"), ensure_ascii=False)
    except UnicodeDecodeError:
        shown = "base64:" + base64.b64encode(value).decode()
    if max_chars and len(shown) > max_chars:
        return f"{shown[:max_chars]}... ({len(value)} bytes)"
    return shown


def _when(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def _journal_line(entry: JournalEntry, max_chars: int) -> str:
    """The entry's line, then its request digest whole on a line of its own.

    Whole, because it is what a replay and a store query find the entry by.
    """
    return (f"{_journal_text(entry, max_chars)}\n"
            f"            request digest {entry.cache_key}")


def _journal_text(entry: JournalEntry, max_chars: int) -> str:
    where = f"  seq {entry.seq:<5} {_when(entry.created_at_ms)}  "
    if entry.digest_only:
        return where + f"response too large to keep; sha256 {entry.sha256.hex()[:16]}..."
    try:
        recorded = json.loads(entry.response)
    except ValueError:
        recorded = None
    if not isinstance(recorded, dict) or "model_id" not in recorded:
        # A tool call's record: the tool's JSON result.
        shown = recorded.get("result", recorded) if isinstance(recorded, dict) else None
        value = entry.response if shown is None else json.dumps(shown, sort_keys=True).encode()
        return where + f"tool result {_text(value, max_chars)}"
    response = ModelResponse.from_bytes(entry.response)
    usage = dict(response.usage)
    tokens = f"{usage.get('prompt_tokens', 0)} in / {usage.get('completion_tokens', 0)} out"
    said = _text(response.text.encode(), max_chars)
    calls = "".join(f" -> tool {call.name}" for call in response.tool_calls)
    settings = f" {entry.request}" if entry.request else f" {response.model_id}"
    return where + f"model call{settings}, {tokens}: {said}{calls}"


async def _read_stores(config: Any, entity_key: bytes) -> tuple[
        tuple[LongtermRecord, ...] | None, list[JournalEntry] | None]:
    rows = entries = None
    if config.longterm_memory is not None:
        store = config.longterm_memory.open()
        try:
            rows = await store.search(entity_key, "", _LONGTERM_ROWS_MAX)
        finally:
            await store.close()
    if config.call_journal is not None:
        journal = config.call_journal.open()
        try:
            entries = await journal.entries_of(entity_key)
        finally:
            await journal.close()
    return rows, entries


def _snapshot_lines(uri: str, entity_key: bytes, values: dict[str, Any],
                    max_chars: int) -> list[str]:
    from beam_agents.hosting import (  # noqa: PLC0415
        parse_record,
        pending_waits,
        queued_events,
        read_manifest,
        read_part,
        restore_key,
    )
    from beam_agents.stores import snapshot_config_from_uri  # noqa: PLC0415

    config = snapshot_config_from_uri(uri, project=values.get("firestore_project"),
                                      database=values.get("firestore_database"))
    store = config.open()
    try:
        manifest = read_manifest(store)
        if manifest is None:
            return [f"state snapshot {uri}: holds no generation yet"]
        found = [record for part in manifest.parts
                 for record in read_part(store, manifest.generation, part)
                 if parse_record(record, any_version=True).entity_key == entity_key]
    finally:
        store.close()
    head = f"state snapshot {uri}, generation {manifest.generation}"
    if not found:
        return [f"{head}: no state for this entity"]
    cells = restore_key(entity_key, found)
    seq = cells.state.seq.read()
    memory = Memory(cells.state.memory.read() or b"", now_ms=0)
    lines = [f"{head}:", f"  seq {int(seq or 0)}, working memory {memory.size_bytes} bytes"]
    for key in memory.keys():
        try:
            value = memory.get(key)
            lines.append(f"  {key} = {_text(value or b'', max_chars)}")
        except TypeError:  # a ring
            items = memory.ring(key)
            lines.append(f"  {key}: a ring of {len(items)}")
            lines.extend(f"    {_text(item, max_chars)}" for item in items)
    waits = pending_waits(cells)
    lines.append(f"  pending waits: {len(waits)}")
    lines.extend(f"    {wait.name} (recorded at seq {wait.seq}), deadline "
                 f"{_when(wait.deadline_ms)}: {_text(wait.request, max_chars)}" for wait in waits)
    queued = queued_events(cells)
    lines.append(f"  queued events: {len(queued)}")
    lines.extend(f"    {event.event_id} at {_when(event.event_time_ms)}"
                 f"{_event_kind(event)}: {_text(event.payload, max_chars)}" for event in queued)
    return lines


def _event_kind(event: AgentEvent) -> str:
    """What a queued event is besides its payload: an answer to a wait, or a wait's timeout."""
    if event.wait_timed_out:
        return f" (timeout of wait {event.wait_timed_out})"
    if event.answers:
        return f" (answers wait {event.answers})"
    return ""


def main(argv: Sequence[str], *, out: Any = None) -> int:
    """Run ``beam-agents inspect``; returns the exit code (0, or 2 for a usage error)."""
    out = out if out is not None else sys.stdout
    args = _parser().parse_args(list(argv))
    if args.max_chars < 0:
        raise ConfigError("--max_chars must be 0 or more", field="max_chars")
    values = vars(args)
    # The store flags are the run's; no agent runs here, so none need be named.
    values["agent"] = values.get("agent") or "beam_agents.inspection:main"
    config = agent_config_from_flags(values)
    if config.longterm_memory is None and config.call_journal is None and not args.state_snapshot:
        raise ConfigError("nothing to read: give --longterm_store, --call_journal or "
                          "--state_snapshot", field="longterm_store")
    entity_key = args.entity_key.encode()
    rows, entries = asyncio.run(_read_stores(config, entity_key))
    print(f"entity {args.entity_key}", file=out)
    if rows is not None:
        print(f"long-term rows: {len(rows)}", file=out)
        for row in rows:
            print(f"  {row.key} (seq {row.seq}, {_when(row.updated_at_ms)}) = "
                  f"{_text(row.value, args.max_chars)}", file=out)
    if entries is not None:
        print(f"call journal entries: {len(entries)}", file=out)
        for entry in entries:
            print(_journal_line(entry, args.max_chars), file=out)
    if args.state_snapshot:
        for line in _snapshot_lines(args.state_snapshot, entity_key, values, args.max_chars):
            print(line, file=out)
    return 0
