"""The quota server the flow-control tests stand on: its bucket, Retry-After books and billing."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests._quota_server import QuotaServer, format_duration, format_reset

GEMINI_PATH = "/v1beta/models/gemini-2.0-flash:generateContent"


def chat(client: httpx.Client, server: QuotaServer, text: str = "hi", *,
         key: str = "k1") -> httpx.Response:
    return client.post(f"{server.url}/v1/chat/completions",
                       headers={"Authorization": f"Bearer {key}"},
                       json={"model": "m", "messages": [{"role": "user", "content": text}]})


def generate(client: httpx.Client, server: QuotaServer, text: str = "hi", *,
             key: str = "g1") -> httpx.Response:
    return client.post(f"{server.url}{GEMINI_PATH}", headers={"x-goog-api-key": key},
                       json={"contents": [{"role": "user", "parts": [{"text": text}]}]})


@pytest.fixture
def client() -> Any:
    with httpx.Client(timeout=5) as c:
        yield c


@pytest.mark.parametrize(("style", "retry_after_s"), [
    ("seconds", 1.5), ("ms", 0.25), ("http-date", 1.0), ("none", 1.0)])
def test_a_burst_beyond_the_bucket_is_refused_with_the_styles_header(
        client: httpx.Client, style: str, retry_after_s: float) -> None:
    with QuotaServer(rps=1, burst=2, latency_ms=0, retry_after_s=retry_after_s,
                     retry_after_style=style) as server:
        answers = [chat(client, server) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    refused = answers[2]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.json()["error"]["message"].startswith("Rate limit reached for requests")
    if style == "seconds":
        assert refused.headers["Retry-After"] == "2"
        assert "retry-after-ms" not in refused.headers
    elif style == "ms":
        assert refused.headers["retry-after-ms"] == "250"
        assert "Retry-After" not in refused.headers
    elif style == "http-date":
        until = email.utils.parsedate_to_datetime(refused.headers["Retry-After"])
        sent = email.utils.parsedate_to_datetime(refused.headers["Date"])
        assert retry_after_s <= (until - sent).total_seconds() <= retry_after_s + 1
    else:
        assert "Retry-After" not in refused.headers
        assert "retry-after-ms" not in refused.headers
    stats = server.stats()
    assert (stats.requests, stats.ok, stats.rate_limited, stats.exhausted) == (3, 2, 1, 0)
    assert len(stats.ok_times) == 2 and len(stats.limited_times) == 1


def test_a_request_inside_the_window_after_the_grace_is_early_and_one_after_it_is_not(
) -> None:
    """Across connections: each request on a new one, as a pool of connections would."""
    client = httpx.Client(timeout=5, limits=httpx.Limits(max_keepalive_connections=0))
    with client, QuotaServer(rps=1, burst=1, latency_ms=0, retry_after_s=0.5,
                             retry_after_style="ms", early_grace_ms=100) as server:
        assert chat(client, server, key="A").status_code == 200
        assert chat(client, server, key="A").status_code == 429  # opens A's window
        chat(client, server, key="A")  # inside the grace: already on the wire
        chat(client, server, key="B")  # another key: A's window is not B's
        assert server.stats().early == 0
        time.sleep(0.25)
        chat(client, server, key="A")  # inside the window, past the grace
        after_early = server.stats()
        time.sleep(0.65)
        chat(client, server, key="A")  # after the window (and the one the last 429 opened)
        stats = server.stats()
    assert after_early.early_by_key == {"A": 1}
    assert stats.early == 1 and stats.early_by_key == {"A": 1}
    (offset,) = stats.early_offsets_s
    assert 0.1 < offset < 0.5
    assert stats.by_key == {"A": 5, "B": 1}


def test_a_request_on_the_connection_that_carried_a_429_is_early_with_no_grace(
        client: httpx.Client) -> None:
    """A client reads an answer whole before reusing its connection: it knew of the 429."""
    with QuotaServer(rps=1, burst=1, latency_ms=0, retry_after_s=0.5, retry_after_style="ms",
                     early_grace_ms=100) as server:
        assert chat(client, server, key="A").status_code == 200
        assert chat(client, server, key="A").status_code == 429
        chat(client, server, key="A")  # at once, but on the same connection
        time.sleep(0.6)
        chat(client, server, key="A")  # after the window
        stats = server.stats()
    assert stats.early == 1 == server.early_on_connection
    assert stats.early_by_key == {"A": 1}
    assert stats.early_offsets_s[0] < 0.1


def test_a_429s_window_opens_when_its_delayed_body_has_been_written(
        client: httpx.Client) -> None:
    """With a body delay, the window starts when the client could first read the 429."""
    with QuotaServer(rps=1, burst=1, latency_ms=0, retry_after_s=0.5, retry_after_style="ms",
                     body_delay_ms=200, early_grace_ms=20) as server:
        assert chat(client, server, key="A").status_code == 200
        began = time.monotonic()
        assert chat(client, server, key="A").status_code == 429
        assert time.monotonic() - began >= 0.2  # the body came late
        stats = server.stats()
    assert stats.early == 0


def test_exhaust_answers_insufficient_quota_without_a_wait_and_takes_no_token(
        client: httpx.Client) -> None:
    with QuotaServer(rps=1, burst=1, latency_ms=0, rate_headers=True) as server:
        server.exhaust(5)
        refused = chat(client, server)
        gemini = generate(client, server)
        stats = server.stats()
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "insufficient_quota"
    assert refused.json()["error"]["type"] == "insufficient_quota"
    assert "Retry-After" not in refused.headers and "retry-after-ms" not in refused.headers
    assert refused.headers["x-ratelimit-remaining-requests"] == "1"  # the token is still there
    assert gemini.status_code == 429
    error = gemini.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.QuotaFailure"
    assert (stats.exhausted, stats.rate_limited, stats.ok, stats.early) == (2, 0, 0, 0)


def test_exhausted_from_the_start_lifts_after_its_time(client: httpx.Client) -> None:
    # Seconds, not fractions: the first request must arrive while it holds, on a busy machine.
    with QuotaServer(rps=5, latency_ms=0, exhausted_for_s=2.0) as server:
        assert chat(client, server).status_code == 429
        time.sleep(2.05)
        assert chat(client, server).status_code == 200
    assert (server.stats().exhausted, server.stats().ok) == (1, 1)


def test_gemini_rate_limit_is_resource_exhausted_with_retry_info(client: httpx.Client) -> None:
    with QuotaServer(rps=1, burst=1, latency_ms=0, retry_after_s=0.25) as server:
        first = generate(client, server, "Weather in Oslo?")
        refused = generate(client, server)
        stats = server.stats()
    assert first.status_code == 200
    candidate = first.json()["candidates"][0]
    assert candidate["finishReason"] == "STOP"
    assert candidate["content"]["parts"][0]["text"].endswith(": Weather in Oslo?")
    assert refused.status_code == 429
    assert "Retry-After" not in refused.headers
    error = refused.json()["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert error["details"] == [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                 "retryDelay": "0.250s"}]
    assert stats.by_key == {"g1": 2} and stats.rate_limited == 1


def test_the_google_genai_sdk_speaks_to_it_by_base_url() -> None:
    with QuotaServer(rps=1, burst=1, latency_ms=0) as server:
        sdk = genai.Client(api_key="sdk-key",
                           http_options=types.HttpOptions(base_url=server.url))
        answer = sdk.models.generate_content(model="gemini-2.0-flash", contents="Hello there")
        with pytest.raises(genai_errors.ClientError) as refused:
            sdk.models.generate_content(model="gemini-2.0-flash", contents="Hello there")
        stats = server.stats()
    assert answer.text is not None and answer.text.endswith(": Hello there")
    assert answer.usage_metadata is not None
    assert answer.usage_metadata.prompt_token_count == stats.billed_prompt_tokens
    assert refused.value.code == 429
    assert stats.by_key == {"sdk-key": 2}


def test_billing_equals_the_usage_the_answers_reported(client: httpx.Client) -> None:
    texts = ["a", "a much longer question about the weather in Oslo " * 3, "a"]
    with QuotaServer(rps=100, latency_ms=0) as server:
        openai = [chat(client, server, t, key="k1").json() for t in texts]
        gemini = [generate(client, server, t, key="g1").json() for t in texts]
        stats = server.stats()
    prompt = sum(o["usage"]["prompt_tokens"] for o in openai)
    completion = sum(o["usage"]["completion_tokens"] for o in openai)
    assert all(o["usage"]["total_tokens"] == o["usage"]["prompt_tokens"]
               + o["usage"]["completion_tokens"] for o in openai)
    g_prompt = sum(g["usageMetadata"]["promptTokenCount"] for g in gemini)
    g_completion = sum(g["usageMetadata"]["candidatesTokenCount"] for g in gemini)
    assert stats.billed_prompt_tokens == prompt + g_prompt
    assert stats.billed_completion_tokens == completion + g_completion
    assert stats.billed_prompt_by_key == {"k1": prompt, "g1": g_prompt}
    assert stats.billed_completion_by_key == {"k1": completion, "g1": g_completion}
    assert openai[0] == openai[2] and gemini[0] == gemini[2]  # same request, same answer
    assert openai[0]["choices"][0]["message"]["content"].startswith("Answer ")
    assert stats.ok_by_key == {"k1": 3, "g1": 3}


def test_rate_headers_and_utilisation(client: httpx.Client) -> None:
    with QuotaServer(rps=2, burst=2, latency_ms=0, rate_headers=True) as server:
        first = chat(client, server)
        chat(client, server)
        refused = chat(client, server)
        stats = server.stats()
    assert first.headers["x-ratelimit-limit-requests"] == "120"
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    assert first.headers["x-ratelimit-reset-requests"].endswith("ms")
    assert refused.status_code == 429
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert stats.utilisation(0, 1) == pytest.approx(1.0)
    assert server.utilisation(0, 2) == pytest.approx(0.5)


def test_a_body_that_is_not_json_is_a_bad_request(client: httpx.Client) -> None:
    with QuotaServer(rps=1, latency_ms=0) as server:
        answer = client.post(f"{server.url}/v1/chat/completions", content=b"{not json")
        stats = server.stats()
    assert answer.status_code == 400
    assert (stats.requests, stats.bad_requests, stats.by_key) == (1, 1, {"anonymous": 1})


def test_durations_are_written_the_way_each_provider_writes_them() -> None:
    assert [format_duration(s) for s in (1.0, 0.25, 0.1, 2.5)] == [
        "1s", "0.250s", "0.100s", "2.500s"]
    assert [format_reset(s) for s in (1.0, 0.25, 90.0, 60.0, 1.5, 0.0, 3725.0)] == [
        "1s", "250ms", "1m30s", "1m0s", "1.5s", "0s", "1h2m5s"]
