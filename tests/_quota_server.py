"""A local model server behind an account quota, for flow-control tests and benchmarks.

Flow control is only proven against a peer that enforces a quota the way a
provider does: one token bucket for the whole account, shared by every API key
and every worker process; 429s that tell the client how long to wait, in each of
the shapes providers use; a billing limit that no amount of waiting within the
test will lift. `QuotaServer` is that peer, on ``127.0.0.1``, and it keeps the
books a test needs to judge the client: every request that came back before the
Retry-After it was given had run out (an *early* request), every token billed,
and when each request was served or refused, so a benchmark can measure the
share of the quota a client sustained.

It speaks two wire shapes on one port:

* OpenAI-compatible ``POST /v1/chat/completions``, the key in
  ``Authorization: Bearer <key>``.
* The Gemini REST API as the google-genai SDK sends it with an API key and a
  ``base_url``: ``POST /v1beta/models/{model}:generateContent`` (any path ending
  in ``:generateContent``), the key in ``x-goog-api-key`` or the ``key`` query
  parameter.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import math
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests._http import LocalServer, chat_completion

__all__ = ["RETRY_AFTER_STYLES", "QuotaServer", "QuotaStats", "format_duration",
           "format_reset"]

#: How a rate-limit 429 on the OpenAI shape tells the client to wait.
RETRY_AFTER_STYLES = frozenset({"seconds", "ms", "http-date", "none"})

ANONYMOUS = "anonymous"

_RATE_LIMIT_MESSAGE = ("Rate limit reached for requests per min (RPM) on model {model}: "
                       "Limit {limit}, Used {limit}, Requested 1. "
                       "Please try again in {wait}.")
_INSUFFICIENT_QUOTA = {"error": {
    "message": "You exceeded your current quota, please check your plan and billing details.",
    "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}
_GEMINI_QUOTA_FAILURE = {"error": {
    "code": 429, "status": "RESOURCE_EXHAUSTED",
    "message": "Quota exceeded for metric: generate_requests_per_day",
    "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                 "violations": [{
                     "quotaMetric":
                         "generativelanguage.googleapis.com/generate_requests_per_model_per_day",
                     "quotaId": "GenerateRequestsPerDayPerProjectPerModel"}]}]}}


def format_duration(seconds: float) -> str:
    """A duration as protobuf's ``Duration`` JSON, in whole milliseconds: ``1s``, ``0.250s``.

    Rounded up, so a client that waits what it reads never waits less than meant.
    """
    ms = _ceil_ms(seconds)
    whole, frac = divmod(ms, 1000)
    return f"{whole}s" if frac == 0 else f"{whole}.{frac:03d}s"


def format_reset(seconds: float) -> str:
    """A duration as OpenAI's ``x-ratelimit-reset-*`` headers write it: ``250ms``, ``1m30s``."""
    ms = _ceil_ms(seconds)
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, frac = divmod(rest, 1000)
    secs = f"{whole}.{frac:03d}".rstrip("0") if frac else str(whole)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _ceil_ms(seconds: float) -> int:
    """`seconds` in whole milliseconds, rounded up past float noise (0.1 s is 100 ms)."""
    return max(0, math.ceil(round(seconds * 1000, 6)))


