"""Inputs the fuzz targets (``fuzz/``) found crashing a decoder, each now a typed error.

Each input is kept as the fuzzer found it (minimised where noted), with the
error the decoder must raise, or the dead letter it must return, instead of
the exception or the corruption it produced before.
"""

from __future__ import annotations

import pytest

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.memory_pb2 import ENTRY_KIND_RING, MemoryBlob
from beam_agents.errors import EventDecodeError, RingCorruptError
from beam_agents.memory import Memory
from beam_agents.memory._ring import RingEdit, decode_ring, item_lengths
from beam_agents.runtime._codec import error_from_json, error_to_json
from beam_agents.runtime._errors import decode_input, error_record

# -- ring: a padded length prefix ------------------------------------------------------
# An item prefix with a zero final byte (0xd4 0x00 is 84 in two bytes, one
# more than it needs) used to decode, but `RingEdit` drops items by their
# minimal cost, so the first append left the ring's head inside a prefix:
# the committed ring read back with phantom items or as garbage.

#: fuzz.ring's input, minimised: one slice byte, then a ring whose only item
#: has a padded prefix.
PADDED_RING_INPUT = b"\x00\x01\xd4" + bytes(85)
PADDED_RING = b"\x01\x80\x00"  # the smallest such ring: one empty item, prefix 0x80 0x00


@pytest.mark.parametrize("read", [decode_ring, item_lengths, RingEdit])
def test_a_padded_item_prefix_is_a_corrupt_ring(read: object) -> None:
    """The fuzzer's ring is refused by every reader with RingCorruptError, naming the key."""
    with pytest.raises(RingCorruptError, match="padded length prefix") as caught:
        read("notes", PADDED_RING_INPUT, 1, len(PADDED_RING_INPUT))  # type: ignore[operator]
    assert caught.value.key == "notes"


def test_appending_to_a_padded_ring_fails_and_leaves_the_blob_unchanged() -> None:
    """The append raises RingCorruptError; the blob is written back byte for byte."""
    blob = MemoryBlob(state_schema_version=1, total_value_bytes=len(PADDED_RING))
    blob.entries.add(key="r", value=PADDED_RING, last_access_ms=5, kind=ENTRY_KIND_RING)
    data = blob.SerializeToString(deterministic=True)
    memory = Memory(data, now_ms=10)

    with pytest.raises(RingCorruptError):
        memory.append("r", b"x", max_items=1)
    with pytest.raises(RingCorruptError):
        memory.ring("r")
    assert memory.to_bytes() == data


# -- event JSON: values a proto string or int64 cannot hold ----------------------------
# A JSON escape can produce a lone surrogate, which has no UTF-8 form; an
# integer can exceed int64. Either used to escape decode_input (the DECODE
# path must return a record) as UnicodeEncodeError or ValueError.

UNDECODABLE_LINES = {
    # fuzz.event_json, as found: a lone surrogate inside a text payload.
    "surrogate in payload": (
        b'{"entity_key":"user-8","event_id":"e-2","event_time_ms":1,'
        b'"payload":"{\\"n\\":[1,2.5,null,tru,\\"tex\\udffft\\":\\"hi\\"}"}'),
    # fuzz.event_json, as found: one in a field name, quoted by the error message.
    "surrogate in a field name": (
        b'{"entity_key":"u","event_time_ms":5,"pa\\udfffyload":{"a":[{}]}}'),
    # fuzz.event_json, as found: event_time_ms past int64.
    "int64 overflow": (b'{"entity_key_b64":"Aw/=","event_time_ms":66666666666666666666666666665,'
                       b'"payload_b64":"gA=="}'),
    # By review, from the same cause: the other string fields.
    "surrogate in entity_key": b'{"entity_key":"\\ud800","event_time_ms":1}',
    "surrogate in event_id": b'{"entity_key":"a","event_time_ms":1,"event_id":"\\ud800"}',
    "surrogate in attributes": b'{"entity_key":"a","event_time_ms":1,"attributes":{"k":"\\ud800"}}',
    # By review: nesting past the recursion limit (RecursionError from json).
    "nested too deep": b'{"entity_key":"a","event_time_ms":1,"payload":' + b"[" * 5000,
}


@pytest.mark.parametrize("line", UNDECODABLE_LINES.values(), ids=UNDECODABLE_LINES.keys())
def test_an_undecodable_json_line_is_a_decode_dead_letter(line: bytes) -> None:
    """decode_input returns a DECODE record carrying the line; nothing escapes."""
    record = decode_input(line, "json")

    assert isinstance(record, ErrorRecord)
    assert record.stage == ErrorRecord.STAGE_DECODE
    assert record.error_type == "beam_agents.errors.EventDecodeError"
    assert record.event == line
    assert error_from_json(error_to_json(record)) == record


def test_an_agent_error_quoting_a_lone_surrogate_becomes_a_record() -> None:
    """The message keeps the surrogate as its escape; error_record does not raise."""
    record = error_record(ValueError("bad text: \udfff"), stage=ErrorRecord.STAGE_AGENT,
                          entity_key=b"k", seq=1, event=b"", event_id="e", traceback_bytes=4096)

    assert record.message == "bad text: \\udfff"
    assert "\\udfff" in record.traceback


# -- error-record JSON ---------------------------------------------------------------------

#: fuzz.error_json, minimised: a digest without the size it belongs to. It
#: parsed, but error_to_json dropped the digest, so the line did not read
#: back as the record.
DIGEST_WITHOUT_SIZE = (
    b'{"event_sha256":"d56f3dcb24e7d672930b8c5ee011a787388567e3208e952fdba41d291140c5d4",'
    b'"stage":"STAGE_DECODE"}')


def test_an_error_record_line_round_trips_every_field_it_read() -> None:
    """What error_from_json read, error_to_json writes: the record reads back equal."""
    record = error_from_json(DIGEST_WITHOUT_SIZE)

    assert record.event_sha256.hex().startswith("d56f3dcb")
    assert error_from_json(error_to_json(record)) == record


@pytest.mark.parametrize("line", [
    b'{"stage":"STAGE_DECODE","seq":1e999}',  # by review: int(inf) is an OverflowError
    b'{"stage":"STAGE_DECODE","attempts":-1e999}',
    b"[" * 5000,  # by review: RecursionError from json
], ids=["seq infinite", "attempts infinite", "nested too deep"])
def test_a_malformed_error_record_line_is_an_event_decode_error(line: bytes) -> None:
    """error_from_json raises EventDecodeError, the one error `errors show/redrive` report."""
    with pytest.raises(EventDecodeError):
        error_from_json(line)


@pytest.mark.parametrize("ring", [b"\x01\x81\x00x", b"\x01\x01y\x81\x00x", b"\x01\x80\x80\x00"],
                         ids=["one-item", "after-a-minimal-item", "three-byte"])
@pytest.mark.parametrize("read", [decode_ring, item_lengths, RingEdit])
def test_a_padded_prefix_of_a_non_empty_item_is_a_corrupt_ring(read: object, ring: bytes) -> None:
    """Padding is refused whatever the item's length and wherever the item stands."""
    with pytest.raises(RingCorruptError, match="padded length prefix"):
        read("notes", ring, 0, len(ring))  # type: ignore[operator]
