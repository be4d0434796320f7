"""The call-journal port: a durable record of every paid model call (invariant 9).

The replay cache lives in keyed state, so it is lost with the bundle or the
checkpoint that wrote it: a bundle retry, a worker crash, a Flink restore or
the rerun of a batch job would pay again for every call of the activations it
replays. The journal is written *before* the agent sees a response, outside
keyed state, so a replay reads it first and pays nothing.

Entries are content-addressed by the replay-cache key, which already scopes
``(entity_key, seq)`` (seed 002), so a write is idempotent: the first write of
a key wins, and a second write of other bytes is *divergence*, counted and
never overwritten (invariant 5). A response too large for one entry is
journaled digest-only: its replay calls the provider again and compares
digests, as a digest-only cache entry does (C17).

Pure: the port, its entry, and an in-memory fake; backends live in
`beam_agents.stores`.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from beam_agents._canonical import canonical_json
from beam_agents.model._types import ModelRequest, tool_function

__all__ = ["DEFAULT_JOURNAL_TTL_MS", "MAX_JOURNAL_RESPONSE_BYTES", "MAX_REQUEST_SUMMARY_BYTES",
           "CallJournal", "CallJournalConfig", "InMemoryCallJournal", "JournalEntry",
           "JournalWrite", "LearnedRateRecord", "journal_entry", "request_summary"]

#: Largest response journaled in full; a larger one is journaled digest-only,
#: which keeps every entry inside Firestore's 1 MiB document limit.
MAX_JOURNAL_RESPONSE_BYTES = 1_000_000

#: Default time-to-live of an entry: a restore from a savepoint up to a week
#: old still replays instead of paying again.
DEFAULT_JOURNAL_TTL_MS = 7 * 24 * 3_600_000


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalEntry:
    """One paid call: the response bytes (or only their digest), addressed by its cache key.

    Attributes:
        cache_key: The replay-cache key (64 hex digits); scopes entity and seq.
        entity_key: The entity whose activation paid for the call.
        seq: That activation's seq; a journal is read per ``(entity_key, seq)``.
        response: The serialized `ModelResponse`; empty when `digest_only`.
        sha256: The response's sha256, 32 bytes, always present.
        digest_only: Whether the response was too large to keep.
        created_at_ms: The activation's event time (never a wall clock, invariant 2).
        expire_at_ms: When a backend may delete the entry (its TTL).
        request: What shaped the call besides the conversation, as canonical JSON
            (`request_summary`: model id, sampling, tool names), so a replay
            can name a setting that differs and a person can read the entry;
            empty for a tool call's record and for entries of earlier versions.
    """

    cache_key: str
    entity_key: bytes
    seq: int
    response: bytes
    sha256: bytes
    digest_only: bool
    created_at_ms: int
    expire_at_ms: int
    request: str = ""

    def __post_init__(self) -> None:
        if len(self.sha256) != 32:
            raise ValueError(f"JournalEntry.sha256 must be 32 bytes, got {len(self.sha256)}")
        if self.digest_only == bool(self.response):
            raise ValueError("JournalEntry.response must be empty exactly when digest_only")


def journal_key(cache_key: str, event_digest: bytes) -> str:
    """The journal's key of a call: its cache key bound to the event that made it.

    The cache key scopes ``(entity_key, seq, request)``, and a dead letter
    leaves seq where it was: the entity's next event runs at the same seq, and
    a request it shares with the dead event (a fixed prompt) must not replay
    the dead event's answer. Bound to the event's digest, an entry is replayed
    only by attempts of the event that paid for it (invariant 9), and is
    still 64 hex digits in the ``(entity_key, seq)`` range the activation reads.
    """
    if not event_digest:
        return cache_key
    return hashlib.sha256(bytes.fromhex(cache_key) + event_digest).hexdigest()


def journal_entry(*, cache_key: str, entity_key: bytes, seq: int, response: bytes,
                  now_ms: int, ttl_ms: int, max_response_bytes: int,
                  request: str = "") -> JournalEntry:
    """The entry for a fresh response; digest-only when it exceeds `max_response_bytes`."""
    keep = len(response) <= max_response_bytes
    return JournalEntry(cache_key=cache_key, entity_key=entity_key, seq=seq,
                        response=response if keep else b"",
                        sha256=hashlib.sha256(response).digest(), digest_only=not keep,
                        created_at_ms=now_ms, expire_at_ms=now_ms + ttl_ms, request=request)


#: The longest `request_summary` kept; a longer one (huge sampling values) is cut.
MAX_REQUEST_SUMMARY_BYTES = 2048


def request_summary(request: ModelRequest) -> str:
    """What shaped a call besides its messages: model id, sampling, the tools' names.

    Canonical JSON, so equal settings read equal; cut to
    `MAX_REQUEST_SUMMARY_BYTES`, so it never threatens a backend's row limit.
    """
    tools = sorted(str(tool_function(tool).get("name", "")) for tool in request.tools)
    text = canonical_json({"model_id": request.model_id, "sampling": dict(request.sampling),
                           "tools": tools}).decode()
    return text if len(text.encode()) <= MAX_REQUEST_SUMMARY_BYTES else text[
        :MAX_REQUEST_SUMMARY_BYTES // 4]


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnedRateRecord:
    """The share of a provider account's quota one worker learned, kept for the next run.

    Attributes:
        account: Which provider account and model (a digest: never a key).
        worker: Which worker learned it (one row per worker, rewritten).
        rate_rps: The requests per second it settled on under the quota.
        updated_ms: When it was written (the worker's wall clock).
    """

    account: str
    worker: str
    rate_rps: float
    updated_ms: int

    def __post_init__(self) -> None:
        if not self.account or not self.worker:
            raise ValueError("LearnedRateRecord.account and .worker must be non-empty")
        if not (self.rate_rps > 0 and self.rate_rps < float("inf")):
            raise ValueError(f"LearnedRateRecord.rate_rps must be positive, got {self.rate_rps}")


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalWrite:
    """What one idempotent write found: whether it won, and the entry that stands."""

    won: bool
    stored: JournalEntry


@runtime_checkable
class CallJournal(Protocol):
    """A durable, content-addressed record of paid model calls.

    Contract (the suite in ``tests/contract`` holds every backend to it):

    * **One read per activation.** `read` returns every entry of one
      ``(entity_key, seq)`` in one range or batch read, so an activation
      prefetches its journal when it starts, not once per call.
    * **First write wins.** `write` of a key already present changes
      nothing and returns the stored entry, equal or not; nothing is ever
      overwritten (invariant 5).
    * **Before the agent.** The model facade awaits `write` before the
      response reaches the agent; a replay after any crash then finds it.
    * **Errors.** An unreachable or failing journal raises
      `beam_agents.errors.JournalUnavailable` (retriable: the activation
      suspends); a stored row that does not decode raises
      `beam_agents.errors.JournalCorruptError` naming the key; an entry over
      the backend's limit raises `StoreLimitError` before any I/O. Backends
      translate their SDK errors.
    * **Lifecycle.** Built from a picklable config in ``setup()``/``open()``;
      whoever opened it closes it.
    * **Learned rates.** Beside the calls, a journal keeps each worker's
      learned share of a provider account's quota (`LearnedRateRecord`), one
      row per ``(account, worker)``, last write wins: the next run starts
      from it instead of learning the quota again (invariant 11).
    """

    async def read(self, entity_key: bytes, seq: int) -> Mapping[str, JournalEntry]:
        """Every entry of ``(entity_key, seq)``, by cache key."""
        ...

    async def write(self, entry: JournalEntry) -> JournalWrite:
        """Record `entry` unless its key is present; say which entry stands."""
        ...

    async def read_rates(self, account: str) -> Sequence[LearnedRateRecord]:
        """Every worker's learned rate for `account`."""
        ...

    async def write_rate(self, record: LearnedRateRecord) -> None:
        """Keep `record`, replacing the row of its ``(account, worker)``."""
        ...

    async def close(self) -> None:
        """Release the client; idempotent."""
        ...


class CallJournalConfig(Protocol):
    """Picklable settings that build a journal on the worker (no client inside)."""

    def open(self) -> CallJournal:
        """Build the journal; called once per worker in ``setup()``/``open()``."""
        ...


class InMemoryCallJournal:
    """A dict-backed `CallJournal` for tests, counting reads and writes.

    Attributes:
        reads: How many `read` calls were made.
        writes: How many `write` calls were made (won or not).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, JournalEntry] = {}
        self._rates: dict[tuple[str, str], LearnedRateRecord] = {}
        self.reads = 0
        self.writes = 0

    async def read(self, entity_key: bytes, seq: int) -> Mapping[str, JournalEntry]:
        """Every entry of ``(entity_key, seq)``."""
        with self._lock:
            self.reads += 1
            return {key: entry for key, entry in self._entries.items()
                    if entry.entity_key == entity_key and entry.seq == seq}

    async def write(self, entry: JournalEntry) -> JournalWrite:
        """First write wins."""
        with self._lock:
            self.writes += 1
            won = entry.cache_key not in self._entries
            stored = self._entries.setdefault(entry.cache_key, entry)
            return JournalWrite(won=won, stored=stored)

    async def read_rates(self, account: str) -> Sequence[LearnedRateRecord]:
        """Every worker's learned rate for `account`."""
        with self._lock:
            return [record for (owner, _), record in sorted(self._rates.items())
                    if owner == account]

    async def write_rate(self, record: LearnedRateRecord) -> None:
        """Last write wins, per ``(account, worker)``."""
        with self._lock:
            self._rates[(record.account, record.worker)] = record

    def entries(self) -> tuple[JournalEntry, ...]:
        """Every entry, by cache key."""
        with self._lock:
            return tuple(self._entries[key] for key in sorted(self._entries))

    async def close(self) -> None:
        """Nothing to release."""
