"""The CallJournal contract, run against every backend (memory fake, sqlite, firestore).

Each test states one promise of `beam_agents.model._journal.CallJournal`; the
``journal`` fixture makes it hold for the in-memory fake (the reference), a
temp SQLite file and the Firestore-protocol test server. Promises that need a
real store behind the port (corrupt rows, outages, argument checks, limits)
run against SQLite and Firestore only, and a hypothesis test checks both
against the fake on random write/read sequences.
"""

from __future__ import annotations

import asyncio
import hashlib
import pickle
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from google.cloud.firestore_v1 import AsyncClient
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_agents.errors import (
    ConfigError,
    JournalCorruptError,
    JournalUnavailable,
    MemoryContractError,
    StoreLimitError,
)
from beam_agents.model._journal import (
    MAX_JOURNAL_RESPONSE_BYTES,
    CallJournal,
    InMemoryCallJournal,
    JournalEntry,
    JournalWrite,
    LearnedRateRecord,
)
from beam_agents.runtime import MAX_EVENT_BYTES
from beam_agents.stores import (
    FirestoreCallJournal,
    FirestoreCallJournalConfig,
    SqliteCallJournal,
    SqliteCallJournalConfig,
)
from beam_agents.stores._journal_rules import (
    MAX_HEX_QUERY_ENTITY_BYTES,
    MAX_INT64,
    firestore_max_entity_key_bytes,
    firestore_max_response_bytes,
    journal_document_fields,
    journal_document_size,
    timestamp_from_ms,
)
from beam_agents.stores.firestore._client import close_client
from beam_agents.stores.firestore._rules import MAX_DOCUMENT_BYTES
from tests._firestore_server import EMULATOR_HOST_ENV, FirestoreServer, firestore_host

if TYPE_CHECKING:
    from tests.conftest import Run

__all__ = ["firestore_host"]

JOURNALS = ("memory", "sqlite", "firestore")
STORED = ("sqlite", "firestore")

ALICE = b"tenant-alice"
BOB = b"tenant-bob"
EVENT_TIME_MS = 1_700_000_000_123
TTL_MS = 7 * 24 * 3_600_000


def cache_key(*parts: object) -> str:
    """A well-formed cache key (a sha256 hexdigest), distinct per `parts`."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def entry(key: str | None = None, *, entity: bytes = ALICE, seq: int = 1,
          response: bytes = b'{"text":"hello"}', digest_only: bool = False,
          created_at_ms: int = EVENT_TIME_MS, expire_at_ms: int | None = None) -> JournalEntry:
    return JournalEntry(
        cache_key=key if key is not None else cache_key(entity, seq, response),
        entity_key=entity, seq=seq, response=b"" if digest_only else response,
        sha256=hashlib.sha256(response).digest(), digest_only=digest_only,
        created_at_ms=created_at_ms,
        expire_at_ms=created_at_ms + TTL_MS if expire_at_ms is None else expire_at_ms)


#: In `Journals.plant` overrides: leave the field out of the document.
DELETE = object()


# -- fixtures: one private namespace per test, any number of journals on it ------------


class Journals:
    """Opens journals of one backend on one private namespace, as workers of one job do.

    Every :meth:`open` is a new journal (a new connection or client) over the
    same file, project or fake; :meth:`plant` writes a raw row past the port,
    the way a bug, a hand edit or a broken disk would.
    """

    def __init__(self, backend: str, tmp_path: Path, run: Run[Any]) -> None:
        self.backend = backend
        self._run = run
        self._opened: list[CallJournal] = []
        self._fake = InMemoryCallJournal()
        self.path = tmp_path / "journal.db"
        self.project = f"journal-{uuid.uuid4().hex[:12]}"

    @property
    def store_name(self) -> str:
        """How the backend names itself in `JournalCorruptError`."""
        if self.backend == "sqlite":
            return f"sqlite call journal {self.path}"
        return f"firestore call journal {self.project}/(default)/beam_agents_calls"

    def config(self, **overrides: Any) -> SqliteCallJournalConfig | FirestoreCallJournalConfig:
        if self.backend == "sqlite":
            return SqliteCallJournalConfig(**{"path": str(self.path), **overrides})
        return FirestoreCallJournalConfig(
            **{"project": self.project, "timeout_ms": 10_000, **overrides})

    def open(self, **overrides: Any) -> CallJournal:
        journal: CallJournal = self._fake if self.backend == "memory" else (
            self.config(**overrides).open())
        self._opened.append(journal)
        return journal

    def plant(self, row: dict[str, Any], *, layout: str = "legacy",
              overrides: dict[str, Any] | None = None) -> None:
        """Store `row` (JournalEntry field names, any values) without any checks.

        Firestore: `layout` ``"legacy"`` writes the document as every version
        before ``entity_key_digest`` did (the entity as ``entity_key_hex`` only);
        ``"current"`` as `journal_document_fields` does (hex or bytes, and the
        digest). `overrides` then sets raw document fields; `DELETE` drops one.
        """
        if self.backend == "sqlite":
            names = ", ".join(row)
            with sqlite3.connect(self.path) as connection:
                connection.execute(f"INSERT OR REPLACE INTO call_journal ({names}) VALUES "
                                   f"({', '.join('?' * len(row))})", tuple(row.values()))
            connection.close()
            return
        assert self.backend == "firestore"
        fields = dict(row)
        document_id = fields.pop("cache_key")
        entity = fields.pop("entity_key")
        if layout == "legacy":
            fields["entity_key_hex"] = entity.hex()
        else:
            assert layout == "current"
            sample = entry(entity=entity, digest_only=True)
            fields = {name: value for name, value in journal_document_fields(sample).items()
                      if name.startswith("entity_key")} | fields
        fields["expire_at"] = timestamp_from_ms(fields.pop("expire_at_ms"))
        for name, value in (overrides or {}).items():
            if value is DELETE:
                fields.pop(name, None)
            else:
                fields[name] = value

        async def put() -> None:
            client = AsyncClient(project=self.project)
            try:
                await client.collection("beam_agents_calls").document(document_id).set(fields)
            finally:
                await close_client(client)

        self._run(put())

    def close_all(self) -> None:
        for journal in self._opened:
            self._run(journal.close())


@pytest.fixture(params=JOURNALS)
def journal_backend(request: pytest.FixtureRequest) -> str:
    """The backend name; Firestore tests start (or reuse) the session's server."""
    name: str = request.param
    if name == "firestore":
        request.getfixturevalue("firestore_host")
    return name


