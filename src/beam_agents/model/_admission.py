"""Admission: a provider's calls wait for its capacity, and a 429 pauses them all (invariant 11).

A worker runs up to ``max_in_flight`` activations at once, and a real API
enforces a quota on the whole account. `ProviderAdmission` stands between the
model facade and the provider, one per provider per worker, and decides when
each call may leave:

* **A 429 pauses the provider, not the key.** Its ``Retry-After`` (or
  ``retry-after-ms``, or Gemini's ``RetryInfo``) holds every call of the
  worker until it has passed; the facade then asks again. A 429 never counts
  toward the circuit breaker and never fails the activation.
* **Pacing.** A request rate (``--model_max_rps``, or the share learned from
  429s) and a token rate (``--model_max_tpm``, estimated from each request and
  corrected by the usage reported) bound what leaves the worker. The share is
  learned as TCP learns a window. A worker sends unpaced until its first
  429, so a provider without a quota costs nothing; from what the account
  accepted of that burst, a slow start doubles the rate every
  `SLOW_START_DOUBLING_S` until the next 429, which sets it to what the
  account delivered just before; later 429s cut it by `DECREASE`,
  and each call that had to wait for the pacer raises it by a step that
  doubles every `DOUBLING_S` without a 429 (BIC's idea: back near the old
  rate soon, then probe). Every worker starts and grows alike, so N workers
  sharing one quota converge on equal shares with no coordination.
  ``x-ratelimit-remaining-requests: 0`` pauses until the reset, before the 429.
* **Quota exhaustion is not a rate limit.** After an ``insufficient_quota``
  (a daily or billing limit), calls are refused here without reaching the
  provider, and one probe per `probe_interval_s` finds out when it is back.

Waiting here is not the activation's own time: the runtime leaves it out of
the activation timeout (`WaitLedger`), so a tight quota slows a run instead
of timing out its activations.

Tokens go through aiolimiter's leaky bucket of a minute, as providers define
tokens per minute (see the design notes for why not Beam's
``AdaptiveThrottler``). Requests are spaced rather than bucketed: a bucket
of one request is a spacing, whose whole state is when the last request
left, so `_Spacing` keeps that instant and a new rate applies exactly.
Calls queue on one FIFO lock, so they leave in arrival order and only the
head ever waits. Times are the running event loop's clock: a loop with a
virtual clock makes every decision here reproducible in a test.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass, field

from aiolimiter import AsyncLimiter

from beam_agents.errors import QuotaExhaustedError
from beam_agents.model._types import ModelRequest, ModelResponse, RateLimits

__all__ = ["DECREASE", "ProviderAdmission", "Ticket", "WaitLedger", "estimate_tokens"]

#: The ceiling of `ProviderAdmission.unpaced`: a million requests per second.
UNPACED_RPS = 1e6
#: The slowest a worker without ``--model_max_rps`` restarts at after its first 429.
INITIAL_RATE = 1.0
#: After the first 429, until the second, it doubles its rate this often.
SLOW_START_DOUBLING_S = 1.0
#: A fresh 429 cuts the rate to this share of itself (the first: of what the account delivered).
DECREASE = 0.8
#: Right after a cut, the rate grows by this share of the highest rate held, per second.
INCREASE_PER_S = 0.005
#: The growth doubles every this many seconds without a 429, up to `MAX_DOUBLINGS` times.
DOUBLING_S = 5.0
MAX_DOUBLINGS = 10.0
#: The slowest learned rate, in requests per second.
MIN_RATE = 0.01
#: The window over which the first cut measures the delivered rate, in seconds.
DELIVERY_WINDOW_S = 2.0
#: A 429 that says nothing pauses this long, doubling on 429s in a row, up to `MAX_QUIET_PAUSE_S`.
QUIET_PAUSE_S = 1.0
MAX_QUIET_PAUSE_S = 32.0
#: Bounds on any pause a provider asks for: a Retry-After of 0 is not a licence to hammer.
MIN_PAUSE_S = 0.05
MAX_PAUSE_S = 3600.0
#: Completion tokens assumed for a request without ``max_tokens`` until usage says otherwise.
DEFAULT_OUTPUT_TOKENS = 256
_OUTPUT_EWMA = 0.2
_CHARS_PER_TOKEN = 4
_TOKENS_PER_MESSAGE = 4


def estimate_tokens(request: ModelRequest, *, output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> int:
    """Prompt plus completion tokens `request` may cost, before the provider says.

    About four characters a token over the messages' text and the tools'
    specs, a few tokens per message, and ``max_tokens`` (else `output_tokens`)
    for the answer. The reported usage corrects it afterwards; what matters is
    that it never reads a clock or a tokenizer, so it is the same everywhere.
    """
    chars = sum(len(str(message.get("content") or "")) for message in request.messages)
    chars += sum(len(str(tool)) for tool in request.tools)
    prompt = math.ceil(chars / _CHARS_PER_TOKEN) + _TOKENS_PER_MESSAGE * len(request.messages)
    answer = request.sampling.get("max_tokens")
    return prompt + (answer if isinstance(answer, int) else output_tokens)


class WaitLedger:
    """How long one activation's calls spent waiting for admission; the timeout leaves it out.

    Calls of one activation may wait at once (``asyncio.gather``); the ledger
    adds up the time during which at least one of them waited.
    """

    __slots__ = ("_since", "_waiting", "waited_s", "waits")

    def __init__(self) -> None:
        self._waiting = 0
        self._since = 0.0
        #: Seconds spent waiting, wait in progress excluded.
        self.waited_s = 0.0
        #: Calls that had to wait.
        self.waits = 0

    def begin(self, now: float) -> None:
        """A call starts waiting at `now`."""
        if self._waiting == 0:
            self._since = now
        self._waiting += 1

    def end(self, now: float, *, waited: bool) -> None:
        """A call stops waiting at `now`; `waited` says whether it really had to."""
        self._waiting -= 1
        if self._waiting == 0:
            self.waited_s += now - self._since
        self.waits += waited

    def waited_until(self, now: float) -> float:
        """Seconds waited up to `now`, a wait in progress included."""
        return self.waited_s + (now - self._since if self._waiting else 0.0)


@dataclass(slots=True)
class Ticket:
    """One admitted call: when it left, whether the pacer held it, and what it was charged."""

    admitted_at: float
    paced: bool
    probe: bool
    tokens: int
    outcome: str | None = field(default=None)  # "ok" | "limited" | "other", once settled


#: The shortest sleep to a turn: a wait that float arithmetic shrank to nothing
#: must still move the clock, or a virtual one would spin at the same instant.
_MIN_SLEEP_S = 1e-8


class _Spacing:
    """Requests at most `rate` per second, evenly spaced: a schedule of departures.

    A bucket that holds one request has one piece of state, when the last
    request left, and the next may leave ``1 / rate`` after it. Keeping that
    instant itself, rather than a bucket's level, makes a new rate exact (the
    next turn moves with it, also for a call already asleep, which looks
    again when it wakes) and makes each wait one sleep to a known instant.
    """

    __slots__ = ("_left_at", "rate")

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._left_at: float | None = None

    async def take(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Wait for this request's turn; returns whether it had to wait."""
        held = False
        while self._left_at is not None:
            wait = self._left_at + 1 / self.rate - loop.time()
            if wait <= 0:
                break
            held = True
            await asyncio.sleep(max(wait, _MIN_SLEEP_S))
        return held

    def left(self, now: float) -> None:
        """A request left at `now`."""
        self._left_at = now


