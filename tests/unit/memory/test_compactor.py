"""LruCompactor: the default strategy evicts least-recently-used keys down to its target."""

from __future__ import annotations

import pytest

from beam_agents.errors import ConfigError
from beam_agents.memory import HARD_CAP_BYTES, SOFT_CAP_BYTES, Compactor, LruCompactor, Memory


def test_it_evicts_least_recently_used_first_down_to_the_target() -> None:
    compactor = LruCompactor(target_fraction=0.5)
    memory = Memory(now_ms=1, compactor=compactor)
    for key in ("a", "b", "c", "d"):
        memory.set(key, key.encode() * 190_000)
    memory.get("a")  # a becomes most-recently-used

    memory.set("e", b"e" * 50_000)  # 810 000 bytes: crosses the soft cap

    assert memory.keys() == ("d", "a", "e")
    assert memory.size_bytes <= compactor.target_bytes


def test_it_lets_an_overflowing_write_land() -> None:
    memory = Memory(now_ms=1, compactor=LruCompactor())
    memory.set("old", b"o" * 700_000)
    memory.set("new", b"n" * 700_000)
    assert memory.keys() == ("new",)
    assert memory.size_bytes == 700_000


def test_it_satisfies_the_protocol() -> None:
    assert isinstance(LruCompactor(), Compactor)


@pytest.mark.parametrize("fraction", [-0.1, SOFT_CAP_BYTES / HARD_CAP_BYTES, 1.0])
def test_a_target_at_or_above_the_soft_cap_is_rejected(fraction: float) -> None:
    with pytest.raises(ConfigError, match="target_fraction") as caught:
        LruCompactor(target_fraction=fraction)
    assert caught.value.field == "LruCompactor.target_fraction"
