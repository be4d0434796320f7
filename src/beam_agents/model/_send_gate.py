"""The last look before a request leaves: nothing is sent after a 429 was read (invariant 11).

Admission decides when a call may leave, but between that decision and the
moment its first byte reaches the socket the call still waits: for a pooled
connection, a TLS handshake, the event loop's other tasks. If the answer to
another call, a 429, is read meanwhile, the call must not go: the provider
asked the whole account to wait, and this request would arrive inside the
window it asked for.

So the model facade arms a gate for each provider attempt (`armed`), and a
provider calls `check_before_send` at the last point it controls before the
request is written: the HTTP providers do it in their connection's first
write of the request, with no await between the check and the bytes. A gate
that finds a pause in force raises `RequestHeldBack`; the facade then returns
the call to admission, which holds it until the pause has passed, as it holds
any other. A provider that never calls it is still checked by the facade
itself just before the call, which is all a provider that does not say when
it writes allows.

The gate is one-shot: the first check of an attempt decides; the writes that
follow (the rest of the body) pass.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

__all__ = ["RequestHeldBack", "armed", "check_before_send"]


class RequestHeldBack(Exception):
    """A request was stopped before any byte of it left: a pause began after its admission.

    Raised by `check_before_send` inside a provider and caught by the model
    facade, which returns the call to admission; it never reaches an agent.
    """


#: The check of the attempt running in this task; None once it has passed.
_GATE: ContextVar[Callable[[], None] | None] = ContextVar("beam_agents_send_gate", default=None)


class armed:  # lower case: it reads as the function it replaced, ``with armed(check):``
    """Arm `check` for the provider attempt run inside the block (in this task).

    A class rather than a generator context manager: it runs once per model
    call, and a generator's setup costs several times the two ContextVar calls.
    """

    __slots__ = ("_check", "_token")

    def __init__(self, check: Callable[[], None]) -> None:
        self._check = check

    def __enter__(self) -> None:
        self._token = _GATE.set(self._check)

    def __exit__(self, *exc_info: object) -> None:
        _GATE.reset(self._token)


def check_before_send() -> None:
    """Providers: call right before writing a request's first byte; no await in between.

    Raises:
        RequestHeldBack: A 429 was read after the call was admitted and its
            wait is still in force; send nothing, and let the error propagate.
    """
    check = _GATE.get()
    if check is not None:
        _GATE.set(None)
        check()
