"""The LongtermStore contract, run against every backend (memory, sqlite, firestore).

Each test states one promise of `beam_agents.memory._store.LongtermStore`; the
``store`` fixture makes it hold for all three backends, and a hypothesis state
machine checks each backend against a plain dict model.
"""

from __future__ import annotations

import asyncio
import pickle
import sqlite3
import threading
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from beam_agents.errors import (
    MemoryContractError,
    MemoryUnavailable,
    ScopeViolation,
    StoreLimitError,
)
from beam_agents.memory._store import (
    MAX_KEY_BYTES,
    MAX_SEQ,
    DiscardingLongtermStore,
    DiscardReceipt,
    FlushReceipt,
    LongtermRecord,
    LongtermStore,
    validate_key,
    validate_value,
)
from beam_agents.stores import InMemoryLongtermConfig, InMemoryLongtermStore, SqliteLongtermConfig
from beam_agents.stores.sqlite._base import enter_wal
from beam_agents.stores.sqlite._longterm import prefix_upper_bound

if TYPE_CHECKING:
    from tests.conftest import Run
    from tests.contract.conftest import Outage, StoreFactory

ALICE = b"tenant-alice"
BOB = b"tenant-bob"


def rec(key: str, value: bytes = b"v", *, seq: int = 1, entity: bytes = ALICE,
        updated_at_ms: int = 1_700_000_000_000) -> LongtermRecord:
    return LongtermRecord(entity_key=entity, key=key, value=value, seq=seq,
                          updated_at_ms=updated_at_ms)


def wire(records: Iterable[LongtermRecord | None]) -> list[bytes | None]:
    """Rows as deterministic bytes: what "byte-identical" compares."""
    return [None if r is None else r.SerializeToString(deterministic=True) for r in records]


def commit(run: Run[Any], store: LongtermStore, *records: LongtermRecord,
           entity: bytes = ALICE) -> FlushReceipt:
    run(store.stage(entity, list(records)))
    receipt: FlushReceipt = run(store.flush(entity))
    return receipt


# -- the port's shape ----------------------------------------------------------


def test_every_backend_is_a_discarding_store(store: LongtermStore) -> None:
    assert isinstance(store, LongtermStore)
    assert isinstance(store, DiscardingLongtermStore)


# -- reads, staging and flush --------------------------------------------------


def test_load_of_an_absent_key_returns_none(store: LongtermStore, run: Run[Any]) -> None:
    assert run(store.load(ALICE, "never-written")) is None


def test_staged_records_are_invisible_until_flush(store: LongtermStore, run: Run[Any]) -> None:
    assert run(store.stage(ALICE, [rec("profile")])) == ("profile",)

    assert run(store.load(ALICE, "profile")) is None
    assert run(store.search(ALICE, "", 10)) == ()


def test_flush_commits_pending_records_and_reports_their_keys(
    store: LongtermStore, run: Run[Any]
) -> None:
    staged = [rec("b", b"2"), rec("a", b"1"), rec("c", b"")]
    run(store.stage(ALICE, staged))

    receipt = run(store.flush(ALICE))

    assert receipt == FlushReceipt(entity_key=ALICE, committed=("a", "b", "c"))
    loaded = [run(store.load(ALICE, key)) for key in ("a", "b", "c")]
    assert wire(loaded) == wire(sorted(staged, key=lambda r: r.key))


def test_flush_with_nothing_pending_returns_an_empty_receipt(
    store: LongtermStore, run: Run[Any]
) -> None:
    assert run(store.flush(ALICE)) == FlushReceipt(entity_key=ALICE)
    commit(run, store, rec("a"))

    assert run(store.flush(ALICE)) == FlushReceipt(entity_key=ALICE)


def test_flush_with_nothing_pending_does_no_io(outage: Outage, run: Run[Any]) -> None:
    """Even an unreachable store flushes an empty buffer: there is nothing to send."""
    outage.fail()
    try:
        assert run(outage.store.flush(ALICE)) == FlushReceipt(entity_key=ALICE)
    finally:
        outage.heal()