@pytest.fixture
def journals(journal_backend: str, tmp_path: Path, run: Run[Any]) -> Iterator[Journals]:
    """Journals of the backend on a fresh, empty namespace; all are closed after the test."""
    opened = Journals(journal_backend, tmp_path, run)
    yield opened
    opened.close_all()


@pytest.fixture
def journal(journals: Journals) -> CallJournal:
    """A fresh, empty journal of the backend under test."""
    return journals.open()


def only(*backends: str) -> pytest.MarkDecorator:
    """Run a test against some backends only (the fake has no rows to break, no outage)."""
    return pytest.mark.parametrize("journal_backend", backends, indirect=True)


stored_only = only(*STORED)
firestore_only = only("firestore")


# -- the port's shape --------------------------------------------------------------


def test_every_backend_is_a_call_journal(journal: CallJournal) -> None:
    assert isinstance(journal, CallJournal)


def test_configs_open_journals_of_their_backend(tmp_path: Path) -> None:
    assert isinstance(SqliteCallJournalConfig(path=str(tmp_path / "j.db")).open(),
                      SqliteCallJournal)
    assert isinstance(FirestoreCallJournalConfig(project="p").open(), FirestoreCallJournal)


# -- reads ---------------------------------------------------------------------------


def test_read_of_an_unjournaled_activation_is_empty(journal: CallJournal, run: Run[Any]) -> None:
    assert dict(run(journal.read(ALICE, 1))) == {}


def test_read_returns_only_the_entries_of_that_entity_and_seq(
    journal: CallJournal, run: Run[Any]
) -> None:
    """One read per activation: every entry of (entity_key, seq), nothing of any other."""
    wanted = [entry(entity=ALICE, seq=7, response=b"a"), entry(entity=ALICE, seq=7, response=b"b")]
    others = [entry(entity=ALICE, seq=6), entry(entity=ALICE, seq=8),
              entry(entity=BOB, seq=7), entry(entity=ALICE[:-1], seq=7),
              entry(entity=ALICE + b"\x00", seq=7), entry(entity=b"", seq=7)]
    for item in [*others, *wanted]:
        assert run(journal.write(item)).won

    assert dict(run(journal.read(ALICE, 7))) == {e.cache_key: e for e in wanted}
    assert dict(run(journal.read(b"", 7))) == {others[-1].cache_key: others[-1]}


# -- writes ---------------------------------------------------------------------------


def test_a_write_then_read_round_trips_every_field(journals: Journals, run: Run[Any]) -> None:
    """Every field comes back exactly, also through another journal on the same store."""
    # The Firestore-protocol test server is JavaScript: it fails on integers
    # past 2**53, which Firestore itself stores. SQLite's int64 edge is below.
    written = entry(entity=b"\x00\xff binary \x80", seq=2**53 - 1, response=bytes(range(256)),
                    created_at_ms=0, expire_at_ms=253_402_300_799_999)
    first = journals.open()

    assert run(first.write(written)) == JournalWrite(won=True, stored=written)
    assert dict(run(first.read(written.entity_key, written.seq))) == {
        written.cache_key: written}
    run(first.close())
    assert dict(run(journals.open().read(written.entity_key, written.seq))) == {
        written.cache_key: written}


def test_digest_only_entries_round_trip(journal: CallJournal, run: Run[Any]) -> None:
    """A digest-only entry keeps the proof of what the provider returned (invariant 3)."""
    written = entry(response=b"too large to keep" * 10, digest_only=True)

    assert run(journal.write(written)).won

    (read,) = run(journal.read(ALICE, 1)).values()
    assert read == written
    assert (read.response, read.digest_only) == (b"", True)
    assert read.sha256 == hashlib.sha256(b"too large to keep" * 10).digest()


def test_first_write_wins_and_a_divergent_write_returns_the_stored_entry(
    journal: CallJournal, run: Run[Any]
) -> None:
    """A second write of other bytes changes nothing and reports what stands: divergence."""
    key = cache_key("divergent")
    first = entry(key, response=b"first answer")
    second = entry(key, response=b"another answer", created_at_ms=EVENT_TIME_MS + 5)

    assert run(journal.write(first)) == JournalWrite(won=True, stored=first)
    assert run(journal.write(second)) == JournalWrite(won=False, stored=first)
    assert run(journal.write(replace(first, response=b"", digest_only=True))) == JournalWrite(
        won=False, stored=first)
    assert dict(run(journal.read(ALICE, 1))) == {key: first}


def test_a_retried_write_of_the_same_entry_converges(journal: CallJournal, run: Run[Any]) -> None:
    written = entry()
    run(journal.write(written))
    retried = replace(written)  # a retry builds its entry afresh: equal, not the same object

    assert run(journal.write(retried)) == JournalWrite(won=False, stored=written)
    assert dict(run(journal.read(ALICE, 1))) == {written.cache_key: written}


