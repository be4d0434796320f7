"""How fast one worker may send to a provider: the share of the account's quota it learns.

`ProviderAdmission` decides *when* each call leaves; `LearnedRate` decides
*how many per second*. It is a pure controller: every input is a call's
outcome or a header the provider sent, with the event loop's time, so a
virtual clock replays it exactly.

Where it starts:

* **Remembered.** A worker with a call journal starts from the share its
  account's workers learned last time (`start_from`): no burst, no warm-up.
* **Told.** A provider that sends ``x-ratelimit-limit-requests`` (OpenAI and
  compatible servers; the limit is per minute) caps the rate at the account's
  limit from its first answer, before any 429.
* **Unpaced.** Otherwise the worker sends unpaced until its first 429, so a
  provider without a quota costs nothing. Its very first call goes alone,
  though: the answer may carry the account's limit, and a burst sent before
  it would only buy 429s and a Retry-After (`first_answer_pending`).

How it moves, as TCP learns a window:

* The first 429 ends the unpaced start: the rate restarts from what the
  account accepted of the burst, and a slow start doubles it every
  `SLOW_START_DOUBLING_S` until the next 429, which sets it to what the
  account delivered just before.
* Later 429s cut it by `DECREASE`, once per overshoot: the 429s of calls
  already on the wire when the first came back say nothing new.
* Each call that had to wait for the pacer raises it by a step that doubles
  every `DOUBLING_S` without a 429 (BIC's idea: back near the old rate soon,
  then probe). Where every worker of the account knows one rate alike (the
  limit the provider told, or the share remembered), the step is a share of
  it: growth that is the same for all, with cuts in proportion to each
  worker's rate, brings workers sharing one quota to equal shares, so they
  finish together (AIMD's fairness). Otherwise it is a share of the worker's
  own last cut.
* Where the provider says how much of the account is left
  (``x-ratelimit-remaining-requests``), that steers the growth: an account
  with most of its requests left has room (another worker finished, say),
  and the rate grows `HEADROOM_BOOST` times faster; one nearly dry does not
  grow at all, and one with none left is cut before it answers 429.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from beam_agents.model._types import RateLimits

__all__ = ["DECREASE", "LearnedRate", "Ticket"]

#: The ceiling of an unpaced worker: a million requests per second.
UNPACED_RPS = 1e6
#: The slowest a worker without a rate restarts at after its first 429.
INITIAL_RATE = 1.0
#: After the first 429, until the second, the rate doubles this often.
SLOW_START_DOUBLING_S = 1.0
#: A fresh 429 cuts the rate to this share of itself (the first: of what the account delivered).
DECREASE = 0.8
#: Right after a cut, the rate grows by this share of the rate the cut left, per second.
INCREASE_PER_S = 0.005
#: The growth doubles every this many seconds without a 429, up to `MAX_DOUBLINGS` times.
DOUBLING_S = 3.0
MAX_DOUBLINGS = 10.0
#: The slowest learned rate, in requests per second.
MIN_RATE = 0.01
#: The window over which the first cuts measure the delivered rate, in seconds.
DELIVERY_WINDOW_S = 2.0
#: With more than `ROOMY` of the account's requests left, growth is this many times faster.
HEADROOM_BOOST = 20.0
ROOMY = 0.5
#: With less than this share of the account's requests left, the rate does not grow.
NEARLY_DRY = 0.1


@dataclass(slots=True)
class Ticket:
    """One admitted call: when it left, whether the pacer held it, and what it was charged."""

    admitted_at: float
    paced: bool
    probe: bool
    tokens: int
    outcome: str | None = field(default=None)  # "ok" | "limited" | "other", once settled


class LearnedRate:
    """The rate one worker sends one provider at; see the module docstring.

    Args:
        ceiling: ``--model_max_rps``: the rate never passes it, and the worker
            starts paced at it. None: learned.
    """

    def __init__(self, ceiling: float | None = None) -> None:
        self._ceiling = ceiling
        self.rate = UNPACED_RPS if ceiling is None else ceiling
        self._unpaced = ceiling is None  # until the first 429 or a told limit
        self._slow_start = ceiling is None  # until the second
        self._scale = self.rate  # what the growth step is a share of: the rate of the last cut
        self._last_cut_at = -math.inf
        self._slow_start_at = -math.inf
        self._recent: deque[Ticket] = deque()
        self._account_rps: float | None = None  # the limit the provider told, per second
        self._most_left = 0  # the most requests the account was ever said to have left
        self._headroom = 1.0  # growth factor from the last remaining-requests header
        self._common: float | None = None  # a rate every worker of the account knows alike
        self._answered = ceiling is not None  # whether any call was answered yet
        #: The rate the last cut (or a remembered start) settled on: what a worker keeps.
        self.learned: float | None = None

    @property
    def first_answer_pending(self) -> bool:
        """Whether an unpaced worker still waits for its first answer before it sends more."""
        return self._unpaced and not self._answered

    def answered(self) -> None:
        """The first call has come back, whatever it said: the others may go."""
        self._answered = True

    @property
    def slow_start(self) -> bool:
        """Whether the worker is still finding the quota (the first cuts measure deliveries)."""
        return self._slow_start

    def start_from(self, rate: float, now: float) -> None:
        """Start from `rate`, learned by an earlier run: paced at once, as if just cut to it."""
        if not (math.isfinite(rate) and rate > 0):
            return
        self._unpaced = self._slow_start = False
        self._answered = True
        self._last_cut_at = now
        self._set(rate)
        self._scale = self.learned = self.rate
        self._common = self._common or self.rate  # every worker of the account starts alike

    def remember(self, ticket: Ticket) -> None:
        """Keep the tickets of the last window, which the first cuts measure over."""
        if not self._slow_start:
            return
        self._recent.append(ticket)
        horizon = ticket.admitted_at - 4 * DELIVERY_WINDOW_S
        while self._recent and self._recent[0].admitted_at < horizon:
            self._recent.popleft()

    def fresh(self, ticket: Ticket) -> bool:
        """Whether a 429 to `ticket` is news: the call left after the last cut."""
        return ticket.admitted_at >= self._last_cut_at

    def overshot(self, now: float) -> None:
        """A fresh 429 (or an account with nothing left): a cut is due when its pause ends."""
        self._last_cut_at = now

    def succeeded(self, ticket: Ticket, now: float, limits: RateLimits | None) -> None:
        """A call was answered: read what the provider said of the account, and grow if due."""
        if limits is not None:
            self._read(limits, now)
        rate = self.rate
        if ticket.paced and rate < self._cap():
            # Growth only while the pacer binds: a worker whose demand is below
            # its rate learns nothing about the quota. Per call, step / rate,
            # so the rate grows by `step` per second.
            if self._slow_start:
                step = rate * math.log(2) / SLOW_START_DOUBLING_S
            else:
                since = now - self._last_cut_at if self._last_cut_at > -math.inf else 0.0
                scale = self._scale if self._common is None else self._common
                step = INCREASE_PER_S * scale * 2.0 ** min(since / DOUBLING_S, MAX_DOUBLINGS)
                step *= self._headroom
            self._set(rate + step / rate)

    def cut(self, now: float) -> None:
        """Cut the rate for the last overshoot (run when its pause ends).

        The first cut has no rate to cut: it takes what the account delivered
        in the window before the 429, measured at the end of the pause, when
        the answers of the calls sent just before it are in (the share the
        account accepted, times the rate they were sent at). Later cuts are
        multiplicative: a worker that burst into another's stream sees a poor
        acceptance that says little about its share.
        """
        rate = DECREASE * self.rate
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
                rate = DECREASE * min(self.rate, sent_rate * ok / (ok + limited))
        rate = max(MIN_RATE, rate)
        # The growth step is a share of the rate the cut left, not of a fixed
        # one: a worker's 429s come in proportion to its rate, so growth in
        # proportion too makes every worker settle on the same rate, however
        # differently they started (a worker that joined late included).
        self._set(rate)
        self._scale = self.rate
        if not self._slow_start:
            self.learned = self.rate

    def _read(self, limits: RateLimits, now: float) -> None:
        """Take the account's limit as a ceiling, and its requests left as a guide to growth."""
        if limits.limit_requests:
            self._account_rps = self._common = limits.limit_requests / 60.0
            if self._unpaced:
                # Told the limit before any 429: start at it, paced, with no burst.
                self._unpaced = self._slow_start = False
                self._last_cut_at = now
                self._set(self._account_rps)
                self._scale = self.rate
        left = limits.remaining_requests
        if left is None:
            self._headroom = 1.0
            return
        self._most_left = max(self._most_left, left)
        share = left / self._most_left if self._most_left else 0.0
        self._headroom = (HEADROOM_BOOST if share > ROOMY
                          else 0.0 if share < NEARLY_DRY else 1.0)

    def _cap(self) -> float:
        caps = [cap for cap in (self._ceiling, self._account_rps) if cap is not None]
        return min(caps) if caps else math.inf

    def _set(self, rate: float) -> None:
        self.rate = max(MIN_RATE, min(self._cap(), rate))
