"""Admission in front of a provider (invariant 11), on a virtual clock.

Every test runs on a looptime event loop, whose clock jumps to the next timer
instead of waiting for it: minutes of paced traffic run in milliseconds, and
every time below is exact. The account the workers share is a token bucket,
the way providers enforce a quota: `Account`.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import looptime
import pytest

from beam_agents.errors import QuotaExhaustedError
from beam_agents.model import (
    ModelRequest,
    ModelResponse,
    ProviderAdmission,
    RateLimits,
    WaitLedger,
    estimate_tokens,
)

T = TypeVar("T")
ANSWER = ModelResponse(text="ok", model_id="m",
                       usage={"prompt_tokens": 6, "completion_tokens": 4, "total_tokens": 10})


@pytest.fixture
def virtual() -> Iterator[Any]:
    """Run a coroutine on a loop with a virtual clock that starts at 0."""
    # A nanosecond, like a real clock: coarser steps than aiolimiter's arithmetic
    # could leave a bucket waking at the same virtual instant forever.
    loop = looptime.new_event_loop(start=0.0, noop_cycles=0, resolution=1e-9)

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return loop.run_until_complete(coro)

    yield run
    loop.close()


@dataclass
class Account:
    """A quota of `rps` requests per second, a bucket of one second's worth, shared by all."""

    rps: float
    tokens: float = -1.0
    at: float = 0.0
    ok: list[tuple[float, int]] = field(default_factory=list)
    limited: list[tuple[float, int]] = field(default_factory=list)

    def take(self, now: float, worker: int) -> bool:
        if self.tokens < 0:
            self.tokens = self.rps
        self.tokens = min(self.rps, self.tokens + (now - self.at) * self.rps)
        self.at = now
        if self.tokens < 1:
            self.limited.append((now, worker))
            return False
        self.tokens -= 1
        self.ok.append((now, worker))
        return True


async def calls(admission: ProviderAdmission, account: Account, count: int, *,
                worker: int = 0, latency_s: float = 0.2, retry_after_s: float = 1.0) -> None:
    """One key's calls, one at a time; a 429 waits for admission and asks again."""
    loop = asyncio.get_running_loop()
    for _ in range(count):
        while True:
            ticket = await admission.admit(10)
            if account.take(loop.time(), worker):
                await asyncio.sleep(latency_s)
                admission.succeeded(ticket, ANSWER, now=loop.time())
                break
            await asyncio.sleep(0.001)
            admission.rate_limited(ticket, retry_after_s, now=loop.time())


async def workers(account: Account, count: int, keys: int, calls_per_key: int,
                  **kwargs: Any) -> list[ProviderAdmission]:
    admissions = [ProviderAdmission(**kwargs) for _ in range(count)]
    await asyncio.gather(*(calls(admission, account, calls_per_key, worker=worker)
                           for worker, admission in enumerate(admissions)
                           for _ in range(keys)))
    return admissions


def steady(account: Account) -> tuple[float, float]:
    """The share of the quota used and the share of requests refused, after warm-up.

    Warm-up ends 5 s after the first 429, which ends the slow start; the
    steady part ends when the 95th percentile of the answers is in.
    """
    ok = sorted(t for t, _ in account.ok)
    start = min(t for t, _ in account.limited) + 5.0
    end = ok[int(len(ok) * 0.95)]
    served = sum(1 for t in ok if start <= t < end)
    refused = sum(1 for t, _ in account.limited if start <= t < end)
    return served / (account.rps * (end - start)), refused / (served + refused)


def test_no_call_leaves_before_a_retry_after_has_passed(virtual: Any) -> None:
    """A 429 pauses the whole provider, every key's calls, for its Retry-After."""
    admission = ProviderAdmission(max_rps=100)

    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        first = await admission.admit(10)
        admission.rate_limited(first, 2.5, now=loop.time())
        later = await asyncio.gather(*(admission.admit(10) for _ in range(5)))
        return [ticket.admitted_at - first.admitted_at for ticket in later]

    waits = virtual(scenario())
    assert min(waits) >= 2.5


def test_a_429_that_comes_back_while_a_call_waits_its_turn_holds_it_too(virtual: Any) -> None:
    admission = ProviderAdmission(max_rps=1)

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        first = await admission.admit(10)  # t=0; the next call's turn is at t=1
        waiting = asyncio.ensure_future(admission.admit(10))
        await asyncio.sleep(0.5)
        admission.rate_limited(first, 3.0, now=loop.time())  # the 429 comes back at t=0.5
        return (await waiting).admitted_at

    assert virtual(scenario()) >= 3.5