def test_concurrent_writes_of_one_key_leave_exactly_one_winner(
    journals: Journals, run: Run[Any]
) -> None:
    """Sixteen tasks on two journals (two workers) race for one key; one wins, all agree."""
    key = cache_key("race")
    workers = [journals.open(), journals.open()]
    contenders = [entry(key, response=f"answer {n}".encode()) for n in range(16)]

    async def race() -> list[JournalWrite]:
        return list(await asyncio.gather(
            *(workers[n % 2].write(item) for n, item in enumerate(contenders))))

    results = run(race())

    winners = [result.stored for result in results if result.won]
    assert len(winners) == 1
    assert winners[0] in contenders
    assert all(result.stored == winners[0] for result in results)
    assert dict(run(workers[0].read(ALICE, 1))) == {key: winners[0]}


def test_concurrent_writes_of_distinct_keys_all_win(journal: CallJournal, run: Run[Any]) -> None:
    items = [entry(response=f"call {n}".encode()) for n in range(12)]

    async def write_all() -> list[JournalWrite]:
        return list(await asyncio.gather(*(journal.write(item) for item in items)))

    assert all(result.won for result in run(write_all()))
    assert dict(run(journal.read(ALICE, 1))) == {item.cache_key: item for item in items}


def test_close_is_idempotent(journal: CallJournal, run: Run[Any]) -> None:
    run(journal.write(entry()))
    run(journal.close())
    run(journal.close())


# -- argument checks (the real stores must never hold a row that reads back corrupt) -----


@stored_only
@pytest.mark.parametrize(("bad", "error"), [
    ({"cache_key": "not-hex"}, ValueError),
    ({"cache_key": "A" * 64}, ValueError),
    ({"cache_key": "a" * 63}, ValueError),
    ({"response": b"not what the digest says"}, ValueError),
    ({"entity_key": "text"}, TypeError),
    ({"seq": -1}, ValueError),
    ({"seq": MAX_INT64 + 1}, StoreLimitError),
    ({"seq": True}, TypeError),
    ({"expire_at_ms": MAX_INT64 + 1}, StoreLimitError),
])
def test_a_write_of_an_unstorable_entry_is_refused_and_stores_nothing(
    journal: CallJournal, run: Run[Any], bad: dict[str, Any], error: type[Exception]
) -> None:
    unstorable = replace(entry(), **bad)

    with pytest.raises(error):
        run(journal.write(unstorable))

    assert dict(run(journal.read(ALICE, 1))) == {}


@stored_only
@pytest.mark.parametrize(("entity_key", "seq", "error"), [
    ("text", 1, TypeError), (ALICE, -1, ValueError), (ALICE, 1.0, TypeError),
    (ALICE, MAX_INT64 + 1, StoreLimitError),
])
def test_a_read_with_bad_arguments_is_refused(journal: CallJournal, run: Run[Any],
                                              entity_key: Any, seq: Any,
                                              error: type[Exception]) -> None:
    with pytest.raises(error):
        run(journal.read(entity_key, seq))


@stored_only
def test_a_closed_journal_refuses_work(journal: CallJournal, run: Run[Any]) -> None:
    run(journal.write(entry()))
    run(journal.close())

    with pytest.raises(MemoryContractError, match="closed"):
        run(journal.read(ALICE, 1))
    with pytest.raises(MemoryContractError, match="closed"):
        run(journal.write(entry(response=b"later")))


# -- corrupt rows are reported, never replayed --------------------------------------------


def valid_row(key: str, *, entity: bytes = ALICE, seq: int = 1,
              response: bytes = b"stored answer") -> dict[str, Any]:
    return {"cache_key": key, "entity_key": entity, "seq": seq, "response": response,
            "sha256": hashlib.sha256(response).digest(), "digest_only": False,
            "created_at_ms": EVENT_TIME_MS, "expire_at_ms": EVENT_TIME_MS + TTL_MS}


CORRUPTIONS: dict[str, dict[str, Any]] = {
    "short-digest": {"sha256": bytes(31)},
    "digest-mismatch": {"response": b"tampered answer"},
    "response-on-digest-only": {"digest_only": True},
    "empty-response-not-digest-only": {"response": b"", "sha256": hashlib.sha256(b"x").digest()},
    "response-as-text": {"response": "stored answer"},
    "digest-only-not-boolean": {"digest_only": 2},
    "malformed-key": {"cache_key": "Not-A-Cache-Key"},
    "uppercase-key": {"cache_key": cache_key("corrupt").upper()},
}


@stored_only
@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_row_raises_journal_corrupt_error_naming_the_store_and_key(
    journals: Journals, run: Run[Any], corruption: str
) -> None:
    journal = journals.open()
    run(journal.read(ALICE, 1))  # create the table
    row = {**valid_row(cache_key("corrupt")), **CORRUPTIONS[corruption]}
    journals.plant(row)

    with pytest.raises(JournalCorruptError) as caught:
        run(journal.read(ALICE, 1))

    assert (caught.value.store, caught.value.key) == (journals.store_name, row["cache_key"])
    assert journals.store_name in str(caught.value)
    assert row["cache_key"] in str(caught.value)