@dataclass(frozen=True)
class QuotaStats:
    """A snapshot of what a `QuotaServer` has seen since it started.

    Times are `time.monotonic` seconds since the server started (its ``__enter__``).

    Attributes:
        rps: The account's quota, in requests per second.
        elapsed_s: Seconds since the server started, when the snapshot was taken.
        requests: Every request, whatever it was answered.
        ok: Requests answered 200.
        rate_limited: Requests refused 429 by the token bucket.
        exhausted: Requests refused 429 because the quota was exhausted (`QuotaServer.exhaust`).
        bad_requests: Requests answered 400 (no JSON object) or 404 (no such endpoint).
        early: Requests that came back inside a Retry-After window their key was given,
            after the grace; they are served by the usual rules all the same.
        early_by_key: `early` per API key.
        early_offsets_s: For each early request, in arrival order, how long after the 429
            that opened its window it arrived.
        by_key: Requests per API key.
        ok_by_key: Successful requests per API key.
        billed_prompt_tokens: Prompt tokens of every successful answer.
        billed_completion_tokens: Completion tokens of every successful answer.
        billed_prompt_by_key: `billed_prompt_tokens` per API key.
        billed_completion_by_key: `billed_completion_tokens` per API key.
        ok_times: Arrival time of each successful request, in arrival order.
        limited_times: Arrival time of each rate-limited request, in arrival order.
        last_ok_by_key: Arrival time of each API key's last successful request.
        billed_calls: ``(user text, prompt tokens, completion tokens)`` of each
            successful request, in arrival order: what one conversation was billed.
        ok_texts: ``(arrival time, user text)`` of each successful request, in
            arrival order: which worker's event each served request carried.
        early_on_connection: Early requests that came on the very connection
            that had carried their 429: surely sent after it was read, whichever
            client of a shared key sent them.
    """

    rps: float
    elapsed_s: float
    requests: int
    ok: int
    rate_limited: int
    exhausted: int
    bad_requests: int
    early: int
    early_by_key: dict[str, int]
    early_offsets_s: tuple[float, ...]
    by_key: dict[str, int]
    ok_by_key: dict[str, int]
    billed_prompt_tokens: int
    billed_completion_tokens: int
    billed_prompt_by_key: dict[str, int]
    billed_completion_by_key: dict[str, int]
    ok_times: tuple[float, ...]
    limited_times: tuple[float, ...]
    billed_calls: tuple[tuple[str, int, int], ...] = ()
    last_ok_by_key: dict[str, float] = field(default_factory=dict)
    ok_texts: tuple[tuple[float, str], ...] = ()
    early_on_connection: int = 0

    def steady_window(self, warm_up_s: float = 5.0, *,
                      shared: bool = False) -> tuple[float, float]:
        """The steady part of a finite run: from the first 429 + `warm_up_s` (else the
        first answer) to when the 95th percentile of the answers is in.

        The tail of a finite run, keys with their last events, cannot fill the
        quota. With `shared`, it ends sooner if an API key (a worker) has its
        last answer first: what is measured is the quota the workers shared.
        """
        ok = sorted(self.ok_times)
        start = (min(self.limited_times) if self.limited_times else ok[0]) + warm_up_s
        end = ok[int(len(ok) * 0.95)]
        if shared:
            end = min(end, *self.last_ok_by_key.values())
        return start, end

    def refused_share(self, start_s: float, end_s: float) -> float:
        """429s over requests (served or refused) that arrived in ``[start_s, end_s)``."""
        served = sum(1 for t in self.ok_times if start_s <= t < end_s)
        refused = sum(1 for t in self.limited_times if start_s <= t < end_s)
        return refused / max(1, served + refused)

    def utilisation(self, start_s: float, end_s: float) -> float:
        """The share of the quota used in ``[start_s, end_s)``.

        Successful requests that arrived in the window over what the quota allows in
        it, ``rps * (end_s - start_s)``; the bucket's initial burst can push it past 1
        in a window that starts at 0.

        Raises:
            ValueError: If the window is empty.
        """
        if end_s <= start_s:
            raise ValueError(f"empty window [{start_s}, {end_s})")
        served = sum(1 for t in self.ok_times if start_s <= t < end_s)
        return served / (self.rps * (end_s - start_s))


@dataclass
class _Window:
    """The latest Retry-After a key was given: when its 429 was sent, and when it runs out."""

    start: float
    end: float


@dataclass(frozen=True)
class _Call:
    """One parsed request: its wire shape, key, model, and the conversation it carries."""

    gemini: bool
    key: str
    model: str
    messages: Any
    user_text: str