def test_a_429_without_a_wait_pauses_a_second_and_doubles_on_429s_in_a_row(virtual: Any) -> None:
    admission = ProviderAdmission(max_rps=1000)

    async def scenario() -> list[float]:
        loop = asyncio.get_running_loop()
        pauses = []
        for _ in range(4):
            ticket = await admission.admit(10)
            pauses.append(admission.rate_limited(ticket, None, now=loop.time()))
        ticket = await admission.admit(10)
        admission.succeeded(ticket, ANSWER, now=loop.time())
        ticket = await admission.admit(10)
        pauses.append(admission.rate_limited(ticket, None, now=loop.time()))
        return pauses

    assert virtual(scenario()) == [1.0, 2.0, 4.0, 8.0, 1.0]


def test_a_retry_after_of_zero_still_pauses_a_little(virtual: Any) -> None:
    admission = ProviderAdmission()

    async def scenario() -> float:
        ticket = await admission.admit(10)
        return admission.rate_limited(ticket, 0.0, now=asyncio.get_running_loop().time())

    assert virtual(scenario()) > 0


def test_a_static_rate_spaces_calls_evenly_at_it(virtual: Any) -> None:
    admission = ProviderAdmission(max_rps=10)

    async def scenario() -> list[float]:
        tickets = await asyncio.gather(*(admission.admit(10) for _ in range(50)))
        return sorted(ticket.admitted_at for ticket in tickets)

    times = virtual(scenario())
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) == pytest.approx(0.1, abs=1e-6)
    assert times[-1] - times[0] == pytest.approx(4.9, abs=1e-6)


def test_calls_leave_in_the_order_they_arrived(virtual: Any) -> None:
    admission = ProviderAdmission(max_rps=5)

    async def scenario() -> list[int]:
        order: list[int] = []

        async def one(index: int) -> None:
            await asyncio.sleep(index * 0.001)
            await admission.admit(10)
            order.append(index)

        await asyncio.gather(*(one(index) for index in range(20)))
        return order

    assert virtual(scenario()) == list(range(20))


def test_tokens_per_minute_pace_by_the_estimate_and_the_usage_corrects_it(virtual: Any) -> None:
    admission = ProviderAdmission(max_tpm=600, max_rps=1000)  # 10 tokens a second

    async def scenario() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        await admission.admit(600)  # the whole minute's bucket at once
        started = loop.time()
        second = await admission.admit(100)
        waited = second.admitted_at - started
        # The call used 50 tokens of the 100 it was charged: the credit of 50
        # lets the next call, estimated at 50, leave at once.
        admission.succeeded(second, ModelResponse(text="", model_id="m", usage={
            "prompt_tokens": 30, "completion_tokens": 20}), now=loop.time())
        third = await admission.admit(50)
        return waited, third.admitted_at - second.admitted_at

    waited, after_credit = virtual(scenario())
    assert waited == pytest.approx(10.0, rel=1e-3)
    assert after_credit == pytest.approx(0.0, abs=1e-3)


def test_an_exhausted_quota_refuses_calls_here_and_lets_one_probe_per_interval(
        virtual: Any) -> None:
    """One attempt per backoff period, never a retry storm (invariant 11)."""
    admission = ProviderAdmission(probe_interval_s=60.0)

    async def scenario() -> tuple[int, int, list[float]]:
        loop = asyncio.get_running_loop()
        ticket = await admission.admit(10)
        admission.quota_exhausted(ticket, now=loop.time())
        refused = sent = 0
        probes: list[float] = []
        while loop.time() < 300:
            try:
                ticket = await admission.admit(10)
            except QuotaExhaustedError as exc:
                refused += 1
                assert exc.probe_in_s is not None
                await asyncio.sleep(1.0)
                continue
            sent += 1
            probes.append(loop.time())
            assert ticket.probe
            admission.quota_exhausted(ticket, now=loop.time())  # still out
        return refused, sent, probes

    refused, sent, probes = virtual(scenario())
    assert sent == 4  # at 60, 120, 180 and 240 s
    assert probes == pytest.approx([60.0, 120.0, 180.0, 240.0], abs=1.0)
    assert refused > 250


def test_a_probe_that_is_answered_reopens_admission(virtual: Any) -> None:
    admission = ProviderAdmission(probe_interval_s=10.0)

    async def scenario() -> bool:
        loop = asyncio.get_running_loop()
        ticket = await admission.admit(10)
        admission.quota_exhausted(ticket, now=loop.time())
        with pytest.raises(QuotaExhaustedError):
            await admission.admit(10)
        await asyncio.sleep(10)
        probe = await admission.admit(10)
        with pytest.raises(QuotaExhaustedError):  # one probe at a time
            await admission.admit(10)
        admission.succeeded(probe, ANSWER, now=loop.time())
        await admission.admit(10)
        return admission.exhausted

    assert virtual(scenario()) is False