@stored_only
@pytest.mark.parametrize("owner", [{"entity": BOB}, {"seq": 2}], ids=["entity", "seq"])
def test_a_standing_row_of_another_activation_is_corrupt_and_left_alone(
    journals: Journals, run: Run[Any], owner: dict[str, Any]
) -> None:
    """The key scopes (entity_key, seq): a write meeting another activation's row under it."""
    key = cache_key("shared")
    journal = journals.open()
    run(journal.read(ALICE, 1))  # create the table
    journals.plant(valid_row(key, **owner))

    with pytest.raises(JournalCorruptError) as caught:
        run(journal.write(entry(key)))

    assert (caught.value.store, caught.value.key) == (journals.store_name, key)
    assert dict(run(journal.read(ALICE, 1))) == {}
    standing = valid_row(key, **owner)
    (kept,) = run(journal.read(standing["entity_key"], standing["seq"])).values()
    assert kept.response == b"stored answer"


# -- outages -----------------------------------------------------------------------------


class Outage:
    """A journal plus the means to make its store unreachable and reachable again.

    * sqlite: another connection holds the write lock past the journal's busy
      timeout (reads still work in WAL mode; writes fail).
    * firestore: the private server process (of the run's kind) is stopped
      and restarted on the same port; ``heal`` waits until the journal
      reaches it again.
    """

    def __init__(self, journal: CallJournal, fail: Callable[[], None],
                 heal: Callable[[], None]) -> None:
        self.journal = journal
        self.fail = fail
        self.heal = heal