class QuotaServer:
    """A model API on ``127.0.0.1`` behind one account-wide request quota, as a context.

    The quota is a token bucket of `burst` requests, full at the start and refilled
    at `rps` per second, shared by every API key. A request that finds a token takes
    it and is answered after `latency_ms`; one that finds none is refused 429 at
    once, telling the client how long to wait (`retry_after_s`, in the
    `retry_after_style` on the OpenAI shape, as ``RetryInfo`` on the Gemini shape).
    Each such 429 opens a window for its key; a later request of that key inside
    the window, past `early_grace_ms` (a request already on the wire when the 429
    left could not have known), is counted as early. Answers are deterministic
    functions of the request, and their usage is billed.

    Args:
        rps: The account's quota in requests per second.
        burst: The bucket's capacity in requests; one second's worth (`rps`) by default.
        latency_ms: How long a successful request takes to answer.
        retry_after_s: The wait every rate-limit 429 asks for.
        retry_after_style: How the OpenAI shape says it: ``"seconds"`` (``Retry-After``
            in whole seconds, rounded up), ``"ms"`` (``retry-after-ms`` only),
            ``"http-date"`` (``Retry-After`` as an HTTP-date, with a ``Date``) or
            ``"none"`` (no header, and so no window).
        rate_headers: Whether OpenAI answers carry ``x-ratelimit-*-requests`` headers.
        early_grace_ms: How long after a 429 a request of its key is not yet early:
            what a request sent before the client read the 429 may take to arrive.
            250 ms, because on a loaded 2-core machine the Gemini SDK's requests
            already sent arrived 124 ms after the 429; a client that ignores the
            wait keeps asking for the whole window and is still caught.
        exhausted_for_s: How long from construction every request is refused as over
            the billing quota (see `exhaust`).
        body_delay_ms: How long a rate-limit 429 holds back its body after its headers.
            A client cannot act on a 429 before it has read it whole, so the server
            knows to the millisecond when each client could first have known: the
            window opens when the body has been written, and `early_grace_ms` only
            has to cover a request's trip across loopback, not the client's delays.

    Raises:
        ValueError: For a quota that admits no request, or an unknown style.
    """

    def __init__(self, *, rps: float, burst: float | None = None, latency_ms: int = 200,
                 retry_after_s: float = 1.0, retry_after_style: str = "seconds",
                 rate_headers: bool = False, early_grace_ms: int = 250,
                 exhausted_for_s: float = 0.0, body_delay_ms: int = 0) -> None:
        if rps <= 0:
            raise ValueError(f"rps must be positive, not {rps}")
        capacity = float(rps if burst is None else burst)
        if capacity < 1:
            raise ValueError(f"burst must hold at least one request, not {capacity}")
        if retry_after_style not in RETRY_AFTER_STYLES:
            raise ValueError(f"retry_after_style must be one of {sorted(RETRY_AFTER_STYLES)}, "
                             f"not {retry_after_style!r}")
        if retry_after_s < 0 or latency_ms < 0 or early_grace_ms < 0:
            raise ValueError("retry_after_s, latency_ms and early_grace_ms must be >= 0")
        self.rps = float(rps)
        self.burst = capacity
        self.latency_ms = latency_ms
        self.retry_after_s = float(retry_after_s)
        self.retry_after_style = retry_after_style
        self.rate_headers = rate_headers
        self.early_grace_ms = early_grace_ms
        self.body_delay_ms = body_delay_ms
        #: Early requests that came on the very connection that had carried their 429.
        self.early_on_connection = 0
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._tokens = capacity
        self._refilled_at = self._t0
        self._exhausted_until = self._t0 + exhausted_for_s
        self._windows: dict[str, _Window] = {}
        self._requests = self._ok = self._rate_limited = self._exhausted = 0
        self._bad_requests = 0
        self._early_by_key: dict[str, int] = {}
        self._early_offsets: list[float] = []
        self._by_key: dict[str, int] = {}
        self._ok_by_key: dict[str, int] = {}
        self._prompt_by_key: dict[str, int] = {}
        self._completion_by_key: dict[str, int] = {}
        self._ok_times: list[float] = []
        self._limited_times: list[float] = []
        self._billed_calls: list[tuple[str, int, int]] = []
        self._last_ok_by_key: dict[str, float] = {}
        self._ok_texts: list[tuple[float, str]] = []
        # Keep-alive, as a provider's API is: a request that comes back on the
        # connection that carried a 429 was sent after that 429 was read.
        self._server = LocalServer(self._handle, keep_alive=True)
        self.url = self._server.url

    def __enter__(self) -> QuotaServer:
        with self._lock:
            now = time.monotonic()
            self._exhausted_until += now - self._t0
            self._t0 = self._refilled_at = now
            self._tokens = self.burst
        self._server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.__exit__(*exc)

    def exhaust(self, seconds: float) -> None:
        """Refuse every request as over the billing quota for `seconds` from now.

        Such 429s say ``insufficient_quota`` (OpenAI) or ``QuotaFailure`` (Gemini), carry
        no wait, take no token and open no window: waiting a moment cannot help, and a
        client should give up rather than retry.
        """
        with self._lock:
            self._exhausted_until = time.monotonic() + seconds

    def stats(self) -> QuotaStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            return QuotaStats(
                rps=self.rps,
                elapsed_s=time.monotonic() - self._t0,
                requests=self._requests,
                ok=self._ok,
                rate_limited=self._rate_limited,
                exhausted=self._exhausted,
                bad_requests=self._bad_requests,
                early=len(self._early_offsets),
                early_by_key=dict(self._early_by_key),
                early_offsets_s=tuple(self._early_offsets),
                by_key=dict(self._by_key),
                ok_by_key=dict(self._ok_by_key),
                billed_prompt_tokens=sum(self._prompt_by_key.values()),
                billed_completion_tokens=sum(self._completion_by_key.values()),
                billed_prompt_by_key=dict(self._prompt_by_key),
                billed_completion_by_key=dict(self._completion_by_key),
                ok_times=tuple(self._ok_times),
                limited_times=tuple(self._limited_times),
                billed_calls=tuple(self._billed_calls),
                last_ok_by_key=dict(self._last_ok_by_key),
                ok_texts=tuple(self._ok_texts),
                early_on_connection=self.early_on_connection,
            )

    def utilisation(self, start_s: float, end_s: float) -> float:
        """The share of the quota used in ``[start_s, end_s)``; see `QuotaStats.utilisation`."""
        return self.stats().utilisation(start_s, end_s)

    # The request path.

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        arrived = time.monotonic()
        parsed = urllib.parse.urlsplit(handler.path)
        gemini = parsed.path.endswith(":generateContent")
        openai = parsed.path.endswith("/chat/completions")
        key = _api_key(handler, parsed.query, gemini=gemini)
        if handler.command != "POST" or not (gemini or openai):
            self._count_bad(key)
            _send(handler, 404, {"error": {"code": 404, "message": "not found"}})
            return
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        if not isinstance(document, dict):
            self._count_bad(key)
            _send(handler, 400, _bad_request(gemini))
            return
        call = _parse(document, parsed.path, key, gemini=gemini)
        self._serve(handler, call, arrived)

    def _note_early_on_connection(self, handler: BaseHTTPRequestHandler, arrived: float) -> bool:
        """Count the request as early if its own connection carried a 429 still in force.

        HTTP/1.1 answers a connection's requests in turn, and a client reads an
        answer whole before it sends the next request on that connection: so
        this request left after its client had read the 429. No grace is due.
        """
        window: _Window | None = getattr(handler, "quota_window", None)
        if window is None or arrived >= window.end:
            return False
        self._early_offsets.append(arrived - window.start)
        self.early_on_connection += 1
        return True

    def _count_bad(self, key: str) -> None:
        with self._lock:
            self._requests += 1
            self._bad_requests += 1
            self._by_key[key] = self._by_key.get(key, 0) + 1

    def _serve(self, handler: BaseHTTPRequestHandler, call: _Call, arrived: float) -> None:
        wall = time.time()
        headers: dict[str, str] = {}
        wait: float | None = None  # the Retry-After of a rate-limit 429
        with self._lock:
            now = time.monotonic()
            key = call.key
            self._requests += 1
            self._by_key[key] = self._by_key.get(key, 0) + 1
            if self._note_early_on_connection(handler, arrived):
                self._early_by_key[key] = self._early_by_key.get(key, 0) + 1
            else:
                self._note_early(key, arrived)
            self._refill(now)
            if now < self._exhausted_until:
                self._exhausted += 1
                status = 429
                payload: Any = _GEMINI_QUOTA_FAILURE if call.gemini else _INSUFFICIENT_QUOTA
            elif self._tokens < 1:
                self._rate_limited += 1
                self._limited_times.append(arrived - self._t0)
                status = 429
                wait, headers = self._retry_after(wall, gemini=call.gemini)
                if wait is not None and not self.body_delay_ms:
                    self._open_window(key, now, wait)
                payload = (_gemini_rate_limited(self.retry_after_s) if call.gemini
                           else self._openai_rate_limited(call.model))
            else:
                self._tokens -= 1
                self._ok += 1
                self._ok_times.append(arrived - self._t0)
                self._ok_by_key[key] = self._ok_by_key.get(key, 0) + 1
                self._last_ok_by_key[key] = arrived - self._t0
                self._ok_texts.append((arrived - self._t0, call.user_text))
                status = 200
                payload, prompt, completion = _success(call)
                self._prompt_by_key[key] = self._prompt_by_key.get(key, 0) + prompt
                self._completion_by_key[key] = self._completion_by_key.get(key, 0) + completion
                self._billed_calls.append((call.user_text, prompt, completion))
            if self.rate_headers and not call.gemini:
                headers.update(self._rate_limit_headers())
        if status == 200 and self.latency_ms:
            time.sleep(self.latency_ms / 1000)
        delayed = wait is not None and bool(self.body_delay_ms)
        written = _send(handler, status, payload, headers=headers,
                        wall=None if status == 200 else wall,
                        body_delay_s=self.body_delay_ms / 1000 if delayed else 0.0)
        if wait is not None and written is not None:
            handler.quota_window = _Window(start=written, end=written + wait)  # type: ignore[attr-defined]
            if delayed:
                with self._lock:
                    self._open_window(key, written, wait)

    def _note_early(self, key: str, arrived: float) -> None:
        """Count the request as early if it is inside its key's window, past the grace."""
        window = self._windows.get(key)
        if window is None:
            return
        offset = arrived - window.start
        if self.early_grace_ms / 1000 < offset and arrived < window.end:
            self._early_by_key[key] = self._early_by_key.get(key, 0) + 1
            self._early_offsets.append(offset)

    def _open_window(self, key: str, now: float, wait: float) -> None:
        previous = self._windows.get(key)
        end = now + wait if previous is None else max(previous.end, now + wait)
        self._windows[key] = _Window(start=now, end=end)

    def _refill(self, now: float) -> None:
        self._tokens = min(self.burst, self._tokens + (now - self._refilled_at) * self.rps)
        self._refilled_at = now

    def _retry_after(self, wall: float, *, gemini: bool) -> tuple[float | None, dict[str, str]]:
        """The wait a rate-limit 429 tells its client, and the headers that tell it."""
        if gemini:
            return _ceil_ms(self.retry_after_s) / 1000, {}
        style = self.retry_after_style
        if style == "seconds":
            whole = math.ceil(round(self.retry_after_s, 6))
            return float(whole), {"Retry-After": str(whole)}
        if style == "ms":
            ms = _ceil_ms(self.retry_after_s)
            return ms / 1000, {"retry-after-ms": str(ms)}
        if style == "http-date":
            # An HTTP-date has whole seconds: round up, so the date is never before the wait.
            until = math.ceil(wall + self.retry_after_s)
            return until - wall, {"Retry-After": email.utils.formatdate(until, usegmt=True)}
        return None, {}

    def _rate_limit_headers(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit-requests": str(int(self.rps * 60)),
            "x-ratelimit-remaining-requests": str(max(0, math.floor(self._tokens))),
            "x-ratelimit-reset-requests": format_reset((self.burst - self._tokens) / self.rps),
        }

    def _openai_rate_limited(self, model: str) -> dict[str, Any]:
        message = _RATE_LIMIT_MESSAGE.format(model=model, limit=int(self.rps * 60),
                                             wait=format_reset(self.retry_after_s))
        return {"error": {"message": message, "type": "requests", "param": None,
                          "code": "rate_limit_exceeded"}}


