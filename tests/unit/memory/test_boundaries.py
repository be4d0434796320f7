"""The exact edges of seed 000's caps: what lands on a bound and what crosses it.

The seed rejects a mutation whose prospective size *exceeds* 1 048 576 bytes,
so a write that lands on exactly 1 048 576 is accepted, and warns at size
"at or above" 786 432. Each test pins one side of one edge, so an off-by-one
in a comparison (``<`` for ``<=``, ``>=`` for ``>``) fails a test instead of
passing the suite (`make mutate` checks this).
"""

from __future__ import annotations

import pytest

from beam_agents.memory import (
    HARD_CAP_BYTES,
    SOFT_CAP_BYTES,
    LruCompactor,
    Memory,
    MemoryOverflow,
)
from beam_agents.memory._ring import RING_HEADER_BYTES, item_cost
from beam_agents.metrics import RecordingMetrics

NOW = 1_700_000_000_000
MIB = 1_048_576


class SizeLog:
    """A compactor that records the size it saw at each call, and may shrink one key."""

    def __init__(self, *, shrink: tuple[str, bytes] | None = None) -> None:
        self.sizes: list[int] = []
        self.shrink = shrink

    def compact(self, memory: Memory) -> None:
        self.sizes.append(memory.size_bytes)
        if self.shrink is not None:
            memory.set(*self.shrink)


def test_the_caps_are_the_seeds_numbers() -> None:
    """The hard cap is 1 MiB and the soft cap 75% of it (786 432 bytes)."""
    assert (HARD_CAP_BYTES, SOFT_CAP_BYTES) == (MIB, 786_432)


@pytest.mark.spec("M13")
def test_a_set_landing_on_exactly_1_mib_is_accepted() -> None:
    """Only a size that exceeds 1 048 576 bytes is rejected; the cap itself fits."""
    memory = Memory(now_ms=NOW)

    memory.set("big", b"x" * MIB)

    assert memory.size_bytes == MIB
    assert memory.entry_size("big") == MIB
    assert memory.to_blob().total_value_bytes == MIB


@pytest.mark.spec("M13")
def test_a_set_of_1_mib_plus_one_byte_is_rejected_with_the_key_size_and_cap() -> None:
    """THEN MemoryOverflow is raised, naming key, attempted size and cap; nothing lands."""
    memory = Memory(now_ms=NOW)

    with pytest.raises(MemoryOverflow) as caught:
        memory.set("big", b"x" * (MIB + 1))

    assert (caught.value.key, caught.value.attempted_size, caught.value.cap) == (
        "big", MIB + 1, MIB)
    assert memory.size_bytes == 0
    assert "big" not in memory
    assert not memory.dirty


@pytest.mark.spec("M13")
def test_at_exactly_the_cap_an_empty_value_still_fits_and_one_byte_does_not() -> None:
    """A write that keeps the total at 1 048 576 lands; one that adds a byte is rejected."""
    memory = Memory(now_ms=NOW)
    memory.set("fill", b"f" * MIB)

    memory.set("empty", b"")
    assert memory.get("empty") == b""
    with pytest.raises(MemoryOverflow) as caught:
        memory.set("one", b"1")

    assert caught.value.attempted_size == MIB + 1
    assert "one" not in memory
    assert memory.size_bytes == MIB


@pytest.mark.spec("M13")
def test_an_append_landing_on_exactly_1_mib_is_accepted_and_one_byte_more_is_not() -> None:
    """The cap bounds ring writes the same way: on the cap fits, past it is rejected."""
    item = b"i" * 100
    ring_size = RING_HEADER_BYTES + item_cost(len(item))
    memory = Memory(now_ms=NOW)
    memory.set("fill", b"f" * (MIB - ring_size))

    memory.append("log", item)
    assert memory.size_bytes == MIB
    with pytest.raises(MemoryOverflow) as caught:
        memory.append("other", b"")

    assert caught.value.attempted_size == MIB + RING_HEADER_BYTES + item_cost(0)
    assert memory.ring("log") == (item,)
    assert memory.ring("other") == ()


@pytest.mark.spec("M13")
def test_a_replacing_set_is_measured_without_the_value_it_replaces() -> None:
    """Replacing a value counts the new size only: 1 MiB over a small value still fits."""
    memory = Memory(now_ms=NOW)
    memory.set("k", b"small")

    memory.set("k", b"x" * MIB)

    assert memory.size_bytes == MIB


@pytest.mark.spec("M14")
def test_a_write_landing_on_the_cap_does_not_take_the_hard_cap_compaction() -> None:
    """Compaction runs *first* only for a write that exceeds the cap; this one lands.

    The compactor still runs once, after the write, because the new size is
    at or above the soft cap (M11); it sees the write already applied.
    """
    compactor = SizeLog()
    memory = Memory(now_ms=NOW, compactor=compactor)

    memory.set("big", b"x" * MIB)

    assert compactor.sizes == [MIB]


@pytest.mark.spec("M14")
def test_compaction_that_frees_exactly_enough_lets_the_write_land_on_the_cap() -> None:
    """After compaction the write is re-measured; landing on exactly 1 MiB succeeds."""
    compactor = SizeLog(shrink=("old", b"o" * 5))
    memory = Memory(now_ms=NOW, compactor=compactor)
    memory.set("old", b"o" * 10)

    memory.set("big", b"x" * (MIB - 5))

    assert compactor.sizes[0] == 10  # called before the write, which would be 5 bytes over
    assert memory.size_bytes == MIB
    assert memory.get("old") == b"o" * 5
    assert memory.entry_size("big") == MIB - 5


