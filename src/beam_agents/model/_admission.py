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
  429s and rate-limit headers: `LearnedRate`) and a token rate
  (``--model_max_tpm``, estimated from each request and corrected by the
  usage reported) bound what leaves the worker.
  ``x-ratelimit-remaining-requests: 0`` pauses until the reset, before the 429.
* **Quota exhaustion is not a rate limit.** After an ``insufficient_quota``
  (a daily or billing limit), calls are refused here without reaching the
  provider, and one probe per `probe_interval_s` finds out when it is back.

Waiting here is not the activation's own time: the runtime leaves it out of
the activation timeout (`WaitLedger`), so a tight quota slows a run instead
of timing out its activations.

Tokens go through aiolimiter's leaky bucket of a minute, as providers define
tokens per minute (docs/decisions/0007-flow-control.md says why not Beam's
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

from aiolimiter import AsyncLimiter

from beam_agents.errors import QuotaExhaustedError
from beam_agents.model._rate_learning import UNPACED_RPS, LearnedRate, Ticket
from beam_agents.model._send_gate import RequestHeldBack
from beam_agents.model._types import ModelRequest, ModelResponse, RateLimits

__all__ = ["ProviderAdmission", "Ticket", "WaitLedger", "estimate_tokens"]

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
        self._learner = LearnedRate(max_rps)
        self._spacing = _Spacing(self._learner.rate)  # follows the learned rate
        self._tokens = AsyncLimiter(max_tpm, 60.0) if max_tpm is not None else None
        self._max_tpm = max_tpm
        self._token_debt = 0.0
        self._output_estimate = float(DEFAULT_OUTPUT_TOKENS)
        self._probe_interval_s = probe_interval_s
        self._fifo: asyncio.Lock | None = None
        self._paused_until = 0.0
        self._quiet_pauses = 0
        self._cut_pending = False
        self._first_answer: asyncio.Event | None = None  # set once the first call is back
        self._exhausted = False
        self._probe_at = 0.0
        self._probing = False
        #: Requests stopped at the last moment because a pause began after their admission.
        self.held_back_calls = 0

    @classmethod
    def unpaced(cls, *, model_id: str = "model") -> ProviderAdmission:
        """Admission for a facade used on its own: no pacing to speak of, but 429s still pause."""
        return cls(model_id=model_id, max_rps=UNPACED_RPS)

    @property
    def rate(self) -> float:
        """Requests per second the worker currently sends at most."""
        return self._learner.rate

    @property
    def learned_rate(self) -> float | None:
        """The share of the quota this worker learned, to remember for the next run; or None."""
        return self._learner.learned

    def start_from(self, rate: float) -> None:
        """Start paced at `rate`, the share an earlier run learned (no unpaced burst)."""
        self._learner.start_from(rate, asyncio.get_running_loop().time())
        self._spacing.rate = self._learner.rate

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
                if self._first_answer is not None:
                    # An unpaced worker's first call went alone; the others wait for its
                    # answer, which may say the account's limit (`LearnedRate`).
                    await self._first_answer.wait()
                probe = await self._wait_out_pauses(loop)
                paced = await self._pace(loop, tokens)
                # A 429 that came back while this call waited for its turn
                # holds it too: nothing leaves before a Retry-After (invariant 11).
                await self._wait_out_pauses(loop, probing=probe)
                now = loop.time()
                self._spacing.left(now)
                ticket = Ticket(admitted_at=now, paced=paced, probe=probe, tokens=tokens)
                if self._learner.first_answer_pending and self._first_answer is None:
                    self._first_answer = asyncio.Event()
        finally:
            if ledger is not None:
                now = loop.time()
                ledger.end(now, waited=now - started > 0.001)
        self._learner.remember(ticket)  # the first cuts measure what the account delivered
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
                self._cut_pending = False
                self._learner.cut(now)
                self._spacing.rate = self._learner.rate
            return probing

    async def _pace(self, loop: asyncio.AbstractEventLoop, tokens: int) -> bool:
        """Take the request's turn in the rate and token buckets; whether the rate held it."""
        paced = await self._spacing.take(loop)
        if self._tokens is not None and self._max_tpm is not None:
            amount = min(float(self._max_tpm), max(0.0, tokens + self._token_debt))
            self._token_debt = min(0.0, tokens + self._token_debt)
            await self._tokens.acquire(amount)
        return paced

    def check_send(self, ticket: Ticket) -> None:
        """Stop `ticket`'s request at the last moment if a pause began since its admission.

        The provider calls this (through `check_before_send`) right before the
        request's first byte leaves: a 429 read while the call waited for a
        connection still holds it (invariant 11).

        Raises:
            RequestHeldBack: A pause is in force, or the quota ran out and this
                call is not its probe; the request was not sent.
        """
        now = asyncio.get_running_loop().time()
        if now < self._paused_until or (self._exhausted and not ticket.probe):
            raise RequestHeldBack(
                f"a request to {self._model_id} was held back before sending: the provider "
                f"asked to wait {self._paused_until - now:.3f} s more")

    def held_back(self, ticket: Ticket) -> None:
        """`ticket`'s request was never sent: it takes its turn again, and says nothing."""
        ticket.outcome = "other"
        self._first_back()
        self._credit(ticket)
        self.held_back_calls += 1
        if ticket.probe:
            self._probing = False

    def succeeded(self, ticket: Ticket, response: ModelResponse, *, now: float) -> None:
        """The call was answered: grow the learned rate if the pacer held it, correct the tokens."""
        ticket.outcome = "ok"
        self._first_back()
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
        self._learner.succeeded(ticket, now, response.limits)
        self._spacing.rate = self._learner.rate
        if response.limits is not None:
            self._read_limits(response.limits, now, ticket)

    def rate_limited(self, ticket: Ticket, retry_after_s: float | None, *, now: float) -> float:
        """A 429: pause every call of the provider; a fresh one also cuts the rate.

        Returns:
            The pause, in seconds from `now`.
        """
        ticket.outcome = "limited"
        self._first_back()
        self._credit(ticket)
        if ticket.probe or self._exhausted:
            # A rate limit, not an exhausted quota: the quota is back.
            self._exhausted = self._probing = False
        fresh = self._learner.fresh(ticket)
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
            self._learner.overshot(now)
            self._cut_pending = True
        return pause

    def quota_exhausted(self, ticket: Ticket, *, now: float) -> None:
        """The provider said the quota is used up: refuse calls until a probe finds it back."""
        ticket.outcome = "other"
        self._first_back()
        self._credit(ticket)
        self._exhausted = True
        self._probing = False
        self._probe_at = now + self._probe_interval_s

    def released(self, ticket: Ticket) -> None:
        """The call ended some other way (a failure, a cancellation): free the probe slot."""
        ticket.outcome = "other"
        self._first_back()
        if ticket.probe:
            self._probing = False

    def _first_back(self) -> None:
        """A call came back (or never left): an unpaced worker's other calls may go."""
        if self._first_answer is not None and not self._first_answer.is_set():
            self._learner.answered()
            self._first_answer.set()

    def _credit(self, ticket: Ticket) -> None:
        """Give back the tokens a refused call was charged: the provider counted none."""
        if self._max_tpm is not None:
            self._token_debt = max(-self._max_tpm, self._token_debt - ticket.tokens)

    def _read_limits(self, limits: RateLimits, now: float, ticket: Ticket) -> None:
        """Pause before the account runs dry, where the provider says how much is left."""
        for remaining, reset_s in ((limits.remaining_requests, limits.reset_requests_s),
                                   (limits.remaining_tokens, limits.reset_tokens_s)):
            if remaining is not None and remaining <= 0 and reset_s is not None:
                self._paused_until = max(self._paused_until,
                                         now + min(MAX_QUIET_PAUSE_S, max(0.0, reset_s)))
                if remaining is limits.remaining_requests and self._learner.fresh(ticket):
                    # Nothing left is the 429 the next call would get: cut as for one.
                    self._learner.overshot(now)
                    self._cut_pending = True
