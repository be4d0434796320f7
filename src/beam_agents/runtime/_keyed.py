"""What every host shares around the core, written once: its state cells and its input decoder.

A host (the Beam DoFns, the Flink function) binds an entity's four keyed-state
cells (`CELLS`) as `StateCells`, decodes its input with `InputDecoder`, and
hands both to the `KeyedEngine`, which applies each outcome and routes the
lines to a `Channel`. Only the binding is engine-specific, so the engines
cannot drift apart in what they commit (invariants 1 and 8) or count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from beam_agents._proto.error_record_pb2 import ErrorRecord
from beam_agents._proto.event_pb2 import AgentEvent
from beam_agents.metrics import MetricsSink
from beam_agents.runtime._activation import NAMESPACE, KeyedState
from beam_agents.runtime._codec import with_traceparent
from beam_agents.runtime._errors import decode_input
from beam_agents.runtime._lines import Oversize

__all__ = ["CELLS", "BagCell", "Channel", "InputDecoder", "QueueCell", "ReadOnceCell", "StateCell",
           "StateCells", "ValueCell"]

#: The keyed-state cells of an entity, by name: MemoryBlob bytes, LlmCacheBlob
#: bytes, the last committed seq (DESIGN's activation protocol), and
#: TokenBudgetBlob bytes, written only under ``--max_tokens_per_entity``, and
#: PendingWaitsBlob bytes, written only when the agent waits for an answer.
CELLS = ("memory", "llm_cache", "seq", "budget", "waits")

#: Where a line goes: the intents output or the errors (dead-letter) output.
Channel = Literal["intents", "errors"]


class StateCell(Protocol):
    """One keyed-state value as a host exposes it; reads None when unset."""

    def read(self) -> Any:
        """Return the stored value, or None."""
        ...

    def write(self, value: Any) -> None:
        """Replace the stored value."""
        ...


class QueueCell(Protocol):
    """A bag of values in keyed state (Beam ``BagState``, Flink ``ListState``)."""

    def read(self) -> Iterable[Any]:
        """The values, in any order."""
        ...

    def add(self, value: bytes) -> None:
        """Add one value."""
        ...

    def clear(self) -> None:
        """Remove every value."""
        ...


class ValueCell:
    """An in-process `StateCell`: the batch path's keyed state, and the tests'."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def read(self) -> Any:
        """Return the value, or None."""
        return self.value

    def write(self, value: Any) -> None:
        """Replace the value."""
        self.value = value


_UNREAD = object()


class ReadOnceCell:
    """A runner's keyed-state value as a `StateCell` that asks the runner at most once.

    Each engine callback asks the same small cells several times (a key's
    queue fingerprint alone, once per question about its queue), and on a
    runner each ask may cross a process boundary: a Flink ``ValueState``
    read goes to the JVM, and a Beam state read is a Fn API request when the
    runner hands out no cache tokens (Prism). Within one callback nobody else
    touches the key's state, so the first read holds until the callback
    writes; a host that keeps the cell across callbacks calls `forget` when
    the next one starts, as the key in scope may change.

    `_load`, `_store` and `_erase` reach the runner's state; these read a
    cell with the `StateCell` methods (Beam's), a subclass maps another API.
    """

    __slots__ = ("_cell", "_value")

    def __init__(self, cell: Any) -> None:
        self._cell = cell
        self._value: Any = _UNREAD

    def forget(self) -> None:
        """Drop what was read: the next callback may be for another key."""
        self._value = _UNREAD

    def read(self) -> Any:
        """The value, read from the runner on the first ask only."""
        if self._value is _UNREAD:
            self._value = self._load()
        return self._value

    def write(self, value: Any) -> None:
        """Write through, and hold the value for the next read."""
        self._store(value)
        self._value = value

    def clear(self) -> None:
        """Clear through; the next read is None without asking."""
        self._erase()
        self._value = None

    def _load(self) -> Any:
        return self._cell.read()

    def _store(self, value: Any) -> None:
        self._cell.write(value)

    def _erase(self) -> None:
        self._cell.clear()


class BagCell:
    """An in-process `QueueCell`: the batch path's queue, and the tests'."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def read(self) -> Iterable[bytes]:
        """The values, in insertion order."""
        return tuple(self.values)

    def add(self, value: bytes) -> None:
        """Add one value."""
        self.values.append(value)

    def clear(self) -> None:
        """Remove every value."""
        self.values.clear()


@dataclass(frozen=True, slots=True)
class StateCells:
    """An entity's five cells, bound by the host for the key in scope."""

    memory: StateCell
    llm_cache: StateCell
    seq: StateCell
    budget: StateCell
    waits: StateCell

    def read(self) -> KeyedState:
        """The entity's state as the core takes it."""
        return KeyedState(memory=_as_bytes(self.memory.read()),
                          llm_cache=_as_bytes(self.llm_cache.read()),
                          seq=self.seq.read() or 0, budget=_as_bytes(self.budget.read()),
                          waits=_as_bytes(self.waits.read()))


class InputDecoder:
    """The first step of every host: an input element -> an event, or a DECODE dead letter.

    Counts ``beam_agents.runtime:events`` per element and ``errors_decode`` per
    undecodable one, so every engine reports the same counters. An element
    that a source handed over as text is turned back into the bytes it was
    decoded from with `charset` (``"latin-1"`` for a source that read bytes
    one char each, lossless); text that charset cannot hold (a lone surrogate)
    becomes invalid UTF-8, so it too ends as a DECODE record, never a crash.
    """

    def __init__(self, input_format: str, metrics: MetricsSink, *,
                 max_event_bytes: int | None = None, charset: str = "utf-8") -> None:
        self._format = input_format
        self._metrics = metrics
        self._max_event_bytes = max_event_bytes
        self._charset = charset

    def __call__(self, data: bytes | str | Oversize, *,
                 traceparent: str | bytes | None = None) -> AgentEvent | ErrorRecord:
        """Decode one element (see `decode_input`); also counts ``oversize_events``.

        `traceparent` is the trace context the transport carried beside the
        element (a Pub/Sub attribute, a Kafka header); see `with_traceparent`.
        """
        self._metrics.inc(NAMESPACE, "events")
        if isinstance(data, str):
            data = self._encode(data)
        elif not isinstance(data, Oversize):
            data = bytes(data)  # a bytearray or memoryview from a source
        decoded = decode_input(data, self._format, max_event_bytes=self._max_event_bytes)
        if isinstance(decoded, ErrorRecord):
            self._metrics.inc(NAMESPACE, "errors_decode")
            if decoded.event_bytes:
                self._metrics.inc(NAMESPACE, "oversize_events")
        elif traceparent:
            with_traceparent(decoded, traceparent)
        return decoded

    def _encode(self, text: str) -> bytes:
        try:
            return text.encode(self._charset)
        except UnicodeEncodeError:
            return text.encode("utf-8", errors="surrogatepass")


def _as_bytes(value: Any) -> bytes | None:
    # Flink hands byte-array state back as a bytearray.
    return None if value is None else bytes(value)
