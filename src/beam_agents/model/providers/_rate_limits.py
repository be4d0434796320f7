"""How providers say "slow down": Retry-After, rate-limit headers and Google's RetryInfo.

Both HTTP providers translate these into `RateLimitedError.retry_after_s` and
`RateLimits` here, once, so admission sees one shape whatever the wire said
(invariant 11). This is the edge: an HTTP-date ``Retry-After`` is measured
against the answer's own ``Date`` header, or the wall clock without one.
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from beam_agents.model._types import RateLimits

__all__ = ["parse_duration", "quota_failure_ids", "rate_limits", "retry_after_s",
           "retry_info_delay_s"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(text: str | None) -> float | None:
    """``"1s"``, ``"250ms"``, ``"6m0s"``, ``"0.250s"`` -> seconds; None if it is not a duration."""
    if not text:
        return None
    text = text.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_S[unit] for number, unit in parts)


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def retry_after_s(headers: Mapping[str, str], *,
                  clock: Callable[[], float] = time.time) -> float | None:
    """The wait a 429 asks for: ``retry-after-ms``, else ``Retry-After`` in seconds or as a date.

    `headers` must look names up case-insensitively (httpx's do). A date in
    the past, or a header that is neither a number nor a date, asks for nothing.
    """
    milliseconds = _number(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    raw = headers.get("retry-after")
    seconds = _number(raw)
    if seconds is not None or raw is None:
        return seconds
    try:
        until = email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    now = clock()
    date = headers.get("date")
    if date:
        with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
            now = email.utils.parsedate_to_datetime(date).timestamp()
    return max(0.0, until - now)


def rate_limits(headers: Mapping[str, str]) -> RateLimits | None:
    """OpenAI-style ``x-ratelimit-limit-*``, ``-remaining-*`` and ``-reset-*``; None if absent."""
    values: dict[str, Any] = {}
    for kind in ("requests", "tokens"):
        limit = _number(headers.get(f"x-ratelimit-limit-{kind}"))
        if limit is not None and limit > 0:
            values[f"limit_{kind}"] = int(limit)
        remaining = _number(headers.get(f"x-ratelimit-remaining-{kind}"))
        if remaining is not None:
            values[f"remaining_{kind}"] = int(remaining)
        reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}"))
        if reset is None:
            reset = _number(headers.get(f"x-ratelimit-reset-{kind}"))
        if reset is not None:
            values[f"reset_{kind}_s"] = reset
    return RateLimits(**values) if values else None


def retry_info_delay_s(details: object) -> float | None:
    """The ``retryDelay`` of a ``google.rpc.RetryInfo`` in a Google API error body, if any.

    `details` is the error's JSON (``{"error": {"details": [...]}}``) or its
    ``details`` list.
    """
    for item in _error_details(details):
        if str(item.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = item.get("retryDelay")
            if isinstance(delay, str):
                return parse_duration(delay)
            if isinstance(delay, Mapping):  # the proto form, {"seconds": ..., "nanos": ...}
                return float(delay.get("seconds", 0)) + float(delay.get("nanos", 0)) / 1e9
    return None


def quota_failure_ids(details: object) -> tuple[str, ...]:
    """The ``quotaId``s of a ``google.rpc.QuotaFailure`` in a Google API error body."""
    ids: list[str] = []
    for item in _error_details(details):
        if str(item.get("@type", "")).endswith("google.rpc.QuotaFailure"):
            for violation in item.get("violations") or ():
                if isinstance(violation, Mapping) and isinstance(violation.get("quotaId"), str):
                    ids.append(violation["quotaId"])
    return tuple(ids)


def _error_details(details: object) -> list[Mapping[str, Any]]:
    if isinstance(details, Mapping):
        inner = details.get("error", details)
        details = inner.get("details") if isinstance(inner, Mapping) else None
    if not isinstance(details, list):
        return []
    return [item for item in details if isinstance(item, Mapping)]
