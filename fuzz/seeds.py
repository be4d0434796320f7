"""Build the seed corpora in ``fuzz/corpus/<target>/`` with the library's own encoders.

``python -m fuzz.seeds`` rewrites every ``seed-*`` file. Seeds are valid
inputs, so that mutation starts from bytes that get past the first checks
(a fuzzer left to find the blob header, a ring version byte or a JSON field
name on its own spends most of its budget on inputs refused at byte 0), and
they are written by the encoders so they stay what the library writes. Each
seed is small: libFuzzer mutates short inputs faster, and the corpus is
committed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents._proto.memory_pb2 import ENTRY_KIND_RING, MemoryBlob
from beam_agents.errors import ProviderUnavailable, StateCorruptError
from beam_agents.memory import Memory
from beam_agents.memory._ring import encode_ring
from beam_agents.model._replay_cache import TTL_MS, ReplayCache
from beam_agents.runtime._codec import error_to_json, event_to_json
from beam_agents.runtime._errors import ErrorRecord, decode_input, error_record
from fuzz import TARGETS
from fuzz._harness import NOW_MS

__all__ = ["CORPUS", "build", "main"]

CORPUS = Path(__file__).resolve().parent / "corpus"
_EARLIER_MS = NOW_MS - 60_000  # when the seeds' state was written: a minute before


def _memories() -> dict[str, bytes]:
    def staged(edit: Callable[[Memory], None], now_ms: int = _EARLIER_MS) -> bytes:
        memory = Memory(None, now_ms=now_ms)
        edit(memory)
        return memory.to_bytes()

    def scalars(memory: Memory) -> None:
        memory.set("profile", b'{"tier":"gold"}')
        memory.set("empty", b"")
        memory.set("ключ", "значение".encode())
        memory.set("long", bytes(range(256)) + b"tail")  # a two-byte length prefix

    def rings(memory: Memory) -> None:
        for n in range(5):
            memory.append("conversation", f"turn {n}".encode(), max_items=3)
        memory.append("attachments", b"a" * 200)  # a two-byte item prefix
        memory.append("one", b"")

    def mixed(memory: Memory) -> None:
        scalars(memory)
        rings(memory)
        memory.get("profile")  # moved to most-recently-used, stamped again
        memory.delete("empty")

    # Bytes only the protobuf parser reads: a negative stamp (ten bytes) and an
    # unknown field, both accepted and re-encoded on output.
    parsed = MemoryBlob(state_schema_version=1, total_value_bytes=3)
    parsed.entries.add(key="k", value=b"\x01\x01x", last_access_ms=-5, kind=ENTRY_KIND_RING)
    return {
        "fresh": staged(lambda memory: None),
        "scalars": staged(scalars),
        "rings": staged(rings),
        "mixed": staged(mixed),
        "small-stamps": staged(mixed, now_ms=3),
        "parser-path": parsed.SerializeToString() + b"\x78\x07",
    }


def _rings() -> dict[str, bytes]:
    # The first byte says how many bytes before (low nibble) and after (high
    # nibble) the ring belong to other data (see fuzz.ring).
    return {
        "empty": b"\x00" + encode_ring([]),
        "items": b"\x00" + encode_ring([b"ab", b"", b"hello"]),
        "long-item": b"\x00" + encode_ring([b"x" * 200, b"y"]),
        "in-a-buffer": b"\x21" + b"\x12" + encode_ring([b"q", b"rs"]) + b"\x80\x01",
    }


def _caches() -> dict[str, bytes]:
    fresh = ReplayCache(None, now_ms=_EARLIER_MS)
    some = ReplayCache(None, now_ms=_EARLIER_MS)
    for n in range(3):
        some.put(f"{n:064x}", f"response {n}".encode())
    some.get(f"{0:064x}")
    digest_only = ReplayCache(None, now_ms=_EARLIER_MS)
    digest_only.put("a" * 64, b"small")
    digest_only.put("b" * 64, bytes(110_000))  # over the cap on its own: digest only
    expired = ReplayCache(None, now_ms=NOW_MS - TTL_MS - 1)
    expired.put("c" * 64, b"old")
    return {"fresh": fresh.to_bytes(), "entries": some.to_bytes(),
            "digest-only": digest_only.to_bytes(), "expired": expired.to_bytes()}


def _events() -> dict[str, AgentEvent]:
    return {
        "text": AgentEvent(entity_key=b"user-7", event_id="e-1", event_time_ms=NOW_MS,
                           payload=b"hi", attributes={"channel": "web"}),
        "json": AgentEvent(entity_key=b"user-8", event_id="e-2", event_time_ms=1,
                           payload=b'{"n":[1,2.5,null,true],"text":"hi"}'),
        "binary": AgentEvent(entity_key=b"\xff\x00k", event_time_ms=0, payload=b"\x80\xfe"),
    }


def _error_lines() -> dict[str, bytes]:
    event = _events()["text"].SerializeToString()
    decode = decode_input(b'{"entity_key": "u", "event_time_ms": -1}', "json")
    oversize = decode_input(b'{"x": "' + b"y" * 1100 + b'"}', "json", max_event_bytes=1024)
    model = error_record(ProviderUnavailable("503 from the provider", status=503),
                         stage=ErrorRecord.STAGE_MODEL, entity_key=b"user-7", seq=4,
                         event=event, event_id="e-1", traceback_bytes=0)
    model.attempts = 3
    state = error_record(StateCorruptError("memory blob is corrupt", cell="memory"),
                         stage=ErrorRecord.STAGE_STATE_CORRUPT, entity_key=b"\xff",
                         seq=9, event=_events()["binary"].SerializeToString(),
                         event_id="", traceback_bytes=0)
    records = {"decode": decode, "oversize": oversize, "model": model, "state": state}
    lines = {}
    for name, record in records.items():
        if not isinstance(record, ErrorRecord):
            raise TypeError(f"the {name} seed decoded to an event, not a dead letter")
        lines[name] = error_to_json(record)
    return lines


def build() -> dict[str, dict[str, bytes]]:
    """Every target's seeds, by name; deterministic, so a rebuild changes no file."""
    memories = _memories()
    events = _events()
    lines = _error_lines()
    corpora = {
        "wire_scan": memories,
        "memory_blob": memories,
        "ring": _rings(),
        "replay_cache": _caches(),
        "event_json": {
            **{name: event_to_json(event) for name, event in events.items()},
            "object-payload": b'{"entity_key":"u","event_time_ms":5,"payload":{"a":[{}]}}',
            "b64": b'{"entity_key_b64":"/wA=","event_time_ms":5,"payload_b64":"gA=="}',
        },
        "event_proto": {name: event.SerializeToString() for name, event in events.items()},
        "error_json": lines,
        "redrive": {"all": b"\n".join(lines.values()) + b"\n",
                    "activation-failures": lines["model"] + b"\n" + lines["state"]},
    }
    if set(corpora) != set(TARGETS):
        raise RuntimeError(f"seeds for {sorted(set(TARGETS) ^ set(corpora))} are missing")
    return corpora


def main() -> None:
    """Rewrite ``fuzz/corpus/<target>/seed-*``, removing seeds no longer built."""
    parser = argparse.ArgumentParser(prog="python -m fuzz.seeds", description=__doc__)
    parser.add_argument("--out", type=Path, default=CORPUS)
    out = parser.parse_args().out
    total = 0
    for target, seeds in build().items():
        directory = out / target
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("seed-*"):
            stale.unlink()
        for name, data in seeds.items():
            (directory / f"seed-{name}").write_bytes(data)
            total += len(data)
    print(f"wrote {sum(map(len, build().values()))} seeds, {total} bytes, under {out}")


if __name__ == "__main__":
    main()