def test_flush_of_one_entity_leaves_another_entitys_buffer_pending(
    store: LongtermStore, run: Run[Any]
) -> None:
    run(store.stage(ALICE, [rec("k", entity=ALICE)]))
    run(store.stage(BOB, [rec("k", entity=BOB)]))

    run(store.flush(ALICE))

    assert run(store.load(BOB, "k")) is None
    assert run(store.flush(BOB)).committed == ("k",)


def test_stage_returns_sorted_unique_keys(store: LongtermStore, run: Run[Any]) -> None:
    accepted = run(store.stage(ALICE, [rec("b"), rec("a"), rec("b", b"again")]))

    assert accepted == ("a", "b")


def test_later_stage_of_a_key_replaces_the_earlier_one(
    store: LongtermStore, run: Run[Any]
) -> None:
    run(store.stage(ALICE, [rec("k", b"first", seq=3), rec("k", b"second", seq=3)]))
    run(store.stage(ALICE, [rec("k", b"third", seq=3)]))

    assert run(store.flush(ALICE)).committed == ("k",)
    assert wire([run(store.load(ALICE, "k"))]) == wire([rec("k", b"third", seq=3)])


def test_staged_records_are_copied(store: LongtermStore, run: Run[Any]) -> None:
    record = rec("k", b"staged")
    run(store.stage(ALICE, [record]))
    record.value = b"mutated after stage"

    run(store.flush(ALICE))

    assert run(store.load(ALICE, "k")).value == b"staged"


# -- the seq guard (invariant 5) ----------------------------------------------


def test_equal_seq_reapplies(store: LongtermStore, run: Run[Any]) -> None:
    commit(run, store, rec("k", b"first", seq=7))

    receipt = commit(run, store, rec("k", b"rewritten", seq=7, updated_at_ms=5))

    assert receipt.committed == ("k",)
    assert wire([run(store.load(ALICE, "k"))]) == wire(
        [rec("k", b"rewritten", seq=7, updated_at_ms=5)]
    )


def test_older_seq_never_overwrites_a_newer_row(store: LongtermStore, run: Run[Any]) -> None:
    commit(run, store, rec("k", b"newer", seq=9), rec("other", seq=9))

    receipt = commit(run, store, rec("k", b"older", seq=8), rec("fresh", seq=8))

    assert receipt == FlushReceipt(entity_key=ALICE, committed=("fresh",), superseded=("k",))
    assert wire([run(store.load(ALICE, "k"))]) == wire([rec("k", b"newer", seq=9)])


def test_newer_seq_overwrites_an_older_row(store: LongtermStore, run: Run[Any]) -> None:
    commit(run, store, rec("k", b"old", seq=1))

    assert commit(run, store, rec("k", b"new", seq=2)).committed == ("k",)
    assert run(store.load(ALICE, "k")).value == b"new"


@pytest.mark.spec("M21")
def test_a_retried_flush_of_the_same_batch_converges_byte_identically(
    store: LongtermStore, run: Run[Any]
) -> None:
    """The re-flush applies via the equal-seq guard; stored rows are byte-identical."""
    batch = [rec("profile", b"\x00\x01", seq=4), rec("notes/1", b"n", seq=4)]
    first = commit(run, store, *batch)
    rows_after_first = wire(run(store.search(ALICE, "", 10)))

    replay = commit(run, store, *[LongtermRecord.FromString(r.SerializeToString())
                                  for r in batch])

    assert replay == first
    assert wire(run(store.search(ALICE, "", 10))) == rows_after_first


def test_flush_rejects_seq_beyond_a_signed_64_bit_integer(
    store: LongtermStore, run: Run[Any]
) -> None:
    with pytest.raises(StoreLimitError) as caught:
        run(store.stage(ALICE, [rec("ok", seq=MAX_SEQ), rec("huge", seq=MAX_SEQ + 1)]))

    assert caught.value.limit == MAX_SEQ
    assert run(store.flush(ALICE)) == FlushReceipt(entity_key=ALICE)


# -- search ----------------------------------------------------------------------


def test_search_returns_prefix_matches_in_key_order_up_to_limit(
    store: LongtermStore, run: Run[Any]
) -> None:
    commit(run, store, *[rec(k) for k in ("note/3", "note/1", "notebook", "note/2", "nota")])

    found = run(store.search(ALICE, "note/", 2))

    assert [r.key for r in found] == ["note/1", "note/2"]
    assert [r.key for r in run(store.search(ALICE, "note", 10))] == [
        "note/1", "note/2", "note/3", "notebook"]
    assert run(store.search(ALICE, "note", 0)) == ()
    assert run(store.search(ALICE, "zzz", 10)) == ()


