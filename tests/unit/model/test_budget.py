"""The token budget cell: windows by event time, charges kept, corrupt bytes refused (inv. 12)."""

from __future__ import annotations

import pytest

from beam_agents._proto.budget_pb2 import TokenBudgetBlob
from beam_agents.errors import BudgetExceededError, StateCorruptError, UnsupportedSchemaVersionError
from beam_agents.model import TokenBudget

DAY = 86_400_000
KEY = b"acct-1"


def budget(blob: bytes | None, now_ms: int, cap: int = 100) -> TokenBudget:
    return TokenBudget(blob, entity_key=KEY, now_ms=now_ms, max_tokens=cap)


def test_a_fresh_entity_has_used_nothing_and_is_clean() -> None:
    fresh = budget(None, now_ms=5)
    assert (fresh.tokens_used, fresh.window_start_ms, fresh.dirty) == (0, 0, False)


def test_charges_carry_over_within_a_window_of_event_time() -> None:
    first = budget(None, now_ms=DAY + 10)
    first.charge(40)
    second = budget(first.to_bytes(), now_ms=2 * DAY - 1)
    assert second.tokens_used == 40
    assert second.window_start_ms == DAY


def test_the_next_window_starts_from_zero() -> None:
    first = budget(None, now_ms=DAY + 10)
    first.charge(90)
    later = budget(first.to_bytes(), now_ms=2 * DAY)
    assert later.tokens_used == 0
    later.check(100)  # the whole cap is there again
    assert later.dirty  # the reset is written back


def test_the_cap_itself_is_allowed_and_one_token_past_it_is_not() -> None:
    exact = budget(None, now_ms=0)
    exact.check(100)
    with pytest.raises(BudgetExceededError):
        exact.check(101)
    exact.charge(100)
    with pytest.raises(BudgetExceededError) as caught:
        exact.charge(1)
    assert caught.value.tokens_used == 101  # the charge is kept: it was paid
    assert "acct-1" in str(caught.value) and "100-token budget" in str(caught.value)


def test_a_corrupt_cell_is_state_corrupt_and_a_future_version_is_refused() -> None:
    with pytest.raises(StateCorruptError) as caught:
        budget(b"\xff\xff\xff", now_ms=0)
    assert caught.value.cell == "budget"
    future = TokenBudgetBlob(state_schema_version=2, tokens_used=1).SerializeToString()
    with pytest.raises(UnsupportedSchemaVersionError):
        budget(future, now_ms=0)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_tokens_per_entity"):
        TokenBudget(None, entity_key=KEY, now_ms=0, max_tokens=0)