def test_a_probe_that_fails_otherwise_frees_the_probe_slot(virtual: Any) -> None:
    admission = ProviderAdmission(probe_interval_s=10.0)

    async def scenario() -> bool:
        loop = asyncio.get_running_loop()
        admission.quota_exhausted(await admission.admit(10), now=loop.time())
        await asyncio.sleep(10)
        probe = await admission.admit(10)
        admission.released(probe)  # a 503: it says nothing about the quota
        return (await admission.admit(10)).probe

    assert virtual(scenario()) is True


def test_the_provider_saying_nothing_is_left_pauses_until_its_reset(virtual: Any) -> None:
    admission = ProviderAdmission(max_rps=100)

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        ticket = await admission.admit(10)
        answer = ModelResponse(text="", model_id="m",
                               limits=RateLimits(remaining_requests=0, reset_requests_s=1.5))
        admission.succeeded(ticket, answer, now=loop.time())
        return (await admission.admit(10)).admitted_at - ticket.admitted_at

    assert virtual(scenario()) >= 1.5


@pytest.mark.parametrize("rps", [20, 50])
def test_one_worker_learns_the_quota_and_stays_under_it(virtual: Any, rps: int) -> None:
    """After warm-up: >= 90 % of the quota used, <= 1 % of requests refused."""
    account = Account(rps)
    virtual(workers(account, 1, keys=64, calls_per_key=rps))
    used, refused = steady(account)
    assert used >= 0.9
    assert refused <= 0.01


def test_two_workers_sharing_one_quota_use_it_together_with_no_coordination(
        virtual: Any) -> None:
    account = Account(20)
    virtual(workers(account, 2, keys=64, calls_per_key=16))
    used, refused = steady(account)
    assert used >= 0.85
    assert refused <= 0.02
    shares = [sum(1 for _, worker in account.ok if worker == w) for w in (0, 1)]
    assert min(shares) == max(shares)  # both finished all their calls


def test_a_worker_that_joins_a_quota_another_fills_still_gets_its_share(virtual: Any) -> None:
    """The second worker starts 2 s late, into a bucket the first keeps empty.

    Its slow start meets a 429 within a fraction of a second, so it measures
    what it was delivered over that fraction, and growth in proportion to the
    rate makes both settle alike: equal work ends at about the same time.
    """
    account = Account(20)
    admissions = [ProviderAdmission(), ProviderAdmission()]

    async def worker(index: int) -> None:
        await asyncio.sleep(2.0 * index)
        await asyncio.gather(*(calls(admissions[index], account, 16, worker=index)
                               for _ in range(64)))

    async def both() -> None:
        await asyncio.gather(worker(0), worker(1))

    virtual(both())
    ends = [max(t for t, w in account.ok if w == index) for index in (0, 1)]
    assert min(ends) / max(ends) >= 0.8, ends
    used, _ = steady(account)
    assert used >= 0.9


def test_a_worker_that_has_capacity_left_over_does_not_grow_its_rate(virtual: Any) -> None:
    """Growth only while the pacer binds: idle capacity says nothing about the quota."""
    admission = ProviderAdmission(max_rps=100)

    async def scenario() -> float:
        admission.rate_limited(await admission.admit(10), 1.0,
                               now=asyncio.get_running_loop().time())
        await admission.admit(10)  # the pause ends; the cut to 90 is made
        cut = admission.rate
        for _ in range(200):
            await asyncio.sleep(0.5)  # 2 calls a second, far under the rate
            admission.succeeded(await admission.admit(10), ANSWER,
                                now=asyncio.get_running_loop().time())
        return admission.rate - cut

    assert virtual(scenario()) == 0


def test_the_wait_ledger_counts_overlapping_waits_once() -> None:
    ledger = WaitLedger()
    ledger.begin(1.0)
    ledger.begin(2.0)
    ledger.end(3.0, waited=True)
    assert ledger.waited_until(3.5) == pytest.approx(2.5)
    ledger.end(4.0, waited=True)
    ledger.begin(10.0)
    ledger.end(10.0, waited=False)
    assert (ledger.waited_s, ledger.waits) == (3.0, 2)


def test_the_token_estimate_counts_the_prompt_and_the_answer_it_may_take() -> None:
    request = ModelRequest(model_id="m", messages=[
        {"role": "system", "content": "x" * 40}, {"role": "user", "content": "y" * 40}],
        sampling={"max_tokens": 100})
    assert estimate_tokens(request) == math.ceil(80 / 4) + 2 * 4 + 100
    bare = ModelRequest(model_id="m", messages=[{"role": "user", "content": "hi"}])
    assert estimate_tokens(bare, output_tokens=7) == 1 + 4 + 7
