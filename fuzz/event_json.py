"""Fuzz `decode_input` with input_format=json, as every host calls it: through `InputDecoder`.

Every host decodes its input this way first (``runtime/_errors.py``,
``runtime/_codec.py``, ``runtime/_keyed.py``). It must never raise: an
undecodable element is a DECODE `ErrorRecord` carrying the element (invariant
8), and an exception would take the worker down instead. See
`fuzz._events.check_decode` for the round-trips checked on what decodes.
"""

from __future__ import annotations

import atheris  # type: ignore[import-untyped]

from fuzz._harness import fuzz

with atheris.instrument_imports(include=["beam_agents"]):
    from fuzz._events import check_decode


def test_one_input(data: bytes) -> None:
    """Decode `data` as a json input element; see `check_decode`."""
    check_decode(data, "json")


if __name__ == "__main__":
    fuzz(test_one_input)
