"""compute_cache_key: canonical, order-independent, loud on bad input (seed 002, C01-C03)."""

from __future__ import annotations

import enum
import hashlib
import json
import math
import random
import re
from collections import OrderedDict

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from beam_agents.model._cache_key import compute_cache_key

HEX64 = re.compile(r"[0-9a-f]{64}")

BASE = {
    "model_id": "gemini-2.0-flash",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Summarise order 42.", "name": "ops"},
    ],
    "tools_schema": [
        {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
        }
    ],
    "sampling_params": {"temperature": 0.2, "max_tokens": 256, "stop": ["\n\n"]},
    "entity_key": b"customer-7",
    "seq": 3,
}


def key_of(parts: dict[str, object]) -> str:
    return compute_cache_key(
        parts["model_id"],  # type: ignore[arg-type]
        parts["messages"],  # type: ignore[arg-type]
        parts["tools_schema"],  # type: ignore[arg-type]
        parts["sampling_params"],  # type: ignore[arg-type]
        parts["entity_key"],  # type: ignore[arg-type]
        parts["seq"],  # type: ignore[arg-type]
    )


def reference_key(parts: dict[str, object]) -> str:
    """The canonical form as the stdlib prints it (for inputs both accept)."""
    document = dict(parts, entity_key=bytes(parts["entity_key"]).hex())  # type: ignore[call-overload]
    text = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reordered(value: object, rnd: random.Random) -> object:
    """An equal value whose dicts were filled in a shuffled order, at every depth."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: reordered(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [reordered(v, rnd) for v in value]
    return value


# -- scenarios ---------------------------------------------------------------------------


@pytest.mark.spec("C01")
def test_logically_equal_requests_hash_identically() -> None:
    """THEN both calls return the identical 64-character lowercase hex key."""
    shuffled = {
        "model_id": BASE["model_id"],
        "messages": [
            {"content": "You are terse.", "role": "system"},
            {"name": "ops", "content": "Summarise order 42.", "role": "user"},
        ],
        "tools_schema": [
            {
                "parameters": {"properties": {"id": {"type": "integer"}}, "type": "object"},
                "name": "lookup_order",
            }
        ],
        "sampling_params": {"stop": ["\n\n"], "max_tokens": 256, "temperature": 0.2},
        "entity_key": BASE["entity_key"],
        "seq": BASE["seq"],
    }
    first, second = key_of(BASE), key_of(shuffled)
    assert first == second
    assert HEX64.fullmatch(first)


@pytest.mark.spec("C02")
def test_every_component_perturbs_the_key() -> None:
    """THEN each of the six recomputed keys differs from the baseline key."""
    baseline = key_of(BASE)
    changes = {
        "model_id": "gemini-2.0-pro",
        "messages": [*BASE["messages"], {"role": "user", "content": "and 43"}],  # type: ignore[misc]
        "tools_schema": [],
        "sampling_params": {"temperature": 0.3, "max_tokens": 256, "stop": ["\n\n"]},
        "entity_key": b"customer-8",
        "seq": 4,
    }
    keys = {name: key_of(dict(BASE, **{name: value})) for name, value in changes.items()}
    assert all(key != baseline for key in keys.values()), keys
    assert len(set(keys.values())) == 6


@pytest.mark.spec("C03")
def test_non_canonical_input_is_rejected_loudly() -> None:
    """THEN the call raises TypeError (or ValueError for NaN) and no key is produced."""
    with pytest.raises(TypeError):
        key_of(dict(BASE, sampling_params={"temperature": object()}))
    with pytest.raises(ValueError, match="no NaN"):
        key_of(dict(BASE, sampling_params={"temperature": math.nan}))


# -- the canonical form, pinned ----------------------------------------------------------


def test_key_is_sha256_of_the_stdlib_canonical_document() -> None:
    assert key_of(BASE) == reference_key(BASE)


def test_the_canonical_document_is_pinned() -> None:
    # A change here silently invalidates every stored cache entry: bump deliberately.
    parts = dict(BASE, messages=[{"b": "é\n", "a": 1.5}], tools_schema=None, sampling_params={})
    document = (
        '{"entity_key":"637573746f6d65722d37","messages":[{"a":1.5,"b":"é\\n"}],'
        '"model_id":"gemini-2.0-flash","sampling_params":{},"seq":3,"tools_schema":null}'
    )
    assert key_of(parts) == hashlib.sha256(document.encode("utf-8")).hexdigest()


def test_int_and_float_with_equal_value_are_different_keys() -> None:
    as_int = key_of(dict(BASE, sampling_params={"max_tokens": 100}))
    as_float = key_of(dict(BASE, sampling_params={"max_tokens": 100.0}))
    assert as_int != as_float


def test_signed_zeroes_are_different_keys() -> None:
    assert key_of(dict(BASE, sampling_params={"t": 0.0})) != key_of(
        dict(BASE, sampling_params={"t": -0.0})
    )


def test_bool_is_not_int() -> None:
    assert key_of(dict(BASE, sampling_params={"x": True})) != key_of(
        dict(BASE, sampling_params={"x": 1})
    )
    assert key_of(dict(BASE, seq=1)) != key_of(dict(BASE, sampling_params={"x": 1}))


def test_tuples_encode_as_lists() -> None:
    assert key_of(dict(BASE, messages=({"role": "user", "content": "hi"},))) == key_of(
        dict(BASE, messages=[{"role": "user", "content": "hi"}])
    )


def test_a_float_encodes_the_same_at_every_depth() -> None:
    parts = dict(BASE, messages=[[{"x": 1e-7}]], tools_schema=1e-7, sampling_params={"t": 1e-7})
    document = (
        '{"entity_key":"637573746f6d65722d37","messages":[[{"x":1e-07}]],'
        '"model_id":"gemini-2.0-flash","sampling_params":{"t":1e-07},"seq":3,'
        '"tools_schema":1e-07}'
    )
    assert key_of(parts) == hashlib.sha256(document.encode("utf-8")).hexdigest()


def test_subclasses_encode_as_their_base_type() -> None:
    class Role(enum.StrEnum):
        USER = "user"

    class Budget(enum.IntEnum):
        SMALL = 256

    plain = dict(BASE, messages=[{"role": "user"}], sampling_params={"max_tokens": 256})
    fancy = dict(
        BASE,
        messages=[OrderedDict(role=Role.USER)],
        sampling_params={"max_tokens": Budget.SMALL},
    )
    assert key_of(plain) == key_of(fancy)


def test_entity_key_bytes_like_values_agree() -> None:
    assert key_of(BASE) == key_of(dict(BASE, entity_key=bytearray(b"customer-7")))
    assert key_of(BASE) == key_of(dict(BASE, entity_key=memoryview(b"customer-7")))


# -- rejection, with the path ------------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "path"),
    [
        ({"messages": [{}, {}, {"role": "user", "content": b"raw"}]}, "messages[2].content"),
        ({"tools_schema": [{"enum": {1, 2}}]}, "tools_schema[0].enum"),
        ({"sampling_params": {"odd key": object()}}, 'sampling_params["odd key"]'),
        ({"messages": [{"meta": {3: "x"}}]}, "messages[0].meta"),
        ({"messages": [{"meta": {3: "x", "y": 1}}]}, "messages[0].meta"),
    ],
)
def test_unencodable_values_raise_type_error_naming_the_path(
    parts: dict[str, object], path: str
) -> None:
    with pytest.raises(TypeError) as info:
        key_of(dict(BASE, **parts))
    assert str(info.value).startswith(f"{path}: ")


def test_a_non_str_dict_key_is_rejected_not_coerced() -> None:
    with pytest.raises(TypeError, match="keys must be str"):
        key_of(dict(BASE, sampling_params={1: "a"}))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_raise_value_error_naming_the_path(bad: float) -> None:
    with pytest.raises(ValueError, match=re.escape("messages[1].scores[0]: ")):
        key_of(dict(BASE, messages=[{}, {"scores": [bad]}]))


@pytest.mark.parametrize(
    ("name", "value"),
    [("model_id", 7), ("entity_key", "customer-7"), ("seq", True), ("seq", 3.0)],
)
def test_mistyped_scalar_components_raise_type_error(name: str, value: object) -> None:
    with pytest.raises(TypeError, match=name):
        key_of(dict(BASE, **{name: value}))


def test_a_reference_cycle_raises_value_error() -> None:
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="cycle"):
        key_of(dict(BASE, messages=looped))


def test_an_unpaired_surrogate_raises_value_error() -> None:
    with pytest.raises(ValueError, match="surrogate"):
        key_of(dict(BASE, messages=[{"content": "\ud800"}]))


# -- properties ----------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
requests = st.fixed_dictionaries(
    {
        "model_id": st.text(max_size=10),
        "messages": json_values,
        "tools_schema": json_values,
        "sampling_params": json_values,
        "entity_key": st.binary(max_size=12),
        "seq": st.integers(min_value=-(2**63), max_value=2**63),
    }
)


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@given(parts=requests, rnd=st.randoms(use_true_random=False))
def test_dict_insertion_order_never_changes_the_key(
    parts: dict[str, object], rnd: random.Random
) -> None:
    shuffled = {name: reordered(value, rnd) for name, value in parts.items()}
    assert key_of(shuffled) == key_of(parts) == reference_key(parts)


@given(
    parts=requests,
    other=requests,
    name=st.sampled_from(
        ["model_id", "messages", "tools_schema", "sampling_params", "entity_key", "seq"]
    ),
)
def test_changing_any_one_component_changes_the_key(
    parts: dict[str, object], other: dict[str, object], name: str
) -> None:
    changed = dict(parts, **{name: other[name]})
    if name == "entity_key":
        assume(parts[name] != other[name])
    else:
        assume(canonical(parts[name]) != canonical(other[name]))
    assert key_of(changed) != key_of(parts)


@st.composite
def poisoned(draw: st.DrawFn) -> object:
    """A JSON-like value with one NaN or infinity hidden at a random depth."""
    value: object = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            siblings = draw(st.lists(json_values, max_size=3))
            siblings.insert(draw(st.integers(0, len(siblings))), value)
            value = siblings
        else:
            siblings = draw(st.dictionaries(st.text(max_size=4), json_values, max_size=3))
            siblings[draw(st.text(max_size=4))] = value  # may replace a sibling; fine
            value = siblings
    return value


@given(
    parts=requests,
    bad=poisoned(),
    name=st.sampled_from(["messages", "tools_schema", "sampling_params"]),
)
def test_nan_and_infinity_are_rejected_at_any_depth(
    parts: dict[str, object], bad: object, name: str
) -> None:
    with pytest.raises(ValueError, match=rf"^{name}"):
        key_of(dict(parts, **{name: bad}))
