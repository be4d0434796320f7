"""C03 through container and number subclasses: they are checked exactly as their bases.

An ``OrderedDict``, a list or tuple subclass and a float subclass all encode
as their base JSON type, so they must be validated as strictly: a non-str
dict key, a NaN, or an unencodable member inside one is rejected loudly, the
same as inside a plain dict, list or float.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, NamedTuple

import pytest

from beam_agents.model import compute_cache_key


class Messages(list):  # type: ignore[type-arg]
    """A list subclass, as a client library's message list may be."""


class Pair(NamedTuple):
    role: Any
    content: Any


class Temperature(float):
    """A float subclass, as an enum-like sampling setting may be."""


def key_with(sampling_params: Any = None, messages: Any = None) -> str:
    return compute_cache_key("model", [] if messages is None else messages, None,
                             {} if sampling_params is None else sampling_params, b"entity", 1)


#: Two-member sequences of a subclassed type: a list subclass and a namedtuple.
SEQUENCES = {
    "list-subclass": lambda first, second: Messages([first, second]),
    "namedtuple": Pair,
}


@pytest.mark.spec("C03")
def test_a_dict_subclass_with_a_non_str_key_is_rejected() -> None:
    """A non-str key would be coerced to a string and collide with its str form."""
    with pytest.raises(TypeError, match="key"):
        key_with(OrderedDict([(1, "x")]))


@pytest.mark.spec("C03")
@pytest.mark.parametrize("container", SEQUENCES.values(), ids=SEQUENCES.keys())
def test_a_nan_inside_a_sequence_subclass_is_rejected(container: Any) -> None:
    """THEN the call raises ValueError for NaN, wherever it sits."""
    with pytest.raises(ValueError, match="NaN"):
        key_with(messages=container("user", math.nan))


@pytest.mark.spec("C03")
@pytest.mark.parametrize("container", SEQUENCES.values(), ids=SEQUENCES.keys())
def test_an_unencodable_member_of_a_sequence_subclass_is_rejected(container: Any) -> None:
    """THEN the call raises TypeError for a non-JSON-serializable object."""
    with pytest.raises(TypeError, match="set"):
        key_with(messages=container("user", {"a"}))


@pytest.mark.spec("C03")
def test_a_nan_float_subclass_is_rejected() -> None:
    with pytest.raises(ValueError, match="NaN"):
        key_with({"temperature": Temperature("nan")})


@pytest.mark.spec("C01")
def test_subclasses_hash_as_their_base_types() -> None:
    """Logically equal inputs give the same key whatever container type holds them."""
    plain = key_with({"temperature": 0.5}, [{"role": "user", "content": "hi"}])
    subclassed = key_with(OrderedDict(temperature=Temperature(0.5)),
                          Messages([OrderedDict(role="user", content="hi")]))

    assert subclassed == plain