def _api_key(handler: BaseHTTPRequestHandler, query: str, *, gemini: bool) -> str:
    """Who is asking: the bearer token (OpenAI) or the ``x-goog-api-key``/``key`` (Gemini)."""
    if gemini:
        key = handler.headers.get("x-goog-api-key")
        if not key:
            key = (urllib.parse.parse_qs(query).get("key") or [""])[0]
        return key or ANONYMOUS
    authorization = handler.headers.get("Authorization") or ""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else ANONYMOUS


def _parse(document: dict[str, Any], path: str, key: str, *, gemini: bool) -> _Call:
    if gemini:
        contents = document.get("contents") or []
        model = path.rsplit("/", 1)[-1].removesuffix(":generateContent")
        return _Call(gemini=True, key=key, model=model, messages=contents,
                     user_text=_last_user_text(contents, role_default="user",
                                               text_of=_gemini_text))
    messages = document.get("messages") or []
    return _Call(gemini=False, key=key, model=str(document.get("model") or ""),
                 messages=messages,
                 user_text=_last_user_text(messages, role_default="", text_of=_openai_text))


def _last_user_text(messages: Any, *, role_default: str, text_of: Any) -> str:
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role", role_default) == "user":
            return str(text_of(message))
    return ""


def _openai_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content
                       if isinstance(part, dict) and part.get("type", "text") == "text")
    return "" if content is None else str(content)


