"""The replay-cache key: a content hash over everything that shapes one model call.

`compute_cache_key` hashes a canonical JSON document holding the six request
components (C01-C03), encoded by `beam_agents._canonical.canonical_json`:
byte for byte what ``json.dumps(doc, sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`` prints for it, so the canonical form has
a plain, reproducible definition. The stdlib encoder alone is too lenient,
though, so one walk validates the input first:

* a non-``str`` dict key would be coerced to a string by ``json`` (``{1: x}``
  and ``{"1": x}`` would collide); here it raises `TypeError`;
* an unencodable value (a set, ``bytes`` inside a message, an arbitrary object)
  raises `TypeError` naming where it sits, e.g. ``messages[2].content``;
* NaN and the infinities raise `ValueError` at any depth, also with the path.

The walk only checks types; the stdlib's C encoder then does the escaping and
sorting. Measured on a typical request, that pair is faster than one
pure-Python pass that validates and builds the text together.

Numbers keep the form ``json`` gives them: an ``int`` prints as its digits and a
``float`` as its shortest round-trip ``repr``, the same wherever it appears. So
``1`` and ``1.0`` (and ``0.0`` and ``-0.0``) give *different* keys. That is
deliberate: the provider receives those different bytes, and providers with
typed request schemas treat them differently (``max_tokens: 100.0`` can be
rejected where ``100`` succeeds), so serving one from the other's cache entry
would replay a request that was never made (invariant 3). ``bool`` is never an
``int`` (``true`` is not ``1``). Tuples encode as lists, as in ``json``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from beam_agents._canonical import canonical_json

__all__ = ["JsonValue", "compute_cache_key"]

#: What the structured components may hold. At run time only ``dict`` (with
#: ``str`` keys), ``list`` and ``tuple`` containers and their subclasses pass.
JsonValue: TypeAlias = (
    str | int | float | bool | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
)

_isfinite = math.isfinite


class _Rejected(Exception):
    """Carries a validation failure up the walk while collecting its path."""

    def __init__(self, error: type[TypeError | ValueError], reason: str) -> None:
        super().__init__(reason)
        self.error = error
        self.reason = reason
        self.segments: list[str] = []  # innermost first


def compute_cache_key(  # noqa: PLR0917 - seed 002 fixes this positional signature
    model_id: str,
    messages: JsonValue,
    tools_schema: JsonValue,
    sampling_params: JsonValue,
    entity_key: bytes | bytearray | memoryview,
    seq: int,
) -> str:
    """Return the lowercase-hex sha256 identifying one model call of one activation.

    Equal inputs give the same key whatever order their dicts were filled in
    (C01), and changing any one component changes it (C02). The key covers
    `entity_key` and `seq`, so an entry serves only a replay of the activation
    that stored it (invariant 3), never another entity or activation.

    Args:
        model_id: The provider's model name.
        messages: The conversation, typically a list of message dicts.
        tools_schema: The tool declarations offered to the model, or None.
        sampling_params: Temperature, max tokens and the like.
        entity_key: The keyed-state key of the entity; hex-encoded in the document.
        seq: The activation number (an ``int``, not a ``bool``).

    Returns:
        64 lowercase hex characters.

    Raises:
        TypeError: A component has the wrong type, or a value cannot be encoded
            as JSON; the message names its path (C03).
        ValueError: A float is NaN or infinite (the message names its path), the
            input nests too deeply or refers to itself, or a string holds an
            unpaired surrogate and so has no UTF-8 form (C03).
    """
    if not isinstance(model_id, str):
        raise TypeError(f"model_id must be str, got {type(model_id).__name__}")
    if not isinstance(entity_key, bytes | bytearray | memoryview):
        raise TypeError(f"entity_key must be bytes, got {type(entity_key).__name__}")
    if isinstance(seq, bool) or not isinstance(seq, int):
        raise TypeError(f"seq must be int, got {type(seq).__name__}")

    component = "messages"
    try:
        _check(messages)
        component = "sampling_params"
        _check(sampling_params)
        component = "tools_schema"
        _check(tools_schema)
    except _Rejected as rejected:
        path = component + "".join(reversed(rejected.segments))
        raise rejected.error(f"{path}: {rejected.reason}") from None
    except RecursionError:
        raise ValueError(
            f"{component} nests too deeply or contains a reference cycle, "
            "so it has no JSON encoding"
        ) from None

    document = {
        "entity_key": bytes(entity_key).hex(),
        "messages": messages,
        "model_id": model_id,
        "sampling_params": sampling_params,
        "seq": seq,
        "tools_schema": tools_schema,
    }
    try:
        # No cycle check: the validating walk has already turned a cycle into
        # a RecursionError, before the encoder ever sees the value.
        payload = canonical_json(document, check_circular=False)
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"a string in the request holds the unpaired surrogate "
            f"{exc.object[exc.start : exc.start + 1]!r}, which has no UTF-8 encoding"
        ) from None
    return hashlib.sha256(payload).hexdigest()


def _check(value: object) -> None:
    """Raise `_Rejected` unless `value` is JSON the canonical encoding accepts.

    Exact-type tests come first and strings and ints are skipped inline in the
    container loops: they are most of a real request, and a call per leaf
    would dominate the walk.
    """
    kind = type(value)
    if kind is dict:
        _check_members(value.items(), True)  # type: ignore[attr-defined]
    elif kind is list or kind is tuple:
        _check_members(enumerate(value), False)  # type: ignore[arg-type]
    elif kind is str or kind is int or kind is bool or value is None:
        return
    elif kind is float:
        if not _isfinite(value):  # type: ignore[arg-type]
            raise _Rejected(ValueError, f"{value!r} is not allowed; JSON has no NaN or Infinity")
    # Subclasses (StrEnum, IntEnum, OrderedDict, ...) encode as their base type,
    # exactly as json does.
    elif isinstance(value, dict):
        _check_members(value.items(), True)
    elif isinstance(value, list | tuple):
        _check_members(enumerate(value), False)
    elif isinstance(value, float):
        _check(float(value))
    elif not isinstance(value, str | int):
        raise _Rejected(TypeError, f"{kind.__name__} is not JSON serializable")


def _check_members(members: Iterable[tuple[Any, object]], keyed: bool) -> None:
    """Check the ``(key, item)`` pairs of a dict (`keyed`) or the ``(index, item)`` of a list.

    A dict and a list are walked by this one loop; `keyed` only decides
    whether the first of each pair must be a ``str`` and how it reads in a path.
    """
    for where, item in members:
        if keyed and type(where) is not str and not isinstance(where, str):
            raise _Rejected(
                TypeError,
                f"has the {type(where).__name__} key {where!r}; JSON object keys must be str",
            )
        kind = type(item)
        if kind is str or kind is int:
            continue
        try:
            _check(item)
        except _Rejected as rejected:
            rejected.segments.append(_key_segment(where) if keyed else f"[{where}]")
            raise


def _key_segment(key: str) -> str:
    """Render a dict key as a path step: ``.content``, or ``["odd key"]``."""
    return f".{key}" if key.isidentifier() else f"[{json.dumps(key, ensure_ascii=False)}]"
