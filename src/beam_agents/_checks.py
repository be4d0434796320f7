"""Validation shared by every config and value object: one rule, one message shape.

STYLE asks each config to reject a bad value with an error naming the field
and its allowed range. `require_int` is that check for integers, so every
``must be an int in [low, high]`` in the library reads alike and treats
``bool`` alike (never an int, though Python says it is one).
"""

from __future__ import annotations

from collections.abc import Callable

from beam_agents.errors import ConfigError

__all__ = ["require_int"]


def require_int(
    value: object,
    *,
    name: str,
    low: int,
    high: int | None = None,
    error: Callable[..., Exception] = ConfigError,
    field: str | None = None,
    noun: str = "an int",
) -> int:
    """Return `value` if it is an ``int`` (not a ``bool``) in ``[low, high]``; raise otherwise.

    The message reads ``"{name} must be {noun} in [{low}, {high}], got
    {value!r}"``, or ``... must be {noun} >= {low}, ...`` without `high`.

    Args:
        value: What to check.
        name: How the message names the value, e.g. ``"AgentConfig.timeout_ms"``.
        low: The smallest value allowed.
        high: The largest value allowed; None for no upper bound.
        error: The exception type to raise.
        field: Passed to `error` as ``field=`` (as `ConfigError` takes it);
            None raises ``error(message)`` alone.
        noun: What the message says the value must be; empty to leave it out
            (``"--bundle_size must be >= 1, got 0"``).

    Returns:
        `value`, now known to be an ``int``.

    Raises:
        ConfigError: or `error`; the value is a ``bool``, not an ``int``, or
            out of range.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= low and (
            high is None or value <= high):
        return value
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"
    must_be = f"{noun} {bound}" if noun else bound
    message = f"{name} must be {must_be}, got {value!r}"
    raise error(message) if field is None else error(message, field=field)
