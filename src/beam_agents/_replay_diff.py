"""What `beam-agents replay` tells a person: where intents differ, which setting missed.

Two questions come first when a replay fails. *Which part of the intent
changed?* `intent_difference` pairs recorded and new intents by their index
and walks both down to the first field that differs, a JSON payload
included, and shows it whole. *Why did an unchanged agent miss the
journal?* `setting_mismatches` compares a missed request with what the
journal recorded for the same activation (the summary each entry keeps:
model id, sampling, tools) and names the flag to set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from beam_agents.backend import JournalEntry
from beam_agents.model import ModelRequest, ModelResponse, request_summary

__all__ = ["Difference", "intent_difference", "setting_mismatches"]

_ABSENT = object()


class Difference:
    """Where two intent lists first differ: the path, and the two values there, whole."""

    __slots__ = ("expected", "got", "path")

    def __init__(self, path: str, expected: Any, got: Any) -> None:
        self.path = path
        self.expected = expected
        self.got = got

    @staticmethod
    def show(value: Any) -> str:
        """A value as a person reads it: JSON, or ``(absent)``."""
        if value is _ABSENT:
            return "(absent)"
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    def __str__(self) -> str:
        return f"{self.path}: expected {self.show(self.expected)}, got {self.show(self.got)}"


def _payload(doc: Mapping[str, Any]) -> Any:
    """An intent's payload, read as the JSON it holds when it holds JSON."""
    value = doc.get("payload", doc.get("payload_b64", _ABSENT))
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _first(path: str, expected: Any, got: Any) -> Difference | None:
    if isinstance(expected, dict) and isinstance(got, dict):
        for name in sorted(set(expected) | set(got)):
            found = _first(f"{path}.{name}" if path else name, expected.get(name, _ABSENT),
                           got.get(name, _ABSENT))
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        for index, (left, right) in enumerate(zip(expected, got, strict=True)):
            found = _first(f"{path}[{index}]", left, right)
            if found is not None:
                return found
        return None
    if expected == got and type(expected) is type(got):
        return None
    return Difference(path or "(the line)", expected, got)


def intent_difference(want: Sequence[str], got: Sequence[str]) -> Difference | None:
    """The first field where the recorded intents (`want`) and the new ones differ.

    Intents are paired by their ``index`` (their order in the activation); a
    payload holding JSON is compared as JSON, so the path reaches into it
    (``payload.reply.text``). An intent only one side has is the difference.
    """
    def by_index(lines: Iterable[str]) -> dict[int, dict[str, Any]]:
        docs: dict[int, dict[str, Any]] = {}
        for line in lines:
            doc = json.loads(line)
            doc["payload"] = _payload(doc)
            doc.pop("payload_b64", None)
            docs[int(doc.get("index", len(docs)))] = doc
        return docs

    left, right = by_index(want), by_index(got)
    for index in sorted(set(left) | set(right)):
        found = _first(f"intent[{index}]", left.get(index, _ABSENT), right.get(index, _ABSENT))
        if found is not None:
            return found
    return None


def _recorded(entry: JournalEntry) -> dict[str, Any] | None:
    """What an entry's request was, from its summary, or its response's model for older ones."""
    if entry.request:
        try:
            value = json.loads(entry.request)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    if entry.digest_only:
        return None
    try:
        return {"model_id": ModelResponse.from_bytes(entry.response).model_id}
    except Exception:  # a tool call's record, not a model response
        return None


def setting_mismatches(request: ModelRequest, provider: str,
                       journaled: Iterable[JournalEntry]) -> list[str]:
    """Why `request` missed entries the journal holds for its activation, with the flag to set.

    Empty when nothing but the conversation differs (a changed prompt, which
    is what replay is for) or when the journal holds nothing to compare with.
    """
    asked = json.loads(request_summary(request))
    found: list[str] = []
    recorded = [doc for doc in map(_recorded, journaled) if doc is not None]
    models = sorted({str(doc["model_id"]) for doc in recorded if "model_id" in doc})
    if models and asked["model_id"] not in models:
        model = models[0]
        provider_flag = ("--model_provider local" if model == "local" else
                         f"--model_provider {provider if provider != 'local' else 'openai|gemini'}")
        found.append(f"model: the journal's calls were made with model {model!r}; this replay "
                     f"asks {asked['model_id']!r} (--model_provider {provider}). Replay with "
                     f"{provider_flag} --model_id {model}, the flags of the recorded run")
        return found  # every other setting is moot until the model matches
    same_model = [doc for doc in recorded if doc.get("model_id") == asked["model_id"]]
    samplings = [doc["sampling"] for doc in same_model if isinstance(doc.get("sampling"), dict)]
    if samplings and asked["sampling"] not in samplings:
        was = samplings[0]
        names = sorted(name for name in set(was) | set(asked["sampling"])
                       if was.get(name) != asked["sampling"].get(name))
        found.append(f"sampling: the journal's calls were made with {json.dumps(was)}; this "
                     f"replay's agent asks {json.dumps(asked['sampling'])} ({', '.join(names)} "
                     "differ). The agent sets them in ctx.model.complete(..., "
                     f"{names[0]}=...): set them as the recorded run did")
    tools = [doc["tools"] for doc in same_model if isinstance(doc.get("tools"), list)]
    if tools and asked["tools"] not in tools:
        found.append(f"tools: the journal's calls offered {tools[0]}; this replay's agent "
                     f"offers {asked['tools']}")
    return found