class ProviderAdmission:
    """Admits one provider's calls on one worker; see the module docstring.

    Not thread-safe: every call comes from the runtime's one event loop.

    Args:
        model_id: The provider's model, for messages.
        max_rps: The ceiling on requests per second (``--model_max_rps``);
            None: unpaced until the first 429, then learned.
        max_tpm: Tokens per minute (``--model_max_tpm``); None: no token pacing.
        probe_interval_s: After quota exhaustion, one call per this many
            seconds is let through to find out whether it is back (the long
            backoff, ``--retry_max_ms``).
    """

    def __init__(self, *, model_id: str = "model", max_rps: float | None = None,
                 max_tpm: int | None = None, probe_interval_s: float = 60.0) -> None:
        self._model_id = model_id
        self._ceiling = max_rps
        start = UNPACED_RPS if max_rps is None else max_rps
        self._spacing = _Spacing(start)
        self._rate = start  # the learned rate, which the spacing follows
        self._unpaced = max_rps is None  # until the first 429
        self._slow_start = max_rps is None  # until the second
        self._scale = start  # what the growth step is a share of: the rate set by the last cut
        self._tokens = AsyncLimiter(max_tpm, 60.0) if max_tpm is not None else None
        self._max_tpm = max_tpm
        self._token_debt = 0.0
        self._output_estimate = float(DEFAULT_OUTPUT_TOKENS)
        self._probe_interval_s = probe_interval_s
        self._fifo: asyncio.Lock | None = None
        self._paused_until = 0.0
        self._quiet_pauses = 0
        self._last_cut_at = -math.inf
        self._cut_pending = False
        self._recent: deque[Ticket] = deque()
        self._slow_start_at = -math.inf
        self._exhausted = False
        self._probe_at = 0.0
        self._probing = False

    @classmethod
    def unpaced(cls, *, model_id: str = "model") -> ProviderAdmission:
        """Admission for a facade used on its own: no pacing to speak of, but 429s still pause."""
        return cls(model_id=model_id, max_rps=UNPACED_RPS)

    @property
    def rate(self) -> float:
        """Requests per second the worker currently sends at most."""
        return self._rate

    @property
    def exhausted(self) -> bool:
        """Whether the provider said the quota is used up and no probe has found it back."""
        return self._exhausted

    @property
    def output_estimate(self) -> int:
        """Completion tokens assumed for a request without ``max_tokens``: the recent average."""
        return round(self._output_estimate)

    def paused_for(self, now: float) -> float:
        """Seconds from `now` until calls may leave again (0 when not paused)."""
        return max(0.0, self._paused_until - now)

    async def admit(self, tokens: int, ledger: WaitLedger | None = None) -> Ticket:
        """Wait until a call costing about `tokens` may leave; the ticket settles it.

        Raises:
            QuotaExhaustedError: The quota is known to be out and this call is
                not the probe; the provider was not called.
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        if ledger is not None:
            ledger.begin(started)
        try:
            if self._fifo is None:
                self._fifo = asyncio.Lock()
            async with self._fifo:
                probe = await self._wait_out_pauses(loop)
                paced = await self._pace(loop, tokens)
                # A 429 that came back while this call waited for its turn
                # holds it too: nothing leaves before a Retry-After (invariant 11).
                await self._wait_out_pauses(loop, probing=probe)
                now = loop.time()
                self._spacing.left(now)
                ticket = Ticket(admitted_at=now, paced=paced, probe=probe, tokens=tokens)
        finally:
            if ledger is not None:
                now = loop.time()
                ledger.end(now, waited=now - started > 0.001)
        if self._slow_start:  # the first cut measures what the account delivered
            self._remember(ticket)
        return ticket

    async def _wait_out_pauses(self, loop: asyncio.AbstractEventLoop, *,
                               probing: bool = False) -> bool:
        """Sleep through every pause in force; returns whether this call is the quota probe."""
        while True:
            now = loop.time()
            if self._exhausted and not probing:
                if now < self._probe_at or self._probing:
                    raise QuotaExhaustedError(
                        f"the quota of {self._model_id} is used up (the provider answered "
                        f"insufficient quota); the next probe goes in "
                        f"{max(0.0, self._probe_at - now):.0f} s, and this call was not sent",
                        model_id=self._model_id, status=None,
                        probe_in_s=max(0.0, self._probe_at - now))
                self._probing = probing = True
            if now < self._paused_until:
                # At least a millisecond: a clock of coarse resolution must still get there.
                await asyncio.sleep(max(0.001, self._paused_until - now))
                continue
            if self._cut_pending:
                self._apply_cut(now)
            return probing

    async def _pace(self, loop: asyncio.AbstractEventLoop, tokens: int) -> bool:
        """Take the request's turn in the rate and token buckets; whether the rate held it."""
        paced = await self._spacing.take(loop)
        if self._tokens is not None and self._max_tpm is not None:
            amount = min(float(self._max_tpm), max(0.0, tokens + self._token_debt))
            self._token_debt = min(0.0, tokens + self._token_debt)
            await self._tokens.acquire(amount)
        return paced

    def succeeded(self, ticket: Ticket, response: ModelResponse, *, now: float) -> None:
        """The call was answered: grow the learned rate if the pacer held it, correct the tokens."""
        ticket.outcome = "ok"
        self._quiet_pauses = 0
        if ticket.probe or self._exhausted:
            self._exhausted = self._probing = False
        used = response.tokens_in + response.tokens_out
        if used:
            self._token_debt += used - ticket.tokens
            if self._max_tpm is not None:
                self._token_debt = max(-self._max_tpm, min(self._max_tpm, self._token_debt))
        if response.tokens_out:
            self._output_estimate += _OUTPUT_EWMA * (response.tokens_out - self._output_estimate)
        rate = self._rate
        if ticket.paced and rate < (self._ceiling or math.inf):
            # Growth only while the pacer binds: a worker whose demand is below
            # its rate learns nothing about the quota. Per call, step / rate,
            # so the rate grows by `step` per second.
            if self._slow_start:
                step = rate * math.log(2) / SLOW_START_DOUBLING_S
            else:
                since = now - self._last_cut_at if self._last_cut_at > -math.inf else 0.0
                step = INCREASE_PER_S * self._scale * 2.0 ** min(since / DOUBLING_S,
                                                                 MAX_DOUBLINGS)
            self._set_rate(rate + step / rate)
        if response.limits is not None:
            self._read_limits(response.limits, now)

    def rate_limited(self, ticket: Ticket, retry_after_s: float | None, *, now: float) -> float:
        """A 429: pause every call of the provider; a fresh one also cuts the rate.

        Returns:
            The pause, in seconds from `now`.
        """
        ticket.outcome = "limited"
        self._credit(ticket)
        if ticket.probe or self._exhausted:
            # A rate limit, not an exhausted quota: the quota is back.
            self._exhausted = self._probing = False
        fresh = ticket.admitted_at >= self._last_cut_at
        if retry_after_s is None:
            pause = min(MAX_QUIET_PAUSE_S, QUIET_PAUSE_S * 2.0 ** self._quiet_pauses)
            self._quiet_pauses += fresh
        else:
            pause = retry_after_s
        pause = min(MAX_PAUSE_S, max(MIN_PAUSE_S, pause))
        self._paused_until = max(self._paused_until, now + pause)
        if fresh:
            # One cut per overshoot: the 429s of calls already on the wire
            # when the first came back say nothing new.
            self._last_cut_at = now
            self._cut_pending = True
        return pause

    def quota_exhausted(self, ticket: Ticket, *, now: float) -> None:
        """The provider said the quota is used up: refuse calls until a probe finds it back."""
        ticket.outcome = "other"
        self._credit(ticket)
        self._exhausted = True
        self._probing = False
        self._probe_at = now + self._probe_interval_s

    def released(self, ticket: Ticket) -> None:
        """The call ended some other way (a failure, a cancellation): free the probe slot."""
        ticket.outcome = "other"
        if ticket.probe:
            self._probing = False

    def _apply_cut(self, now: float) -> None:
        """Cut the rate for the last fresh 429 (run when its pause ends).

        The first cut has no rate to cut: it takes what the account delivered
        in the second before the 429, measured at the end of the pause, when
        the answers of the calls sent just before it are in (the share the
        account accepted, times the rate they were sent at). Later cuts are
        multiplicative: a worker that burst into another's stream sees a poor
        acceptance that says little about its share.
        """
        self._cut_pending = False
        rate = DECREASE * self._rate
        if self._unpaced:
            # The first 429 ends the unpaced start, which was a burst: what the
            # account accepted of it is a floor to restart the slow start from.
            self._unpaced = False
            start = self._last_cut_at - DELIVERY_WINDOW_S
            ok = sum(1 for t in self._recent
                     if start <= t.admitted_at <= self._last_cut_at and t.outcome == "ok")
            self._recent.clear()
            self._slow_start_at = now
            rate = max(INITIAL_RATE, DECREASE * ok / DELIVERY_WINDOW_S)
        elif self._slow_start:
            # The window is the slow start's own, however short: a worker that
            # joined a quota others already fill meets its next 429 quickly.
            self._slow_start = False
            start = max(self._last_cut_at - DELIVERY_WINDOW_S, self._slow_start_at)
            window = [t for t in self._recent if start <= t.admitted_at <= self._last_cut_at]
            self._recent.clear()
            ok = sum(1 for t in window if t.outcome == "ok")
            limited = sum(1 for t in window if t.outcome == "limited")
            span = self._last_cut_at - start
            if ok and span > 0:  # else nothing got through: the plain cut is all there is
                sent_rate = len(window) / span
                rate = DECREASE * min(self._rate, sent_rate * ok / (ok + limited))
        rate = max(MIN_RATE, rate)
        # The growth step is a share of the rate the cut left, not of a fixed
        # one: a worker's 429s come in proportion to its rate, so growth in
        # proportion too makes every worker settle on the same rate, however
        # differently they started (a worker that joined late included).
        self._scale = rate
        self._set_rate(rate)

    def _set_rate(self, rate: float) -> None:
        """Learn `rate`, under the ceiling; the spacing follows at once."""
        if self._ceiling is not None:
            rate = min(self._ceiling, rate)
        self._rate = self._spacing.rate = rate

    def _credit(self, ticket: Ticket) -> None:
        """Give back the tokens a refused call was charged: the provider counted none."""
        if self._max_tpm is not None:
            self._token_debt = max(-self._max_tpm, self._token_debt - ticket.tokens)

    def _remember(self, ticket: Ticket) -> None:
        """Keep the tickets of the last window, which the first cut measures over."""
        self._recent.append(ticket)
        horizon = ticket.admitted_at - 4 * DELIVERY_WINDOW_S
        while self._recent and self._recent[0].admitted_at < horizon:
            self._recent.popleft()

    def _read_limits(self, limits: RateLimits, now: float) -> None:
        """Pause before the account runs dry, where the provider says how much is left."""
        for remaining, reset_s in ((limits.remaining_requests, limits.reset_requests_s),
                                   (limits.remaining_tokens, limits.reset_tokens_s)):
            if remaining is not None and remaining <= 0 and reset_s is not None:
                self._paused_until = max(self._paused_until,
                                         now + min(MAX_QUIET_PAUSE_S, max(0.0, reset_s)))
