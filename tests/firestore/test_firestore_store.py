"""Firestore-specific behaviour of FirestoreLongtermStore, on the Firestore-protocol test server.

The backend-neutral contract lives in tests/contract; this module covers what
only Firestore has: the document layout, the document-id encoding, limits
checked before any I/O, the client's lifecycle, and transport failures.
"""

from __future__ import annotations

import asyncio
import hashlib
import pickle
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud.firestore_v1 import AsyncClient
from hypothesis import given
from hypothesis import strategies as st

from beam_agents.errors import (
    ConfigError,
    MemoryContractError,
    MemoryUnavailable,
    ScopeViolation,
    StoreLimitError,
)
from beam_agents.memory._store import MAX_KEY_BYTES, LongtermRecord
from beam_agents.stores.firestore import (
    MAX_DOCUMENT_BYTES,
    MAX_REQUEST_BYTES,
    MAX_WRITES_PER_COMMIT,
    FirestoreLongtermConfig,
    FirestoreLongtermStore,
    decode_document_id,
    document_size,
    encode_document_id,
    entity_document_id,
)
from beam_agents.stores.firestore import _longterm as fs
from tests._firestore_server import EMULATOR_HOST_ENV

if TYPE_CHECKING:
    from tests.conftest import Run

ENTITY = b"\x00entity\xff"


def rec(key: str, value: bytes = b"v", *, seq: int = 1, entity: bytes = ENTITY,
        updated_at_ms: int = 1_700_000_000_000) -> LongtermRecord:
    return LongtermRecord(entity_key=entity, key=key, value=value, seq=seq,
                          updated_at_ms=updated_at_ms)


def is_valid_document_id(document_id: str) -> bool:
    """Firestore's documented constraints on document ids."""
    return (
        bool(document_id)
        and "/" not in document_id
        and document_id not in (".", "..")
        and re.fullmatch(r"__.*__", document_id, re.DOTALL) is None
        and len(document_id.encode("utf-8")) <= 1500
    )


def raw_client(config: FirestoreLongtermConfig) -> AsyncClient:
    return AsyncClient(project=config.project, database=config.database)


def no_client() -> AsyncClient:
    raise AssertionError("this call must not build a Firestore client (no I/O)")


# -- document layout ------------------------------------------------------------------


