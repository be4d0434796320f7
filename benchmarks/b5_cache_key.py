"""B5. Cache keys: `compute_cache_key` against a naive ``json.dumps(sort_keys=True)`` + sha256.

The request is a realistic chat call: a system prompt, eight turns of a few
hundred characters, three tools with JSON-schema parameters and the usual
sampling settings. Both functions hash the same six components; the naive
one with `json`'s defaults (``sort_keys=True`` and nothing else).

Speed is reported as keys per second and as the ratio of time per key. The
check is canonical stability: 50 copies of the request whose dicts were
filled in shuffled orders, at every depth, must give one key, and changing
any single component must change it. The naive hash is put through the same
check, and through two inputs where its output is not canonical: ``{1: x}``
and ``{"1": x}`` (json turns the int key into a string, so the two collide)
and a NaN (json prints ``NaN``, which is not JSON).
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from beam_agents.model import compute_cache_key
from benchmarks._harness import Profile, interleaved, ratios, stat

__all__ = ["naive_key", "run"]

_ENTITY = b"customer-7"


def _request() -> dict[str, Any]:
    rng = random.Random(5)
    words = ["order", "refund", "shipping", "invoice", "address", "delay", "parcel", "status"]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent. Be brief and exact. " * 4}]
    for turn in range(8):
        text = " ".join(rng.choice(words) for _ in range(45))
        messages.append({"role": "user" if turn % 2 == 0 else "assistant", "content": text})
    tools = [{"type": "function", "function": {
        "name": f"tool_{index}", "description": f"Look up the {word} of an order.",
        "parameters": {"type": "object", "required": ["order_id"], "properties": {
            "order_id": {"type": "string", "description": "The order number."},
            "verbose": {"type": "boolean"}, "limit": {"type": "integer", "minimum": 1}}}}}
        for index, word in enumerate(words[:3])]
    sampling = {"temperature": 0.2, "top_p": 0.95, "max_tokens": 512, "stop": ["\n\n"],
                "seed": 7}
    return {"model_id": "gemini-2.5-flash", "messages": messages, "tools_schema": tools,
            "sampling_params": sampling, "entity_key": _ENTITY, "seq": 42}


def ours(parts: dict[str, Any]) -> str:
    """The library's key."""
    return compute_cache_key(parts["model_id"], parts["messages"], parts["tools_schema"],
                             parts["sampling_params"], parts["entity_key"], parts["seq"])


def naive_key(parts: dict[str, Any]) -> str:
    """The baseline: json's defaults with sorted keys, hashed."""
    document = dict(parts, entity_key=parts["entity_key"].hex())
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _reordered(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: _reordered(item, rng) for key, item in items}
    if isinstance(value, list):
        return [_reordered(item, rng) for item in value]
    return value


def _changed(parts: dict[str, Any]) -> list[dict[str, Any]]:
    """One variant per component, each differing from `parts` in that component only."""
    messages = [dict(m) for m in parts["messages"]]
    messages[-1]["content"] += "!"
    return [dict(parts, model_id="gemini-2.5-pro"), dict(parts, messages=messages),
            dict(parts, tools_schema=parts["tools_schema"][:2]),
            dict(parts, sampling_params=dict(parts["sampling_params"], temperature=0.3)),
            dict(parts, entity_key=b"customer-8"), dict(parts, seq=43)]


def _check(key: Any, parts: dict[str, Any]) -> dict[str, bool]:
    rng = random.Random(11)
    stable = len({key(_reordered(parts, rng)) for _ in range(50)}) == 1
    base = key(parts)
    distinct = all(key(variant) != base for variant in _changed(parts))
    return {"stable_under_reordering": stable, "changes_with_every_component": distinct}


def _outcome(key: Any, parts: dict[str, Any]) -> str | None:
    try:
        return str(key(parts))
    except (TypeError, ValueError) as exc:
        return f"rejected ({type(exc).__name__})"


def run(profile: Profile) -> dict[str, Any]:
    """Measure B5; see the module docstring."""
    parts = _request()
    times = interleaved({"ours": lambda: ours(parts), "naive": lambda: naive_key(parts)},
                        reps=profile.reps, inner=profile.inner * 5)
    ratio = ratios(times["ours"], times["naive"])
    int_keys = dict(parts, sampling_params={1: "x"})
    str_keys = dict(parts, sampling_params={"1": "x"})
    nan = dict(parts, sampling_params={"temperature": float("nan")})
    naive_collides = _outcome(naive_key, int_keys) == _outcome(naive_key, str_keys)
    ours_check, naive_check = _check(ours, parts), _check(naive_key, parts)
    return {
        "name": "Cache keys",
        "workload": (f"one chat request ({len(json.dumps(parts, default=bytes.hex))} B of "
                     "JSON): 9 messages, 3 tools with schemas, 5 sampling settings"),
        "unit": "keys/s",
        "ours_keys_per_s": stat([1 / t for t in times["ours"]]).as_json(0),
        "naive_keys_per_s": stat([1 / t for t in times["naive"]]).as_json(0),
        "ratio": round(ratio.median, 2),
        "ratio_min": round(ratio.min, 2),
        "ratio_max": round(ratio.max, 2),
        "check": {
            "ours": ours_check,
            "naive": naive_check,
            "ours_int_vs_str_dict_keys": _outcome(ours, int_keys),
            "naive_int_and_str_dict_keys_collide": naive_collides,
            "ours_nan": _outcome(ours, nan),
            "naive_nan": "accepted, hashed with the non-JSON token NaN"
            if not str(_outcome(naive_key, nan)).startswith("rejected")
            else _outcome(naive_key, nan),
        },
        "check_passed": all(ours_check.values()),
        "note": (
            f"compute_cache_key takes {ratio.median:.2f}x the naive hash's time per key. "
            "Both are stable under dict reordering and change with every component; the "
            "extra time is the validating walk over the request (one isinstance test per "
            "value) that makes the key canonical where json is lenient: it rejects non-str "
            "dict keys, which json silently turns into strings so that {1: x} and {'1': x} "
            "collide, and NaN/Infinity, which json prints as non-JSON tokens. It also skips "
            "json's ASCII escaping, which keeps non-ASCII text short."
        ),
    }
