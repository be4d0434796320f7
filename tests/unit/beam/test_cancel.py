"""How a run on a Kafka topic stops: Ctrl-C cancels the job through its runner, and waits.

The run itself, cancelled through the job service, is
tests/portable/test_beam_kafka.py; these drive the two helpers with a fake
result, as a runner's would answer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from apache_beam.runners.runner import PipelineState

from beam_agents.beam._pipeline import _cancel, _cancelled


class FakeResult:
    """A job that reports `states` in turn once asked to cancel (the last one from then on)."""

    def __init__(self, *states: str) -> None:
        self._states: Iterator[str] = iter(states)
        self._last = PipelineState.RUNNING
        self.cancels = 0

    def cancel(self) -> None:
        self.cancels += 1

    @property
    def state(self) -> str:
        if self.cancels:
            self._last = next(self._states, self._last)
        return self._last


def test_ctrl_c_cancels_the_job_once_and_waits_until_it_has_ended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("beam_agents.beam._pipeline.time.sleep", lambda _s: None)
    result = FakeResult(PipelineState.CANCELLING, PipelineState.CANCELLING,
                        PipelineState.CANCELLED)
    _cancel(result)
    assert result.cancels == 1 and result.state == PipelineState.CANCELLED


def test_a_job_that_does_not_end_after_the_cancel_fails_naming_its_state(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 30))
    monkeypatch.setattr("beam_agents.beam._pipeline.time.monotonic", lambda: next(clock))
    monkeypatch.setattr("beam_agents.beam._pipeline.time.sleep", lambda _s: None)
    with pytest.raises(RuntimeError, match="CANCELLING"):
        _cancel(FakeResult(PipelineState.CANCELLING), timeout_s=60)


def test_only_a_cancelled_job_counts_as_cancelled() -> None:
    class Answers:
        def __init__(self, state: str | Exception) -> None:
            self._state = state

        @property
        def state(self) -> str:
            if isinstance(self._state, Exception):
                raise self._state
            return self._state

    assert _cancelled(Answers(PipelineState.CANCELLED))
    assert not _cancelled(Answers(PipelineState.FAILED))
    assert not _cancelled(Answers(ConnectionError("the job service is gone")))