def _gemini_text(content: dict[str, Any]) -> str:
    parts = content.get("parts") or []
    return "".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))


def _success(call: _Call) -> tuple[dict[str, Any], int, int]:
    """The deterministic answer to `call`, and its prompt and completion tokens."""
    canonical = json.dumps(call.messages, sort_keys=True, separators=(",", ":"))
    n = hashlib.sha256(canonical.encode()).hexdigest()[:8]
    text = f"Answer {n}: {call.user_text[:60]}"
    prompt = max(1, math.ceil(len(json.dumps(call.messages)) / 4))
    completion = max(1, math.ceil(len(text) / 4))
    if call.gemini:
        return {
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                              "totalTokenCount": prompt + completion},
        }, prompt, completion
    document = json.loads(chat_completion(text, model=call.model))
    document["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion}
    return document, prompt, completion


def _gemini_rate_limited(wait_s: float) -> dict[str, Any]:
    return {"error": {
        "code": 429, "message": "Resource has been exhausted (e.g. check quota).",
        "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                     "retryDelay": format_duration(wait_s)}]}}


def _bad_request(gemini: bool) -> dict[str, Any]:
    if gemini:
        return {"error": {"code": 400, "message": "Invalid JSON payload received.",
                          "status": "INVALID_ARGUMENT"}}
    return {"error": {"message": "We could not parse the JSON body of your request.",
                      "type": "invalid_request_error", "param": None, "code": None}}


def _send(handler: BaseHTTPRequestHandler, status: int, payload: Any, *,
          headers: Mapping[str, str] | None = None, wall: float | None = None,
          body_delay_s: float = 0.0) -> float | None:
    """Answer `payload` as JSON with `headers`; ``Date`` is `wall`, the time the answer meant.

    With `body_delay_s` the headers go first and the body that long after.
    A client that has gone is ignored: the request was counted when it arrived.

    Returns:
        When the last byte was written (`time.monotonic`), or None if the client had gone.
    """
    body = json.dumps(payload).encode()
    try:
        handler.send_response_only(status)
        handler.send_header("Server", "quota-server")
        handler.send_header("Date", email.utils.formatdate(wall, usegmt=True))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if body_delay_s:
            handler.wfile.flush()
            time.sleep(body_delay_s)
        handler.wfile.write(body)
        handler.wfile.flush()
    except OSError:
        return None
    return time.monotonic()
