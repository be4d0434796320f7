"""Canonical JSON: the one byte encoding of JSON data that the library hashes, stores and emits.

Canonical means sorted keys, compact separators (``,`` and ``:``), non-ASCII
text kept as UTF-8 rather than escaped, and NaN and the infinities refused.
Equal values then give equal bytes however their dicts were filled in, which
is what replay determinism (invariant 3) compares: cache keys (C01), cached
responses, intent payloads and the JSON lines of events and error records.

The bytes are exactly what ``json.dumps(value, sort_keys=True,
separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")``
gives, so the form has a plain, reproducible definition outside this library.
"""

from __future__ import annotations

import json

__all__ = ["canonical_json"]

# Built once: ``json.dumps`` with non-default options builds a new encoder on
# every call. An encoder holds only its options, so one instance serves every
# thread.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_ENCODER_NO_CYCLE_CHECK = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
    check_circular=False,
)


def canonical_json(value: object, *, check_circular: bool = True) -> bytes:
    """Encode `value` as canonical UTF-8 JSON: sorted keys, compact, no NaN/Infinity.

    Args:
        value: JSON data: dicts with ``str`` keys, lists, tuples, strings,
            numbers, booleans and None.
        check_circular: Pass False only when the caller has already ruled out
            reference cycles; the output is the same, the encoder just skips
            its bookkeeping (and a cycle would then raise RecursionError).

    Raises:
        TypeError: `value` holds something JSON cannot encode.
        ValueError: it holds NaN or an infinity, or refers to itself; or a
            string holds an unpaired surrogate (`UnicodeEncodeError`), which
            has no UTF-8 form.
    """
    encoder = _ENCODER if check_circular else _ENCODER_NO_CYCLE_CHECK
    return encoder.encode(value).encode("utf-8")
