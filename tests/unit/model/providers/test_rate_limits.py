"""How providers say "slow down": every wire form of a wait becomes seconds (invariant 11)."""

from __future__ import annotations

import email.utils

import httpx
import pytest

from beam_agents.model.providers._rate_limits import (
    parse_duration,
    quota_failure_ids,
    rate_limits,
    retry_after_s,
    retry_info_delay_s,
)


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1.0), ("250ms", 0.25), ("6m0s", 360.0), ("1h2m3.5s", 3723.5), ("0.250s", 0.25),
    ("20ms", 0.02), ("1m30s", 90.0),
])
def test_durations_in_every_provider_spelling_become_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "1x", "s", "1 s", "-1s", "1s2", None])
def test_what_is_not_a_duration_asks_for_nothing(text: str | None) -> None:
    assert parse_duration(text) is None


def test_retry_after_in_seconds() -> None:
    assert retry_after_s(httpx.Headers({"Retry-After": "2"})) == 2.0
    assert retry_after_s(httpx.Headers({"retry-after": "0.5"})) == 0.5


def test_retry_after_ms_wins_over_retry_after() -> None:
    headers = httpx.Headers({"Retry-After": "2", "retry-after-ms": "1500"})
    assert retry_after_s(headers) == 1.5


def test_retry_after_as_an_http_date_is_measured_against_the_answers_date() -> None:
    # The Date header, not this machine's clock: a client whose clock is off
    # still waits what the server meant.
    headers = httpx.Headers({"Retry-After": email.utils.formatdate(1_000_030, usegmt=True),
                             "Date": email.utils.formatdate(1_000_000, usegmt=True)})
    assert retry_after_s(headers, clock=lambda: 5.0) == 30.0


def test_retry_after_as_an_http_date_without_a_date_header_uses_the_clock() -> None:
    headers = httpx.Headers({"Retry-After": email.utils.formatdate(1_000_030, usegmt=True)})
    assert retry_after_s(headers, clock=lambda: 1_000_010.0) == 20.0


def test_a_date_in_the_past_and_garbage_ask_for_no_wait() -> None:
    past = httpx.Headers({"Retry-After": email.utils.formatdate(1_000, usegmt=True)})
    assert retry_after_s(past, clock=lambda: 2_000.0) == 0.0
    assert retry_after_s(httpx.Headers({"Retry-After": "whenever"})) is None
    assert retry_after_s(httpx.Headers({"Retry-After": "-3"})) is None
    assert retry_after_s(httpx.Headers({"Retry-After": "nan"})) is None
    assert retry_after_s(httpx.Headers({})) is None


def test_openai_rate_limit_headers_become_rate_limits() -> None:
    limits = rate_limits(httpx.Headers({
        "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-remaining-tokens": "14900", "x-ratelimit-reset-tokens": "6m0s"}))
    assert limits is not None
    assert (limits.remaining_requests, limits.reset_requests_s) == (0, 1.0)
    assert (limits.remaining_tokens, limits.reset_tokens_s) == (14900, 360.0)
    assert rate_limits(httpx.Headers({"content-type": "application/json"})) is None


GEMINI_429 = {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
    {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
        {"quotaMetric": "generate_requests_per_model", "quotaId": "GenerateRequestsPerMinute"}]},
    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}]}}


def test_gemini_retry_info_gives_the_delay_and_quota_failure_the_quota_ids() -> None:
    assert retry_info_delay_s(GEMINI_429) == 37.0
    assert retry_info_delay_s(GEMINI_429["error"]["details"]) == 37.0
    assert quota_failure_ids(GEMINI_429) == ("GenerateRequestsPerMinute",)


def test_a_retry_info_in_proto_form_and_bodies_without_one() -> None:
    proto_form = {"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                         "retryDelay": {"seconds": 2, "nanos": 500_000_000}}]}}
    assert retry_info_delay_s(proto_form) == 2.5
    assert retry_info_delay_s({"error": {"message": "no details"}}) is None
    assert retry_info_delay_s("not json") is None
    assert quota_failure_ids({"error": {"details": ["odd", 3]}}) == ()