@pytest.mark.spec("M15")
def test_compaction_that_leaves_one_byte_too_many_still_rejects() -> None:
    """THEN MemoryOverflow is raised, the write is not applied, and compaction persists."""
    compactor = SizeLog(shrink=("old", b"o" * 6))
    memory = Memory(now_ms=NOW, compactor=compactor)
    memory.set("old", b"o" * 10)

    with pytest.raises(MemoryOverflow) as caught:
        memory.set("big", b"x" * (MIB - 5))

    assert caught.value.attempted_size == MIB + 1
    assert "big" not in memory
    assert memory.get("old") == b"o" * 6


@pytest.mark.spec("M11")
def test_one_byte_under_the_soft_cap_is_silent_and_landing_on_it_warns() -> None:
    """The warning fires at size "at or above" 786 432 bytes, not one byte before."""
    metrics = RecordingMetrics()
    compactor = SizeLog()
    memory = Memory(now_ms=NOW, metrics=metrics, compactor=compactor)

    memory.set("a", b"a" * (SOFT_CAP_BYTES - 1))
    assert metrics.get("beam_agents.memory", "soft_cap_warnings") == 0
    assert compactor.sizes == []

    memory.set("b", b"b")
    assert metrics.get("beam_agents.memory", "soft_cap_warnings") == 1
    assert compactor.sizes == [SOFT_CAP_BYTES]


@pytest.mark.spec("M13")
def test_a_write_after_a_compaction_is_still_held_to_the_hard_cap() -> None:
    """Caps are suspended only *during* compact(): the next overflowing write is rejected."""
    compactor = SizeLog()
    memory = Memory(now_ms=NOW, compactor=compactor)
    memory.set("big", b"x" * SOFT_CAP_BYTES)  # lands at the soft cap: compaction runs
    assert compactor.sizes == [SOFT_CAP_BYTES]

    with pytest.raises(MemoryOverflow):
        memory.set("more", b"y" * (MIB - SOFT_CAP_BYTES + 1))

    assert "more" not in memory


@pytest.mark.spec("M08")
def test_an_append_that_drops_the_oldest_item_is_measured_after_the_drop() -> None:
    """At the cap, a full ring can take an item as large as the one it drops."""
    item = b"a" * 1000
    memory = Memory(now_ms=NOW)
    memory.append("log", item, max_items=2)
    memory.append("log", item, max_items=2)
    memory.set("fill", b"f" * (MIB - memory.size_bytes))
    assert memory.size_bytes == MIB

    memory.append("log", b"b" * 1000, max_items=2)

    assert memory.ring("log") == (item, b"b" * 1000)
    assert memory.size_bytes == MIB


@pytest.mark.spec("M13")
def test_an_append_to_an_existing_ring_counts_the_ring_once() -> None:
    """The prospective size replaces the ring's old size; an overflow names the ring's key."""
    memory = Memory(now_ms=NOW)
    memory.append("log", b"1")
    before = memory.entry_size("log")
    room = MIB - before - item_cost(100)
    memory.set("fill", b"f" * room)

    memory.append("log", b"2" * 100)  # lands on exactly the cap
    assert memory.size_bytes == MIB
    with pytest.raises(MemoryOverflow) as caught:
        memory.append("log", b"")

    assert caught.value.key == "log"
    assert caught.value.attempted_size == MIB + item_cost(0)


@pytest.mark.spec("M14")
def test_compaction_re_measures_a_replacing_write_without_the_value_it_replaces() -> None:
    """After compaction the replaced value's size is subtracted again, so the write fits."""
    compactor = SizeLog(shrink=("old", b""))
    memory = Memory(now_ms=NOW, compactor=compactor)
    memory.set("old", b"o" * 10)
    memory.set("k", b"k" * 100)

    memory.set("k", b"x" * (MIB - 5))  # 5 bytes over with "old"; fits once it is shrunk

    assert memory.size_bytes == MIB - 5
    assert memory.get("old") == b""


@pytest.mark.spec("M09")
def test_appending_to_a_scalar_at_the_cap_is_a_kind_error_not_an_overflow() -> None:
    """Kind mixing fails fast: TypeError before any cap check or compaction."""
    compactor = SizeLog()
    memory = Memory(now_ms=NOW, compactor=compactor)
    memory.set("fill", b"f" * (MIB - 1))
    memory.set("k", b"x")  # a ring in its place would take the total past the cap
    compactor.sizes.clear()

    with pytest.raises(TypeError):
        memory.append("k", b"y" * 10)

    assert compactor.sizes == []
    assert memory.get("k") == b"x"


@pytest.mark.parametrize("max_items", [2.5, "3", True, None])
def test_max_items_must_be_an_int(max_items: object) -> None:
    """A ring bound that is not an int is refused rather than coerced."""
    memory = Memory(now_ms=NOW)

    with pytest.raises(TypeError):
        memory.append("log", b"x", max_items=max_items)  # type: ignore[arg-type]

    assert "log" not in memory


def test_an_lru_compactor_may_target_zero_bytes() -> None:
    """target_fraction spans [0, 0.75): 0.0 is allowed and empties memory when it runs."""
    compactor = LruCompactor(target_fraction=0.0)
    memory = Memory(now_ms=NOW)
    memory.set("a", b"a")

    compactor.compact(memory)

    assert compactor.target_bytes == 0
    assert memory.keys() == ()


def test_an_lru_compactor_at_exactly_its_target_deletes_nothing() -> None:
    """Compaction stops once size_bytes is at most the target, including equal to it."""
    compactor = LruCompactor(target_fraction=0.5)
    memory = Memory(now_ms=NOW)
    memory.set("a", b"a" * (compactor.target_bytes - 10))
    memory.set("b", b"b" * 10)

    compactor.compact(memory)

    assert memory.keys() == ("a", "b")
    assert memory.size_bytes == compactor.target_bytes