@pytest.fixture
def outage(journal_backend: str, journals: Journals, run: Run[Any],
           request: pytest.FixtureRequest) -> Iterator[Outage]:
    if journal_backend == "sqlite":
        journal = journals.open(busy_timeout_ms=100)
        run(journal.read(b"probe", 0))  # create the database and its table
        holder: list[sqlite3.Connection] = []

        def fail_sqlite() -> None:
            blocker = sqlite3.connect(journals.path, isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")
            holder.append(blocker)

        def heal_sqlite() -> None:
            blocker = holder.pop()
            blocker.execute("ROLLBACK")
            blocker.close()

        yield Outage(journal, fail_sqlite, heal_sqlite)
        for blocker in holder:
            blocker.close()
        return

    assert journal_backend == "firestore"
    server: FirestoreServer = request.getfixturevalue("private_firestore_server")
    journal = journals.open(timeout_ms=1_500)
    run(journal.read(b"probe", 0))  # build the client against this server

    def heal_firestore() -> None:
        server.start()
        deadline = time.monotonic() + 15
        while True:  # gRPC reconnects with backoff; wait until the journal gets through
            try:
                run(journal.read(b"probe", 0))
                return
            except JournalUnavailable:
                if time.monotonic() > deadline:
                    raise

    yield Outage(journal, server.stop, heal_firestore)


@stored_only
def test_an_unreachable_store_raises_journal_unavailable_and_works_again_afterwards(
    outage: Outage, run: Run[Any]
) -> None:
    """Retriable: the activation suspends, and its retry journals the same call."""
    written = entry()
    outage.fail()
    try:
        started = time.monotonic()
        with pytest.raises(JournalUnavailable) as caught:
            run(outage.journal.write(written))
        assert caught.value.retriable
        assert time.monotonic() - started < 10
    finally:
        outage.heal()

    assert run(outage.journal.write(written)) == JournalWrite(won=True, stored=written)
    assert dict(run(outage.journal.read(ALICE, 1))) == {written.cache_key: written}


def test_firestore_an_unreachable_server_is_unavailable_within_the_timeout(
    run: Run[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound but never listening: connections are refused
        monkeypatch.setenv(EMULATOR_HOST_ENV, f"127.0.0.1:{sock.getsockname()[1]}")
        journal = FirestoreCallJournalConfig(project="down", timeout_ms=300).open()
        try:
            for call in (journal.read(ALICE, 1), journal.write(entry())):
                started = time.monotonic()
                with pytest.raises(JournalUnavailable, match=r"within 300 ms|failed"):
                    run(call)
                assert time.monotonic() - started < 5
        finally:
            run(journal.close())


def test_sqlite_a_database_that_cannot_be_created_is_unavailable_until_it_can(
    tmp_path: Path, run: Run[Any]
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the journal's folder should be")
    journal = SqliteCallJournalConfig(path=str(blocker / "journal.db")).open()
    written = entry()

    for call in (journal.read(ALICE, 1), journal.write(written)):
        with pytest.raises(JournalUnavailable, match="not-a-dir"):
            run(call)
    blocker.unlink()

    assert run(journal.write(written)).won
    assert dict(run(journal.read(ALICE, 1))) == {written.cache_key: written}
    run(journal.close())


# -- Firestore: layout and limits, checked before any I/O -----------------------------------


def no_client() -> AsyncClient:
    raise AssertionError("this call must not build a Firestore client (no I/O)")


@firestore_only
def test_firestore_an_entry_is_one_document_named_by_its_cache_key(
    journals: Journals, run: Run[Any]
) -> None:
    written = entry(expire_at_ms=1_800_000_000_456)
    run(journals.open().write(written))

    async def fetch() -> dict[str, Any]:
        client = AsyncClient(project=journals.project)
        try:
            snapshot = await client.document(f"beam_agents_calls/{written.cache_key}").get()
            data = snapshot.to_dict()
            assert data is not None
            return data
        finally:
            await close_client(client)

    assert run(fetch()) == {
        "entity_key_hex": ALICE.hex(), "entity_key_digest": hashlib.sha256(ALICE).hexdigest(),
        "seq": 1, "response": written.response, "sha256": written.sha256,
        "digest_only": False, "created_at_ms": EVENT_TIME_MS,
        "expire_at": timestamp_from_ms(1_800_000_000_456)}


@firestore_only
def test_firestore_a_long_entity_key_is_kept_as_bytes_beside_its_digest(
    journals: Journals, run: Run[Any]
) -> None:
    """Past 749 bytes the hex is too large to query; the key is kept once, as bytes."""
    long_key = b"\x00long\xff" * 140  # 840 bytes
    written = entry(entity=long_key)
    run(journals.open().write(written))

    async def fetch() -> dict[str, Any] | None:
        client = AsyncClient(project=journals.project)
        try:
            snapshot = await client.document(f"beam_agents_calls/{written.cache_key}").get()
            return snapshot.to_dict()
        finally:
            await close_client(client)

    data = run(fetch())
    assert data is not None
    assert "entity_key_hex" not in data
    assert (data["entity_key"], data["entity_key_digest"]) == (
        long_key, hashlib.sha256(long_key).hexdigest())


def _filling(entity: bytes, size: int) -> JournalEntry:
    """A full entry of `entity` whose document is exactly `size` bytes."""
    # A boolean is one byte either way, so the digest-only size is the full one's base.
    base = journal_document_size("beam_agents_calls", entry(entity=entity, digest_only=True))
    return entry(entity=entity, response=b"x" * (size - base))


@firestore_only
@pytest.mark.parametrize("entity", [
    ALICE, b"e" * MAX_HEX_QUERY_ENTITY_BYTES, b"e" * (MAX_HEX_QUERY_ENTITY_BYTES + 1),
    b"e" * 500_000,
], ids=["short", "longest-hex", "shortest-bytes", "500-kb"])
def test_firestore_an_entry_over_1_mib_is_refused_before_io_and_exactly_1_mib_is_stored(
    journals: Journals, run: Run[Any], entity: bytes
) -> None:
    config = journals.config()
    assert isinstance(config, FirestoreCallJournalConfig)
    offline = FirestoreCallJournal(config, client_factory=no_client)
    too_big = _filling(entity, MAX_DOCUMENT_BYTES + 1)

    with pytest.raises(StoreLimitError) as caught:
        run(offline.write(too_big))
    assert (caught.value.limit, caught.value.attempted) == (MAX_DOCUMENT_BYTES,
                                                           MAX_DOCUMENT_BYTES + 1)
    assert too_big.cache_key in str(caught.value)
    run(offline.close())

    fits = _filling(entity, MAX_DOCUMENT_BYTES)
    assert len(fits.response) == firestore_max_response_bytes("beam_agents_calls", entity)
    journal = journals.open()
    assert run(journal.write(fits)).won
    assert dict(run(journal.read(entity, 1))) == {fits.cache_key: fits}


def test_firestore_the_largest_full_entry_the_facade_writes_fits_one_document() -> None:
    """The facade journals anything larger digest-only: its entries fit up to a 48 KB key.

    Past that, a response near the facade's 1,000,000-byte threshold makes a
    document over 1 MiB, refused before I/O (above); smaller responses fit.
    """
    longest = firestore_max_entity_key_bytes("beam_agents_calls") - MAX_JOURNAL_RESPONSE_BYTES
    assert longest == 48_238
    assert firestore_max_response_bytes("beam_agents_calls",
                                        b"e" * longest) == MAX_JOURNAL_RESPONSE_BYTES
    for entity in (ALICE, b"e" * MAX_HEX_QUERY_ENTITY_BYTES, b"e" * longest):
        assert firestore_max_response_bytes("beam_agents_calls",
                                            entity) >= MAX_JOURNAL_RESPONSE_BYTES


@pytest.mark.parametrize("unstorable", [
    entry(expire_at_ms=253_402_300_800_000),
    entry(expire_at_ms=-62_135_596_800_001),
], ids=["expiry-after-9999", "expiry-before-0001"])
def test_firestore_other_unstorable_entries_are_refused_before_io(
    run: Run[Any], unstorable: JournalEntry
) -> None:
    offline = FirestoreCallJournal(FirestoreCallJournalConfig(project="p"),
                                   client_factory=no_client)

    with pytest.raises(StoreLimitError):
        run(offline.write(unstorable))
    run(offline.close())


# -- Firestore: entity keys of every length -------------------------------------------------

#: The longest entity key a Firestore journal entry holds: a digest-only entry of
#: exactly 1 MiB. Only writes are bounded, and only by the document; reads are not.
LONGEST_STORABLE = firestore_max_entity_key_bytes("beam_agents_calls")


def _query_field(entity: bytes) -> str:
    return "hex" if len(entity) <= MAX_HEX_QUERY_ENTITY_BYTES else "digest"


@firestore_only
@pytest.mark.parametrize("length", [
    MAX_HEX_QUERY_ENTITY_BYTES, MAX_HEX_QUERY_ENTITY_BYTES + 1, 751, 1_500, 4_096, 65_536,
    LONGEST_STORABLE,
])
def test_firestore_entity_keys_up_to_the_longest_a_document_holds_round_trip(
    journals: Journals, run: Run[Any], length: int
) -> None:
    """On the official emulator a query value is at most 1,500 bytes: past 749, by digest."""
    entity = bytes(range(256)) * (length // 256) + b"k" * (length % 256)
    digest_only = length > 500_000  # a full entry must leave the key its room
    written = entry(entity=entity, response=b"answer", digest_only=digest_only)
    journal = journals.open()

    assert run(journal.write(written)).won
    assert dict(run(journal.read(entity, 1))) == {written.cache_key: written}
    assert dict(run(journals.open().read(entity, 1))) == {written.cache_key: written}
    if length == LONGEST_STORABLE:
        assert journal_document_size("beam_agents_calls", written) == MAX_DOCUMENT_BYTES
    assert dict(run(journal.read(entity[:-1], 1))) == {}
    assert dict(run(journal.read(entity + b"k", 1))) == {}


@firestore_only
def test_firestore_an_entity_key_one_byte_past_the_document_is_refused_before_io(
    journals: Journals, run: Run[Any]
) -> None:
    too_long = b"e" * (LONGEST_STORABLE + 1)
    config = journals.config()
    assert isinstance(config, FirestoreCallJournalConfig)
    offline = FirestoreCallJournal(config, client_factory=no_client)

    with pytest.raises(StoreLimitError) as caught:
        run(offline.write(entry(entity=too_long, digest_only=True)))

    assert (caught.value.limit, caught.value.attempted) == (MAX_DOCUMENT_BYTES,
                                                           MAX_DOCUMENT_BYTES + 1)
    assert f"{LONGEST_STORABLE + 1}-byte entity key" in str(caught.value)
    run(offline.close())


@firestore_only
@pytest.mark.parametrize("length", [LONGEST_STORABLE + 1, MAX_EVENT_BYTES])
def test_firestore_a_read_refuses_no_entity_key_for_its_length(
    journal: CallJournal, run: Run[Any], length: int
) -> None:
    """An event of up to max_event_bytes (1 MiB by default) can carry such a key."""
    assert dict(run(journal.read(b"e" * length, 1))) == {}


@firestore_only
@pytest.mark.parametrize("shared", [MAX_HEX_QUERY_ENTITY_BYTES, 1_500, 1_600, 10_000])
def test_firestore_long_keys_that_share_a_prefix_never_share_entries(
    journals: Journals, run: Run[Any], shared: int
) -> None:
    """Firestore indexes the first 1,500 bytes of a value: keys equal that far stay apart."""
    journal = journals.open()
    keys = [b"p" * shared + tail for tail in (b"", b"a", b"b", b"ab")]
    entries = [entry(entity=key, response=key[-2:]) for key in keys]
    for item in entries:
        assert run(journal.write(item)).won

    for key, item in zip(keys, entries, strict=True):
        assert dict(run(journal.read(key, 1))) == {item.cache_key: item}, _query_field(key)


@firestore_only
@pytest.mark.parametrize("length", [len(ALICE), MAX_HEX_QUERY_ENTITY_BYTES])
def test_firestore_entries_of_earlier_versions_are_read_beside_new_ones(
    journals: Journals, run: Run[Any], length: int
) -> None:
    """A legacy document (``entity_key_hex`` only) and a new one of one activation: both read.

    This is why reads of such keys query the hex, which every version wrote,
    not the digest with a hex fallback when nothing matched: after a replay
    journaled one new entry, that fallback would lose the legacy one and pay
    for its call again (invariant 9).
    """
    entity = (ALICE * length)[:length]
    journal = journals.open()
    legacy_key, new_key = cache_key("legacy", length), cache_key("new", length)
    legacy = valid_row(legacy_key, entity=entity)
    journals.plant(legacy)
    assert dict(run(journal.read(entity, 1))).keys() == {legacy_key}

    fresh = entry(new_key, entity=entity, response=b"new answer")
    assert run(journal.write(fresh)).won
    read = dict(run(journals.open().read(entity, 1)))

    assert read.keys() == {legacy_key, new_key}
    assert read[legacy_key].response == b"stored answer"
    assert read[new_key] == fresh
    # A retried write of the legacy call meets the legacy document and keeps it.
    retried = entry(legacy_key, entity=entity, response=b"stored answer")
    assert run(journal.write(retried)) == JournalWrite(won=False, stored=read[legacy_key])


def _long(tag: bytes) -> bytes:
    return tag * (2 * MAX_HEX_QUERY_ENTITY_BYTES // len(tag))


#: Raw document damage around the entity fields: (entity, layout, overrides, named field).
ENTITY_CORRUPTIONS: dict[str, tuple[bytes, str, dict[str, Any], str]] = {
    "digest-of-another-key": (ALICE, "current", {"entity_key_digest": "0" * 64},
                              "entity_key_digest"),
    "digest-not-hex": (ALICE, "current", {"entity_key_digest": "Z" * 64}, "entity_key_digest"),
    "digest-not-text": (ALICE, "current", {"entity_key_digest": 7}, "entity_key_digest"),
    "hex-and-bytes": (ALICE, "current", {"entity_key": ALICE}, "entity_key_hex"),
    "long-key-as-text": (_long(b"L"), "current", {"entity_key": "L" * 1498}, "entity_key"),
    "long-key-of-another-entity": (_long(b"L"), "current", {"entity_key": _long(b"M")},
                                   "entity_key_digest"),
}


@firestore_only
@pytest.mark.parametrize("corruption", sorted(ENTITY_CORRUPTIONS))
def test_firestore_a_corrupt_entity_field_raises_journal_corrupt_error_naming_it(
    journals: Journals, run: Run[Any], corruption: str
) -> None:
    entity, layout, overrides, field = ENTITY_CORRUPTIONS[corruption]
    journal = journals.open()
    key = cache_key("corrupt", corruption)
    journals.plant(valid_row(key, entity=entity), layout=layout, overrides=overrides)

    for call in (journal.read(entity, 1), journal.write(entry(key, entity=entity))):
        with pytest.raises(JournalCorruptError) as caught:
            run(call)
        assert (caught.value.store, caught.value.key) == (journals.store_name, key)
        assert field in str(caught.value)


@firestore_only
def test_firestore_a_long_key_without_its_digest_is_corrupt(
    journals: Journals, run: Run[Any]
) -> None:
    """Unfindable by the digest query; a write that meets it reports it, never replays it."""
    entity = _long(b"L")
    key = cache_key("no digest")
    journal = journals.open()
    journals.plant(valid_row(key, entity=entity), layout="current",
                   overrides={"entity_key_digest": DELETE})

    assert dict(run(journal.read(entity, 1))) == {}
    with pytest.raises(JournalCorruptError, match="entity_key_digest is missing") as caught:
        run(journal.write(entry(key, entity=entity)))
    assert caught.value.key == key


# -- SQLite specifics ------------------------------------------------------------------------


def test_sqlite_uses_wal_and_an_index_on_entity_and_seq(tmp_path: Path, run: Run[Any]) -> None:
    journal = SqliteCallJournalConfig(path=str(tmp_path / "j.db")).open()
    run(journal.write(entry()))
    run(journal.close())

    with sqlite3.connect(tmp_path / "j.db") as check:
        assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert check.execute("PRAGMA index_info(call_journal_by_activation)").fetchall() == [
            (0, 1, "entity_key"), (1, 2, "seq")]
        plan = check.execute("EXPLAIN QUERY PLAN SELECT * FROM call_journal "
                             "WHERE entity_key = ? AND seq = ?", (ALICE, 1)).fetchall()
    check.close()
    assert "call_journal_by_activation" in str(plan)


def test_sqlite_round_trips_the_int64_edges(tmp_path: Path, run: Run[Any]) -> None:
    journal = SqliteCallJournalConfig(path=str(tmp_path / "j.db")).open()
    written = entry(seq=MAX_INT64, created_at_ms=-(2**63), expire_at_ms=MAX_INT64)

    assert run(journal.write(written)).won
    assert dict(run(journal.read(ALICE, MAX_INT64))) == {written.cache_key: written}
    run(journal.close())


def test_sqlite_prune_deletes_exactly_the_entries_expired_before_the_cutoff(
    tmp_path: Path, run: Run[Any]
) -> None:
    journal = SqliteCallJournalConfig(path=str(tmp_path / "j.db")).open()
    expired, boundary, live = (entry(response=b"old", expire_at_ms=100),
                               entry(response=b"edge", expire_at_ms=200),
                               entry(response=b"new", expire_at_ms=300))
    for item in (expired, boundary, live):
        run(journal.write(item))

    assert run(journal.prune(200)) == 1
    assert dict(run(journal.read(ALICE, 1))) == {boundary.cache_key: boundary,
                                                  live.cache_key: live}
    assert run(journal.prune(200)) == 0
    run(journal.close())


def test_sqlite_open_touches_no_file_until_first_use(tmp_path: Path, run: Run[Any]) -> None:
    journal = SqliteCallJournalConfig(path=str(tmp_path / "out" / "j.db")).open()

    assert not (tmp_path / "out").exists()
    run(journal.read(ALICE, 1))
    assert (tmp_path / "out" / "j.db").is_file()
    run(journal.close())


# -- configs -------------------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "settings", "field"), [
    (SqliteCallJournalConfig, {"path": ""}, "path"),
    (SqliteCallJournalConfig, {"path": 3}, "path"),
    (SqliteCallJournalConfig, {"path": "a\x00b"}, "path"),
    (SqliteCallJournalConfig, {"path": "j.db", "busy_timeout_ms": -1}, "busy_timeout_ms"),
    (SqliteCallJournalConfig, {"path": "j.db", "busy_timeout_ms": True}, "busy_timeout_ms"),
    (FirestoreCallJournalConfig, {"project": ""}, "project"),
    (FirestoreCallJournalConfig, {"project": "a/b"}, "project"),
    (FirestoreCallJournalConfig, {"project": "p", "database": ""}, "database"),
    (FirestoreCallJournalConfig, {"project": "p", "collection": "a/b"}, "collection"),
    (FirestoreCallJournalConfig, {"project": "p", "collection": "__x__"}, "collection"),
    (FirestoreCallJournalConfig, {"project": "p", "collection": ""}, "collection"),
    (FirestoreCallJournalConfig, {"project": "p", "timeout_ms": 0}, "timeout_ms"),
    (FirestoreCallJournalConfig, {"project": "p", "timeout_ms": 1.5}, "timeout_ms"),
], ids=lambda value: value.__name__ if isinstance(value, type) else None)
def test_configs_reject_bad_values_naming_the_field(cls: type, settings: dict[str, Any],
                                                    field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        cls(**settings)

    assert caught.value.field == field
    assert f"{cls.__name__}.{field}" in str(caught.value)


@pytest.mark.parametrize("config", [
    SqliteCallJournalConfig(path="/data/journal.db", busy_timeout_ms=250),
    FirestoreCallJournalConfig(project="p", database="db", collection="calls", timeout_ms=5),
], ids=["sqlite", "firestore"])
def test_configs_pickle_and_hold_no_client(config: object) -> None:
    assert pickle.loads(pickle.dumps(config)) == config
    assert not hasattr(config, "__dict__")  # slots: settings only


def test_importing_the_journal_configs_loads_neither_sqlite3_nor_google_cloud() -> None:
    # google.cloud itself may be a namespace package registered at start-up by
    # .pth files; what must not appear is anything imported by our modules.
    code = (
        "import pickle, sys\n"
        "before = set(sys.modules)\n"
        "import beam_agents.stores._journal_config as c\n"
        "pickle.loads(pickle.dumps(c.FirestoreCallJournalConfig(project='p')))\n"
        "pickle.loads(pickle.dumps(c.SqliteCallJournalConfig(path='x.db')))\n"
        "new = set(sys.modules) - before\n"
        "FORBIDDEN = ('google.cloud.', 'google.api_core', 'google.auth', 'grpc', 'sqlite3',"
        " '_sqlite3')\n"
        "print(sorted(m for m in new if m.startswith(FORBIDDEN)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)

    assert done.stdout.strip() == "[]"


# -- every real store against the fake --------------------------------------------------------

EXAMPLES = {"sqlite": 60, "firestore": 15}


@stored_only
def test_a_store_agrees_with_the_in_memory_fake(journals: Journals, run: Run[Any]) -> None:
    """Random writes (divergent, repeated, digest-only) and reads give the fake's answers."""
    journal = journals.open()
    write = st.tuples(st.just("write"), st.sampled_from([ALICE, BOB, b""]), st.integers(0, 2),
                      st.integers(0, 3), st.binary(max_size=4), st.booleans())
    read = st.tuples(st.just("read"), st.sampled_from([ALICE, BOB, b""]), st.integers(0, 2))

    @settings(max_examples=EXAMPLES[journals.backend], deadline=None)
    @given(steps=st.lists(st.one_of(write, read), min_size=1, max_size=12))
    def agrees(steps: list[tuple[Any, ...]]) -> None:
        # Each example has entities of its own in the shared store, so reads are exact.
        salt = uuid.uuid4().bytes
        model = InMemoryCallJournal()
        for step in steps:
            entity, seq = salt + step[1], step[2]
            if step[0] == "write":
                n, response, digest_only = step[3:]
                item = entry(cache_key(entity, seq, n), entity=entity, seq=seq,
                             response=response or b"-", digest_only=digest_only)
                assert run(journal.write(item)) == run(model.write(item))
            else:
                assert dict(run(journal.read(entity, seq))) == dict(run(model.read(entity, seq)))

    agrees()


# -- learned rates ---------------------------------------------------------------------


def rate(worker: str, rps: float, at_ms: int = 1_000, account: str = "acct") -> LearnedRateRecord:
    return LearnedRateRecord(account=account, worker=worker, rate_rps=rps, updated_ms=at_ms)


def test_learned_rates_are_kept_per_worker_and_the_last_write_of_each_wins(
        journals: Journals, run: Run[Any]) -> None:
    """Another journal on the same store, as the next run's worker, reads what was kept."""
    first = journals.open()
    run(first.write_rate(rate("w1", 9.5)))
    run(first.write_rate(rate("w2", 10.5)))
    run(first.write_rate(rate("w1", 8.0, at_ms=2_000)))
    run(first.write_rate(rate("w1", 50.0, account="other")))
    later = journals.open()
    assert list(run(later.read_rates("acct"))) == [rate("w1", 8.0, at_ms=2_000),
                                                   rate("w2", 10.5)]
    assert list(run(later.read_rates("nobody"))) == []


@stored_only
def test_a_learned_rate_row_that_does_not_decode_is_skipped_not_raised(
        journals: Journals, run: Run[Any]) -> None:
    journal = journals.open()
    run(journal.write_rate(rate("w1", 9.5)))
    if journals.backend == "sqlite":
        with sqlite3.connect(journals.path) as connection:
            connection.execute("INSERT INTO learned_rates VALUES ('acct', 'w2', 'fast', 'now')")
        connection.close()
    else:
        async def put() -> None:
            client = AsyncClient(project=journals.project)
            try:
                await client.collection("beam_agents_calls_rates").document("bad").set(
                    {"account": "acct", "worker": "w2", "rate_rps": "fast"})
            finally:
                await close_client(client)

        run(put())
    assert list(run(journal.read_rates("acct"))) == [rate("w1", 9.5)]


# -- what a person and a replay read: the request summary, an entity's entries --------


@stored_only
def test_the_request_summary_is_stored_and_an_entitys_entries_list_in_seq_order(
        journals: Journals, run: Run[Any]) -> None:
    """`entries_of` gives every call of one entity, with what shaped each request."""
    journal = journals.open()
    summary = '{"model_id":"gpt-x","sampling":{"temperature":0},"tools":[]}'
    for seq in (3, 1, 2):
        run(journal.write(replace(entry(entity=ALICE, seq=seq, response=f"r{seq}".encode()),
                                  request=summary)))
    run(journal.write(entry(entity=BOB, seq=1)))
    listed = run(journal.entries_of(ALICE))  # type: ignore[attr-defined]
    assert [(e.seq, e.request) for e in listed] == [(1, summary), (2, summary), (3, summary)]
    assert next(iter(run(journal.read(ALICE, 2)).values())).request == summary


@only("sqlite")
def test_a_journal_an_earlier_version_made_gains_the_request_column(
        journals: Journals, run: Run[Any]) -> None:
    """An existing database is brought up to date on open; its old rows read as unsummarised."""
    with sqlite3.connect(journals.path) as connection:
        connection.execute(
            "CREATE TABLE call_journal (cache_key TEXT NOT NULL PRIMARY KEY, entity_key BLOB "
            "NOT NULL, seq INTEGER NOT NULL, response BLOB NOT NULL, sha256 BLOB NOT NULL, "
            "digest_only INTEGER NOT NULL, created_at_ms INTEGER NOT NULL, expire_at_ms "
            "INTEGER NOT NULL)")
        old = entry()
        connection.execute("INSERT INTO call_journal VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (old.cache_key, old.entity_key, old.seq, old.response, old.sha256,
                            0, old.created_at_ms, old.expire_at_ms))
    connection.close()
    journal = journals.open()
    assert dict(run(journal.read(ALICE, 1))) == {old.cache_key: old}
    run(journal.write(replace(entry(seq=2), request='{"model_id":"m"}')))
    assert next(iter(run(journal.read(ALICE, 2)).values())).request == '{"model_id":"m"}'