def test_search_never_returns_another_entitys_rows(store: LongtermStore, run: Run[Any]) -> None:
    commit(run, store, rec("shared/a", b"alice", entity=ALICE), entity=ALICE)
    commit(run, store, rec("shared/a", b"bob", entity=BOB), rec("shared/b", b"bob", entity=BOB),
           entity=BOB)

    alice = run(store.search(ALICE, "shared/", 10))
    bob_everything = run(store.search(BOB, "", 10))

    assert [(r.entity_key, r.key, r.value) for r in alice] == [(ALICE, "shared/a", b"alice")]
    assert {r.entity_key for r in bob_everything} == {BOB}
    assert run(store.load(BOB, "shared/a")).value == b"bob"


# Keys chosen so that LIKE/GLOB wildcards, case folding, naive prefix
# arithmetic and UTF-16 ordering would all give wrong answers.
TRICKY_KEYS = (
    "100%", "100x", "1000", "a%b", "axb", "a_b", "aXb", "a/b", "a/c", "ab", "A",
    "e", "é", "éa", "f", "\ud7ff", "\ue000", "\uffff", "\U0001f600", "\U0001f600x",
    "\U0010ffff", "\U0010ffff\U0010ffff", "_", "__x__", ".", "..", "%", "*", "[a]",
)


@pytest.mark.parametrize(
    "prefix",
    ["", "%", "_", "/", "a", "a%", "a_", "a/", "100%", "é", "\uffff", "\U0001f600",
     "\U0010ffff", "\ud7ff", "*", "[", "A", "."],
)
def test_search_handles_any_unicode_prefix(
    store: LongtermStore, run: Run[Any], prefix: str
) -> None:
    commit(run, store, *[rec(k, k.encode()) for k in TRICKY_KEYS])

    found = [r.key for r in run(store.search(ALICE, prefix, 100))]

    assert found == sorted(k for k in TRICKY_KEYS if k.startswith(prefix))


@pytest.mark.parametrize("prefix", [b"bytes", 3, None])
def test_search_rejects_a_prefix_that_is_not_text(
    store: LongtermStore, run: Run[Any], prefix: object
) -> None:
    with pytest.raises(ValueError, match="prefix"):
        run(store.search(ALICE, prefix, 10))  # type: ignore[arg-type]


def test_search_rejects_a_negative_limit(store: LongtermStore, run: Run[Any]) -> None:
    with pytest.raises(ValueError, match="limit"):
        run(store.search(ALICE, "", -1))


# -- scope and validation ---------------------------------------------------------


def test_stage_of_a_foreign_record_raises_scope_violation_and_stages_nothing(
    store: LongtermStore, run: Run[Any]
) -> None:
    with pytest.raises(ScopeViolation) as caught:
        run(store.stage(ALICE, [rec("mine"), rec("theirs", entity=BOB)]))

    assert (caught.value.expected, caught.value.actual) == (ALICE, BOB)
    assert run(store.flush(ALICE)) == FlushReceipt(entity_key=ALICE)
    assert run(store.flush(BOB)) == FlushReceipt(entity_key=BOB)
    assert run(store.load(ALICE, "mine")) is None