def test_a_record_is_one_document_under_its_entity_with_the_key_in_a_field(
    store: FirestoreLongtermStore, config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    run(store.stage(ENTITY, [rec("notes/é", b"\x00\x01", seq=5, updated_at_ms=42)]))
    run(store.flush(ENTITY))

    async def read() -> dict[str, Any] | None:
        client = raw_client(config)
        path = f"{config.collection}/{ENTITY.hex()}/records/notes%sé"
        snapshot = await client.document(path).get()
        return snapshot.to_dict()

    assert run(read()) == {
        "entity_key": ENTITY,
        "key": "notes/é",
        "key_utf8_hex": "notes/é".encode().hex(),
        "value": b"\x00\x01",
        "seq": 5,
        "updated_at_ms": 42,
    }


def test_search_orders_by_code_point_even_where_utf16_order_differs(
    store: FirestoreLongtermStore, run: Run[Any]
) -> None:
    # U+FFFF < U+1F600 by code point, but its UTF-16 unit 0xFFFF > 0xD83D.
    run(store.stage(ENTITY, [rec("\U0001f600"), rec("\uffff")]))
    run(store.flush(ENTITY))

    assert [r.key for r in run(store.search(ENTITY, "", 1))] == ["\uffff"]


def test_a_flush_is_one_transaction_holding_every_surviving_write(
    config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    transactions: list[Any] = []

    def spying_client() -> AsyncClient:
        client = raw_client(config)
        make = client.transaction

        def transaction(**kwargs: Any) -> Any:
            created = make(**kwargs)
            transactions.append(created)
            return created

        client.transaction = transaction  # type: ignore[method-assign]
        return client

    store = FirestoreLongtermStore(config, client_factory=spying_client)
    try:
        run(store.stage(ENTITY, [rec("old", seq=9)]))
        run(store.flush(ENTITY))
        run(store.stage(ENTITY, [rec("a", seq=3), rec("b", seq=3), rec("old", seq=3)]))

        receipt = run(store.flush(ENTITY))
    finally:
        run(store.close())

    assert (receipt.committed, receipt.superseded) == (("a", "b"), ("old",))
    assert len(transactions) == 2
    assert len(transactions[1].write_results) == 2


def test_a_flush_of_the_maximum_batch_commits(store: FirestoreLongtermStore,
                                              run: Run[Any]) -> None:
    keys = [f"k{i:03d}" for i in range(MAX_WRITES_PER_COMMIT)]
    run(store.stage(ENTITY, [rec(k) for k in keys]))

    assert run(store.flush(ENTITY)).committed == tuple(keys)
    assert len(run(store.search(ENTITY, "k", 1000))) == MAX_WRITES_PER_COMMIT


# -- ids ------------------------------------------------------------------------------

NASTY_KEYS = [
    "/", "//", "a/b", "/lead", "trail/", ".", "..", "...", ".hidden", "a.b", "_", "__",
    "___", "__x__", "__.*__", "_private", "x__", "%", "%%", "%s", "%d", "%u", "%2F", "a%/b",
    "\x00", "\x00/\x00", " ", "`", "\\", "*", "#[]", "é", "\U0001f600", "\u202e", "\ufeff",
    "x" * MAX_KEY_BYTES, "/" * MAX_KEY_BYTES, "%" * MAX_KEY_BYTES, "." * MAX_KEY_BYTES,
    "_" * MAX_KEY_BYTES, "é" * (MAX_KEY_BYTES // 2),
]


@pytest.mark.parametrize("key", NASTY_KEYS, ids=repr)
def test_document_ids_are_valid_and_decode_back(key: str) -> None:
    document_id = encode_document_id(key)

    assert is_valid_document_id(document_id)
    assert decode_document_id(document_id) == key


@given(key=st.text(min_size=1).filter(lambda k: len(k.encode("utf-8", "surrogatepass"))
                                     <= MAX_KEY_BYTES and not any(
                                         0xD800 <= ord(c) < 0xE000 for c in k)))
def test_any_key_encodes_to_a_valid_id_that_decodes_back(key: str) -> None:
    document_id = encode_document_id(key)

    assert is_valid_document_id(document_id)
    assert decode_document_id(document_id) == key


@given(pair=st.lists(st.text(alphabet="%/._sdux", min_size=1, max_size=6), min_size=2,
                     max_size=2, unique=True))
def test_distinct_keys_get_distinct_ids(pair: list[str]) -> None:
    first, second = pair

    assert encode_document_id(first) != encode_document_id(second)


@pytest.mark.parametrize("document_id", ["", "%", "%x", "a%", "a%d", "b%u", "_x", ".", "a/b"])
def test_decoding_rejects_ids_the_encoding_never_produces(document_id: str) -> None:
    with pytest.raises(ValueError, match="not an encoded long-term key"):
        decode_document_id(document_id)


@pytest.mark.parametrize(("entity_key", "document_id"),
                         [(b"", "-"), (b"\x00\xff", "00ff"), (b"-", "2d"), (b"ab", "6162")])
def test_entity_ids_are_hex_with_a_marker_for_the_empty_key(entity_key: bytes,
                                                            document_id: str) -> None:
    assert entity_document_id(entity_key) == document_id
    assert is_valid_document_id(document_id)


def test_nasty_keys_round_trip_through_the_server(store: FirestoreLongtermStore,
                                                  run: Run[Any]) -> None:
    records = [rec(key, key.encode()) for key in NASTY_KEYS]
    run(store.stage(ENTITY, records))
    run(store.flush(ENTITY))

    loaded = [run(store.load(ENTITY, key)) for key in NASTY_KEYS]
    searched = run(store.search(ENTITY, "", len(NASTY_KEYS) + 1))

    assert [r.SerializeToString(deterministic=True) for r in loaded] == [
        r.SerializeToString(deterministic=True) for r in records]
    assert [r.key for r in searched] == sorted(NASTY_KEYS)


# -- limits, checked before any I/O -----------------------------------------------------


def test_document_size_follows_firestores_size_rules() -> None:
    # Name: "c" 2 + "01" 3 + "records" 8 + "k" 2 + 16 = 31. Fields: entity_key 11+1,
    # key 4+2, key_utf8_hex 13+3, value 6+3, seq 4+8, updated_at_ms 14+8 = 77. Plus 32.
    record = LongtermRecord(entity_key=b"\x01", key="k", value=b"xyz", seq=1, updated_at_ms=2)

    assert document_size("c", record) == 140


def _value_filling(collection: str, size: int) -> bytes:
    base = document_size(collection, rec("big", b""))
    return b"x" * (size - base)


def test_a_document_of_exactly_1_mib_is_accepted_and_one_byte_more_is_refused(
    config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    store = FirestoreLongtermStore(config, client_factory=no_client)
    fits = rec("big", _value_filling(config.collection, MAX_DOCUMENT_BYTES))
    too_big = rec("big", _value_filling(config.collection, MAX_DOCUMENT_BYTES + 1))

    assert run(store.stage(ENTITY, [fits])) == ("big",)
    with pytest.raises(StoreLimitError) as caught:
        run(store.stage(ENTITY, [rec("other"), too_big]))

    assert (caught.value.limit, caught.value.attempted) == (MAX_DOCUMENT_BYTES,
                                                           MAX_DOCUMENT_BYTES + 1)
    assert "'big'" in str(caught.value)
    assert run(store.discard(ENTITY)).discarded == ("big",)


def test_more_than_500_pending_writes_are_refused_before_io(
    config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    store = FirestoreLongtermStore(config, client_factory=no_client)
    run(store.stage(ENTITY, [rec(f"k{i}") for i in range(MAX_WRITES_PER_COMMIT)]))

    with pytest.raises(StoreLimitError) as caught:
        run(store.stage(ENTITY, [rec("one-too-many")]))

    assert (caught.value.limit, caught.value.attempted) == (MAX_WRITES_PER_COMMIT,
                                                           MAX_WRITES_PER_COMMIT + 1)
    # Re-staging a pending key adds no write, so it is still accepted.
    assert run(store.stage(ENTITY, [rec("k0", b"again")])) == ("k0",)
    assert len(run(store.discard(ENTITY)).discarded) == MAX_WRITES_PER_COMMIT


def test_a_commit_over_the_request_size_limit_is_refused_before_io(
    config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    store = FirestoreLongtermStore(config, client_factory=no_client)
    chunk = b"x" * 1_000_000
    run(store.stage(ENTITY, [rec(f"k{i}", chunk) for i in range(10)]))

    with pytest.raises(StoreLimitError) as caught:
        run(store.stage(ENTITY, [rec("k10", chunk)]))

    assert caught.value.limit == MAX_REQUEST_BYTES
    assert caught.value.attempted > MAX_REQUEST_BYTES
    assert len(run(store.discard(ENTITY)).discarded) == 10


def _longest_entity(collection: str, key: str, value: bytes) -> int:
    """The longest entity key whose record of `key` and `value` is exactly 1 MiB."""
    sample = LongtermRecord(entity_key=bytes(1_000), key=key, value=value, seq=1,
                            updated_at_ms=1)
    return 1_000 + MAX_DOCUMENT_BYTES - document_size(collection, sample)


def test_an_entity_key_is_refused_only_by_the_document_it_makes(
    config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    """Any length has an id; the record holds the key, so the 1 MiB document bounds it."""
    store = FirestoreLongtermStore(config, client_factory=no_client)
    longest = _longest_entity(config.collection, "k", b"v")
    assert longest == 1_048_360
    too_long = b"e" * (longest + 1)

    with pytest.raises(StoreLimitError) as caught:
        run(store.stage(too_long, [rec("k", entity=too_long)]))

    assert (caught.value.limit, caught.value.attempted) == (MAX_DOCUMENT_BYTES,
                                                           MAX_DOCUMENT_BYTES + 1)
    assert f"{longest + 1}-byte entity key" in str(caught.value)
    assert run(store.stage(too_long[1:], [rec("k", entity=too_long[1:])])) == ("k",)


@pytest.mark.parametrize(("key", "value"), [("k", b"v"), ("%" * MAX_KEY_BYTES, b"")],
                         ids=["short-key", "longest-id"])
def test_the_longest_entity_key_a_record_holds_round_trips_on_the_server(
    store: FirestoreLongtermStore, config: FirestoreLongtermConfig, run: Run[Any],
    key: str, value: bytes
) -> None:
    entity = b"E" * _longest_entity(config.collection, key, value)
    record = rec(key, value, entity=entity)
    assert document_size(config.collection, record) == MAX_DOCUMENT_BYTES

    run(store.stage(entity, [record]))
    assert run(store.flush(entity)).committed == (key,)

    assert wire(run(store.load(entity, key))) == wire(record)
    assert [r.key for r in run(store.search(entity, key[:3], 2))] == [key]
    assert run(store.load(entity[:-1], key)) is None


def wire(record: LongtermRecord | None) -> bytes | None:
    return None if record is None else record.SerializeToString(deterministic=True)


@pytest.mark.parametrize(("length", "document_id"), [
    (750, "65" * 750),
    (751, "sha256-" + hashlib.sha256(b"e" * 751).hexdigest()),
])
def test_entity_ids_are_hex_up_to_750_bytes_and_a_digest_past_them_on_the_server(
    store: FirestoreLongtermStore, config: FirestoreLongtermConfig, run: Run[Any],
    length: int, document_id: str
) -> None:
    """Entities of up to 750 bytes keep the ids every version gave them (1,500 bytes at most)."""
    entity = b"e" * length
    run(store.stage(entity, [rec("k", entity=entity)]))
    run(store.flush(entity))

    async def read() -> dict[str, Any] | None:
        client = raw_client(config)
        snapshot = await client.document(f"{config.collection}/{document_id}/records/k").get()
        return snapshot.to_dict()

    assert entity_document_id(entity) == document_id
    assert is_valid_document_id(document_id)
    stored = run(read())
    assert stored is not None and stored["entity_key"] == entity


def test_a_record_of_another_entity_under_a_digest_id_is_a_scope_violation(
    store: FirestoreLongtermStore, config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    """Should two long keys ever share a digest id, neither is handed the other's rows."""
    entity, other = b"a" * 1_000, b"b" * 1_000
    run(store.stage(other, [rec("k", b"other's", entity=other)]))
    run(store.flush(other))

    async def move() -> None:
        client = raw_client(config)
        source = await client.document(
            f"{config.collection}/{entity_document_id(other)}/records/k").get()
        await client.document(f"{config.collection}/{entity_document_id(entity)}/records/k").set(
            source.to_dict())

    run(move())
    for call in (store.load(entity, "k"), store.search(entity, "", 5)):
        with pytest.raises(ScopeViolation):
            run(call)
    run(store.stage(entity, [rec("k", b"mine", entity=entity)]))
    with pytest.raises(ScopeViolation):  # the flush reads the standing row first
        run(store.flush(entity))
    assert run(store.load(other, "k")).value == b"other's"  # type: ignore[union-attr]


# -- client lifecycle ----------------------------------------------------------------------


def test_open_builds_no_client_and_first_use_builds_exactly_one(
    config: FirestoreLongtermConfig, run: Run[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[AsyncClient] = []

    def counting(**kwargs: Any) -> AsyncClient:
        client = AsyncClient(**kwargs)
        built.append(client)
        return client

    monkeypatch.setattr(fs, "AsyncClient", counting)
    store = config.open()
    assert built == []

    async def many_loads() -> None:
        await asyncio.gather(*(store.load(ENTITY, f"k{i}") for i in range(5)))

    run(many_loads())
    run(store.close())

    assert len(built) == 1
    assert built[0].project == config.project


def test_close_shuts_the_channel_and_later_calls_refuse(
    config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    built: list[AsyncClient] = []

    def factory() -> AsyncClient:
        built.append(raw_client(config))
        return built[-1]

    store = FirestoreLongtermStore(config, client_factory=factory)
    run(store.load(ENTITY, "k"))
    channel = built[0]._firestore_api.transport.grpc_channel

    run(store.close())
    run(store.close())

    assert channel.get_state().name == "SHUTDOWN"
    with pytest.raises(MemoryContractError):
        run(store.load(ENTITY, "k"))
    assert len(built) == 1


def test_closing_an_unused_store_builds_no_client(config: FirestoreLongtermConfig,
                                                 run: Run[Any]) -> None:
    store = FirestoreLongtermStore(config, client_factory=no_client)

    run(store.close())


def test_the_config_pickles_and_holds_no_client(config: FirestoreLongtermConfig,
                                                run: Run[Any]) -> None:
    store = config.open()
    run(store.load(ENTITY, "k"))  # a live client exists now
    run(store.close())

    copy = pickle.loads(pickle.dumps(config))

    assert copy == config
    assert set(FirestoreLongtermConfig.__slots__) == {"project", "database", "collection",
                                                      "timeout_ms"}


@pytest.mark.parametrize(
    ("overrides", "field"),
    [({"collection": "a/b"}, "collection"), ({"collection": "."}, "collection"),
     ({"collection": ".."}, "collection"), ({"collection": "__x__"}, "collection"),
     ({"collection": ""}, "collection"), ({"collection": "c" * 1501}, "collection"),
     ({"project": ""}, "project"), ({"database": ""}, "database"),
     ({"timeout_ms": 0}, "timeout_ms"), ({"timeout_ms": True}, "timeout_ms")],
)
def test_the_config_names_the_field_it_rejects(overrides: dict[str, Any], field: str) -> None:
    settings = {"project": "p", **overrides}

    with pytest.raises(ConfigError) as caught:
        FirestoreLongtermConfig(**settings)

    assert caught.value.field == field


def test_importing_the_stores_package_loads_no_google_cloud() -> None:
    # google.cloud itself may be a namespace package registered at start-up by
    # .pth files; what must not appear is anything imported by our modules.
    code = (
        "import pickle, sys\n"
        "before = set(sys.modules)\n"
        "import beam_agents.stores as s\n"
        "import beam_agents.memory._store\n"
        "c = s.FirestoreLongtermConfig(project='p')\n"
        "pickle.loads(pickle.dumps(c))\n"
        "s.SqliteLongtermConfig(path='x.db')\n"
        "new = set(sys.modules) - before\n"
        "FORBIDDEN = ('google.cloud', 'google.api_core', 'google.auth', 'grpc', 'sqlite3',"
        " '_sqlite3')\n"
        "print(sorted(m for m in new if m.startswith(FORBIDDEN)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)

    assert done.stdout.strip() == "[]"


# -- transport failures --------------------------------------------------------------------


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]  # bound but never listening: connections are refused


def test_an_unreachable_server_raises_memory_unavailable_within_the_timeout(
    run: Run[Any], monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    monkeypatch.setenv(EMULATOR_HOST_ENV, f"127.0.0.1:{closed_port}")
    store = FirestoreLongtermConfig(project=f"down-{uuid.uuid4().hex[:8]}",
                                    timeout_ms=300).open()
    run(store.stage(ENTITY, [rec("kept")]))
    try:
        for call in (store.load(ENTITY, "k"), store.search(ENTITY, "", 5), store.flush(ENTITY)):
            started = time.monotonic()
            with pytest.raises(MemoryUnavailable, match=r"within 300 ms|failed"):
                run(call)
            assert time.monotonic() - started < 5
        assert run(store.discard(ENTITY)).discarded == ("kept",)
    finally:
        run(store.close())


def test_sdk_errors_never_escape_untranslated(
    config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    class Failing:
        def collection(self, *args: Any) -> Any:
            raise api_exceptions.ServiceUnavailable("injected")

        def close(self) -> None:
            pass

    store = FirestoreLongtermStore(config, client_factory=Failing)  # type: ignore[arg-type]
    run(store.stage(ENTITY, [rec("k")]))

    with pytest.raises(MemoryUnavailable) as caught:
        run(store.flush(ENTITY))

    assert isinstance(caught.value.__cause__, api_exceptions.ServiceUnavailable)
    assert run(store.discard(ENTITY)).discarded == ("k",)
    run(store.close())


# -- what is read back -------------------------------------------------------------------


def test_a_document_of_another_entity_is_never_returned(
    store: FirestoreLongtermStore, config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    async def plant() -> None:
        client = raw_client(config)
        await client.document(f"{config.collection}/{ENTITY.hex()}/records/k").set(
            {"entity_key": b"intruder", "key": "k", "key_utf8_hex": "6b", "value": b"x",
             "seq": 1, "updated_at_ms": 1})

    run(plant())

    with pytest.raises(ScopeViolation) as caught:
        run(store.load(ENTITY, "k"))
    assert (caught.value.expected, caught.value.actual) == (ENTITY, b"intruder")
    with pytest.raises(ScopeViolation):
        run(store.search(ENTITY, "", 5))


def test_a_malformed_document_is_reported_not_returned(
    store: FirestoreLongtermStore, config: FirestoreLongtermConfig, run: Run[Any]
) -> None:
    async def plant() -> None:
        client = raw_client(config)
        await client.document(f"{config.collection}/{ENTITY.hex()}/records/k").set(
            {"entity_key": ENTITY, "key": "k"})

    run(plant())

    with pytest.raises(MemoryContractError, match="not a long-term record"):
        run(store.load(ENTITY, "k"))