@pytest.mark.parametrize(
    ("key", "error"),
    [("", "empty"), ("x" * (MAX_KEY_BYTES + 1), "513"), ("é" * 257, "514")],
)
def test_stage_rejects_unusable_keys_and_stages_nothing(
    store: LongtermStore, run: Run[Any], key: str, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        run(store.stage(ALICE, [rec("fine"), rec(key)]))

    assert run(store.flush(ALICE)) == FlushReceipt(entity_key=ALICE)


def test_a_key_of_exactly_the_limit_round_trips(store: LongtermStore, run: Run[Any]) -> None:
    key = "é" * (MAX_KEY_BYTES // 2)  # 512 UTF-8 bytes

    commit(run, store, rec(key))

    assert run(store.load(ALICE, key)).key == key


@pytest.mark.parametrize("records", [rec("lonely"), "text", b"bytes", [b"not a record"]])
def test_stage_rejects_anything_but_a_sequence_of_records(
    store: LongtermStore, run: Run[Any], records: object
) -> None:
    with pytest.raises(TypeError):
        run(store.stage(ALICE, records))  # type: ignore[arg-type]


def test_load_rejects_a_key_that_is_not_text(store: LongtermStore, run: Run[Any]) -> None:
    with pytest.raises(ValueError, match="text"):
        run(store.load(ALICE, b"bytes"))  # type: ignore[arg-type]


def test_entity_key_must_be_bytes(store: LongtermStore, run: Run[Any]) -> None:
    with pytest.raises(TypeError, match="entity_key"):
        run(store.load("alice", "k"))  # type: ignore[arg-type]


def test_the_empty_entity_key_is_a_scope_of_its_own(store: LongtermStore, run: Run[Any]) -> None:
    commit(run, store, rec("k", b"empty", entity=b""), entity=b"")

    assert run(store.load(b"", "k")).value == b"empty"
    assert run(store.load(ALICE, "k")) is None


#: The longest record keys, by their UTF-8 bytes and their Firestore document id:
#: "%" doubles in the id (1,024 bytes), 4-byte characters make the longest hex.
LONGEST_KEYS = ("%" * MAX_KEY_BYTES, "\U0001f600" * (MAX_KEY_BYTES // 4), "k" * MAX_KEY_BYTES)


@pytest.mark.parametrize("length", [749, 750, 751, 1_500, 1_501, 4_096, 100_000])
def test_entity_keys_of_any_length_are_scopes_of_their_own(
    store: LongtermStore, run: Run[Any], length: int
) -> None:
    """Past 750 bytes Firestore's entity id is a digest; the stored key still decides."""
    entity = bytes(range(256)) * (length // 256) + b"e" * (length % 256)
    neighbours = [entity[:-1], entity + b"e", entity[:-1] + b"f"]  # same first 749+ bytes
    records = [rec(key, key.encode()[:8], entity=entity) for key in LONGEST_KEYS]
    commit(run, store, *records, entity=entity)
    for other in neighbours:
        commit(run, store, rec(LONGEST_KEYS[0], b"other", entity=other), entity=other)

    assert wire(run(store.load(entity, key)) for key in LONGEST_KEYS) == wire(records)
    assert wire(run(store.search(entity, "", 10))) == wire(sorted(records, key=lambda r: r.key))
    assert wire(run(store.search(entity, LONGEST_KEYS[1][:-1], 10))) == wire(records[1:2])
    for other in neighbours:
        assert [(r.entity_key, r.value) for r in run(store.search(other, "", 10))] == [
            (other, b"other")]


@pytest.mark.parametrize("length", [1_048_576, 4 * 1_048_576])
def test_reads_refuse_no_entity_key_for_its_length(
    store: LongtermStore, run: Run[Any], length: int
) -> None:
    """An event of up to max_event_bytes (1 MiB by default, at most 64 MiB) carries the key."""
    entity = b"e" * length

    assert run(store.load(entity, "k")) is None
    assert run(store.search(entity, "", 5)) == ()
    assert run(store.flush(entity)) == FlushReceipt(entity_key=entity)


@pytest.mark.parametrize("key", [123, b"k", None])
def test_validate_key_rejects_non_text_with_value_error_naming_it(key: object) -> None:
    with pytest.raises(ValueError, match=repr(key)):
        validate_key(key)


def test_validate_key_rejects_lone_surrogates() -> None:
    with pytest.raises(ValueError, match="UTF-8"):
        validate_key("bad\ud800")


def test_validate_key_names_the_limit() -> None:
    with pytest.raises(ValueError, match=str(MAX_KEY_BYTES)):
        validate_key("k" * (MAX_KEY_BYTES + 1))
    assert validate_key("k" * MAX_KEY_BYTES) == "k" * MAX_KEY_BYTES


@pytest.mark.parametrize("value", ["text", bytearray(b"x"), None, memoryview(b"x")])
def test_validate_value_rejects_non_bytes_with_type_error_naming_the_key(value: object) -> None:
    with pytest.raises(TypeError, match="'profile'"):
        validate_value("profile", value)
    assert validate_value("profile", b"") == b""


# -- discard -----------------------------------------------------------------------


@pytest.mark.spec("W09")
def test_discard_drops_the_pending_buffer_and_touches_nothing_committed(
    store: DiscardingLongtermStore, run: Run[Any]
) -> None:
    """The pending buffer is dropped at the store and nothing committed is touched."""
    commit(run, store, rec("kept", b"committed", seq=1))
    run(store.stage(ALICE, [rec("kept", b"pending", seq=2), rec("new", seq=2)]))

    receipt = run(store.discard(ALICE))

    assert receipt == DiscardReceipt(entity_key=ALICE, discarded=("kept", "new"))
    assert run(store.flush(ALICE)) == FlushReceipt(entity_key=ALICE)
    assert run(store.load(ALICE, "kept")).value == b"committed"
    assert run(store.load(ALICE, "new")) is None
    assert run(store.discard(ALICE)) == DiscardReceipt(entity_key=ALICE)


def test_discard_leaves_other_entities_pending(
    store: DiscardingLongtermStore, run: Run[Any]
) -> None:
    run(store.stage(ALICE, [rec("a", entity=ALICE)]))
    run(store.stage(BOB, [rec("b", entity=BOB)]))

    run(store.discard(ALICE))

    assert run(store.flush(BOB)).committed == ("b",)


# -- failure ------------------------------------------------------------------------


@pytest.mark.spec("W04")
def test_an_unreachable_store_fails_the_flush_and_keeps_the_buffer(
    outage: Outage, run: Run[Any]
) -> None:
    """The flush raises MemoryUnavailable, the pending records stay, the next flush commits."""
    store = outage.store
    run(store.stage(ALICE, [rec("a", b"1", seq=3), rec("b", b"2", seq=3)]))

    outage.fail()
    try:
        with pytest.raises(MemoryUnavailable):
            run(store.flush(ALICE))
    finally:
        outage.heal()

    assert run(store.load(ALICE, "a")) is None
    assert run(store.flush(ALICE)) == FlushReceipt(entity_key=ALICE, committed=("a", "b"))
    assert wire([run(store.load(ALICE, "a"))]) == wire([rec("a", b"1", seq=3)])


def test_a_record_staged_while_a_flush_runs_is_not_lost(
    store: LongtermStore, run: Run[Any]
) -> None:
    async def race() -> None:
        await store.stage(ALICE, [rec("k", b"first", seq=1)])
        flushing = asyncio.create_task(store.flush(ALICE))
        await asyncio.sleep(0)  # let the flush start and suspend on its I/O
        await store.stage(ALICE, [rec("k", b"second", seq=2)])
        await flushing
        await store.flush(ALICE)

    run(race())

    assert run(store.load(ALICE, "k")).value == b"second"
    assert run(store.flush(ALICE)) == FlushReceipt(entity_key=ALICE)


def test_concurrent_tasks_flush_their_entities_independently(
    store: LongtermStore, run: Run[Any]
) -> None:
    entities = [f"entity-{i}".encode() for i in range(6)]

    async def one(entity: bytes) -> FlushReceipt:
        await store.stage(entity, [rec("k", entity, entity=entity), rec("j", entity=entity)])
        return await store.flush(entity)

    async def all_of_them() -> list[FlushReceipt]:
        return list(await asyncio.gather(*(one(e) for e in entities)))

    receipts = run(all_of_them())

    assert [r.committed for r in receipts] == [("j", "k")] * len(entities)
    assert [run(store.load(e, "k")).value for e in entities] == entities


# -- lifecycle -------------------------------------------------------------------------


def test_close_is_idempotent_and_a_closed_store_refuses_work(
    store_factory: StoreFactory, run: Run[Any]
) -> None:
    store = store_factory()
    commit(run, store, rec("k"))
    run(store.stage(ALICE, [rec("pending")]))

    run(store.close())
    run(store.close())

    for call in (store.load(ALICE, "k"), store.search(ALICE, "", 1), store.flush(ALICE),
                 store.stage(ALICE, [rec("x")])):
        with pytest.raises(MemoryContractError):
            run(call)


def test_rows_survive_reopening_the_store(
    backend: str, store_factory: StoreFactory, run: Run[Any], tmp_path: Any
) -> None:
    overrides: dict[str, Any] = {
        "memory": {"name": f"reopen-{uuid.uuid4().hex}"},
        "sqlite": {"path": str(tmp_path / "reopen.db")},
        "firestore": {"project": f"reopen-{uuid.uuid4().hex[:12]}"},
    }[backend]
    first = store_factory(**overrides)
    commit(run, first, rec("k", b"durable", seq=2))
    run(first.close())

    second = store_factory(**overrides)

    assert wire([run(second.load(ALICE, "k"))]) == wire([rec("k", b"durable", seq=2)])


# -- SQLite-specific pieces the contract relies on ----------------------------------


@given(prefix=st.text(max_size=4), key=st.text(max_size=6))
def test_sqlite_prefix_bound_brackets_exactly_the_keys_with_the_prefix(
    prefix: str, key: str
) -> None:
    upper = prefix_upper_bound(prefix)
    in_range = key >= prefix and (upper is None or key < upper)
    assert in_range == key.startswith(prefix)


@pytest.mark.parametrize(
    ("prefix", "upper"),
    [("", None), ("a", "b"), ("\ud7ff", "\ue000"), ("a\U0010ffff", "b"),
     ("\U0010ffff", None), ("\uffff", "\U00010000")],
)
def test_sqlite_prefix_bound_edges(prefix: str, upper: str | None) -> None:
    assert prefix_upper_bound(prefix) == upper


def test_sqlite_uses_wal_and_a_clustered_table(tmp_path: Any, run: Run[Any]) -> None:
    store = SqliteLongtermConfig(path=str(tmp_path / "x.db")).open()
    commit(run, store, rec("k"))
    run(store.close())

    with sqlite3.connect(tmp_path / "x.db") as check:
        assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        sql = check.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'longterm_records'").fetchone()[0]
    assert "WITHOUT ROWID" in sql
    assert "PRIMARY KEY (entity_key, key)" in sql


def test_sqlite_connections_entering_wal_on_one_new_file_at_once_all_succeed(
        tmp_path: Any) -> None:
    """Parallel job instances open one new file together; none may fail to enter WAL.

    Switching a new file to WAL needs an exclusive lock, and SQLite answers two
    connections racing for it with an immediate SQLITE_BUSY, without the busy
    timeout. A bare PRAGMA loses that race about once in a hundred opens here
    (it failed a job's first flush), so 1,200 opens, six at a time.
    """
    def enter(path: str, barrier: threading.Barrier, failures: list[BaseException]) -> None:
        connection = sqlite3.connect(path, timeout=5, isolation_level=None)
        try:
            barrier.wait()
            enter_wal(connection, 5.0)
        except sqlite3.Error as exc:
            failures.append(exc)
        finally:
            connection.close()

    failures: list[BaseException] = []
    for n in range(200):
        barrier = threading.Barrier(6)
        threads = [threading.Thread(target=enter, args=(str(tmp_path / f"{n}.db"), barrier,
                                                        failures)) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


def test_sqlite_wal_switch_waits_out_a_busy_file_and_gives_up_at_the_timeout(
        tmp_path: Any) -> None:
    path = str(tmp_path / "busy.db")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # the file stays busy until the holder commits
    impatient = sqlite3.connect(path, timeout=0, isolation_level=None)
    release = threading.Timer(0.2, holder.execute, args=("COMMIT",))
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            enter_wal(impatient, 0.1)
        release.start()
        enter_wal(impatient, 5.0)  # retried past the connection's own zero timeout
        assert impatient.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        if release.is_alive():
            release.join()
        impatient.close()
        holder.close()


# -- the state machine ----------------------------------------------------------------

ENTITIES = (ALICE, b"")
KEYS = ("a", "ab", "a/b", "a%", "_", "é", "\uffff", "\U0001f600", "b")
PREFIXES = ("", "a", "a/", "a%", "_", "é", "\uffff", "\U0001f600", "z")
BATCHES = st.lists(
    st.tuples(st.sampled_from(KEYS), st.integers(0, 4), st.binary(max_size=3)),
    min_size=1, max_size=4,
)

EXAMPLES = {"memory": 120, "sqlite": 80, "firestore": 20}


def test_store_matches_a_dict_model(
    backend: str, store_factory: StoreFactory, run: Run[Any]
) -> None:
    """Random stage/flush/discard/load/search sequences agree with a dict model."""

    class StoreVersusDict(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store = store_factory()
            self.committed: dict[tuple[bytes, str], LongtermRecord] = {}
            self.pending: dict[bytes, dict[str, LongtermRecord]] = {}
            self.last_batch: tuple[bytes, list[LongtermRecord]] | None = None

        def _stage(self, entity: bytes, records: list[LongtermRecord]) -> None:
            accepted = run(self.store.stage(entity, records))
            assert accepted == tuple(sorted({r.key for r in records}))
            for record in records:
                self.pending.setdefault(entity, {})[record.key] = record

        def _flush(self, entity: bytes) -> None:
            receipt = run(self.store.flush(entity))
            committed, superseded = [], []
            for key, record in sorted(self.pending.pop(entity, {}).items()):
                row = self.committed.get((entity, key))
                if row is None or row.seq <= record.seq:
                    self.committed[(entity, key)] = record
                    committed.append(key)
                else:
                    superseded.append(key)
            assert receipt == FlushReceipt(entity_key=entity, committed=tuple(committed),
                                           superseded=tuple(superseded))

        @staticmethod
        def _records(entity: bytes, batch: list[tuple[str, int, bytes]]) -> list[LongtermRecord]:
            return [rec(k, v, seq=s, entity=entity, updated_at_ms=s * 10) for k, s, v in batch]

        @rule(entity=st.sampled_from(ENTITIES), batch=BATCHES)
        def stage(self, entity: bytes, batch: list[tuple[str, int, bytes]]) -> None:
            self._stage(entity, self._records(entity, batch))

        @rule(entity=st.sampled_from(ENTITIES), batch=BATCHES)
        def stage_and_flush(self, entity: bytes, batch: list[tuple[str, int, bytes]]) -> None:
            records = self._records(entity, batch)
            self._stage(entity, records)
            self._flush(entity)
            self.last_batch = (entity, records)

        @precondition(lambda self: self.last_batch is not None)
        @rule()
        def replay_last_batch(self) -> None:
            assert self.last_batch is not None
            entity, records = self.last_batch
            self._stage(entity, records)
            self._flush(entity)

        @rule(entity=st.sampled_from(ENTITIES))
        def flush(self, entity: bytes) -> None:
            self._flush(entity)

        @rule(entity=st.sampled_from(ENTITIES))
        def discard(self, entity: bytes) -> None:
            receipt = run(self.store.discard(entity))
            assert receipt.discarded == tuple(sorted(self.pending.pop(entity, {})))

        @rule(entity=st.sampled_from(ENTITIES), key=st.sampled_from(KEYS))
        def load(self, entity: bytes, key: str) -> None:
            assert wire([run(self.store.load(entity, key))]) == wire(
                [self.committed.get((entity, key))])

        @precondition(lambda self: bool(self.committed))
        @rule(entity=st.sampled_from(ENTITIES), limit=st.integers(1, 6), data=st.data())
        def search(self, entity: bytes, limit: int, data: st.DataObject) -> None:
            stored = sorted(k for e, k in self.committed if e == entity)
            prefixes = st.sampled_from(PREFIXES)
            if stored:  # mostly prefixes that hit something
                prefixes = st.sampled_from(stored).flatmap(
                    lambda k: st.integers(0, len(k)).map(lambda n: k[:n])) | prefixes
            prefix = data.draw(prefixes, label="prefix")
            expected = sorted(
                (r for (e, k), r in self.committed.items() if e == entity and k.startswith(prefix)),
                key=lambda r: r.key,
            )[:limit]
            assert wire(run(self.store.search(entity, prefix, limit))) == wire(expected)

        @rule(entity=st.sampled_from(ENTITIES))
        def foreign_stage_is_refused(self, entity: bytes) -> None:
            with pytest.raises(ScopeViolation):
                run(self.store.stage(entity, [rec("a", entity=BOB)]))

        @invariant()
        def pending_records_are_invisible(self) -> None:
            for entity, records in self.pending.items():
                unseen = [k for k in records if (entity, k) not in self.committed]
                if unseen:
                    assert run(self.store.load(entity, unseen[0])) is None

        def teardown(self) -> None:
            run(self.store.close())

    run_state_machine_as_test(
        StoreVersusDict,
        settings=settings(max_examples=EXAMPLES[backend], stateful_step_count=25,
                          deadline=None),
    )


def test_sqlite_a_database_that_cannot_be_opened_is_unavailable_until_it_can(
    tmp_path: Any, run: Run[Any]
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the database folder should be")
    store = SqliteLongtermConfig(path=str(blocker / "x.db")).open()
    run(store.stage(ALICE, [rec("k")]))

    with pytest.raises(MemoryUnavailable, match="not-a-dir"):
        run(store.flush(ALICE))
    blocker.unlink()

    assert run(store.flush(ALICE)).committed == ("k",)
    run(store.close())


def test_sqlite_creates_the_database_folder_on_first_use(tmp_path: Any, run: Run[Any]) -> None:
    """The first flush can come before any sink has made the output folder."""
    store = SqliteLongtermConfig(path=str(tmp_path / "out" / "deep" / "x.db")).open()
    run(store.stage(ALICE, [rec("k")]))

    assert run(store.flush(ALICE)).committed == ("k",)
    run(store.close())
    assert (tmp_path / "out" / "deep" / "x.db").is_file()


# -- the in-memory fake's test hooks ---------------------------------------------------


def test_memory_fake_logs_every_call_in_order(run: Run[Any]) -> None:
    store = InMemoryLongtermStore()

    run(store.load(ALICE, "k"))
    run(store.search(ALICE, "p", 3))
    run(store.stage(ALICE, [rec("k")]))
    run(store.flush(ALICE))
    run(store.discard(ALICE))
    run(store.close())

    assert store.operations == [
        ("load", ALICE, "k"), ("search", ALICE, "p", 3), ("stage", ALICE, ("k",)),
        ("flush", ALICE), ("discard", ALICE), ("close",)]
    assert store.operation_names() == ("load", "search", "stage", "flush", "discard", "close")


def test_memory_fake_fails_the_next_call_on_demand_and_keeps_the_buffer(run: Run[Any]) -> None:
    store = InMemoryLongtermStore()
    run(store.stage(ALICE, [rec("k")]))
    store.fail_next("flush")
    store.fail_next("flush", RuntimeError("boom"))

    with pytest.raises(MemoryUnavailable):
        run(store.flush(ALICE))
    with pytest.raises(RuntimeError, match="boom"):
        run(store.flush(ALICE))

    assert [r.key for r in store.pending(ALICE)] == ["k"]
    assert store.rows() == {}
    assert run(store.flush(ALICE)).committed == ("k",)
    assert list(store.rows(ALICE)) == [(ALICE, "k")]
    with pytest.raises(ValueError, match="unknown store operation"):
        store.fail_next("flsuh")


def test_memory_fake_unreachable_fails_only_calls_that_would_reach_a_server(
    run: Run[Any]
) -> None:
    store = InMemoryLongtermStore()
    store.unreachable = True

    assert run(store.stage(ALICE, [rec("k")])) == ("k",)
    assert run(store.discard(BOB)) == DiscardReceipt(entity_key=BOB)
    for call in (store.load(ALICE, "k"), store.search(ALICE, "", 1), store.flush(ALICE)):
        with pytest.raises(MemoryUnavailable):
            run(call)
    assert [r.key for r in store.pending(ALICE)] == ["k"]


def test_memory_config_shares_one_store_per_name_across_pickling(run: Run[Any]) -> None:
    config = InMemoryLongtermConfig(name=f"shared-{uuid.uuid4().hex}")
    try:
        first = config.open()
        second = pickle.loads(pickle.dumps(config)).open()
        commit(run, first, rec("k"))

        run(first.close())  # one holder left: still usable

        assert second is first is config.store()
        assert run(second.load(ALICE, "k")) is not None
        run(second.close())
        assert config.store().closed
        with pytest.raises(MemoryContractError):
            run(second.load(ALICE, "k"))
        assert run(config.open().load(ALICE, "k")) is not None
    finally:
        config.reset()
    assert config.store() is not first
    config.reset()
