"""Structured output: an answer that must match a JSON schema, or a pydantic model.

``ctx.model.complete(messages, response_schema=Triage)`` asks the provider
for an answer in that shape, with its native structured output where it has
one (OpenAI's ``response_format``, Gemini's ``response_json_schema``; the
local model answers in the shape), then checks the answer with a kept
validator: pydantic for a model, ``jsonschema`` for a schema given whole. An
answer that fails the check is asked again, with the validation errors, up
to a bound; past it the activation is a `StructuredOutputError` dead letter.

The schema is part of the request, so it is part of the cache key: the same
conversation asked for another shape is another call, and a replay replays
the answers that were checked, in the same order (invariant 3).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

__all__ = ["ResponseShape", "shape_of"]


@dataclass(frozen=True, slots=True)
class ResponseShape:
    """A response schema as sent to the provider, and how an answer is checked against it."""

    schema: Mapping[str, Any]
    model: type[pydantic.BaseModel] | None = None

    def check(self, text: str) -> tuple[Any, str | None]:
        """Parse `text`; returns ``(value, None)``, or ``(None, what is wrong)``."""
        if self.model is not None:
            try:
                return self.model.model_validate_json(text), None
            except pydantic.ValidationError as exc:
                return None, "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or '(answer)'}: {e['msg']}"
                    for e in exc.errors())
        try:
            value = json.loads(text)
        except ValueError as exc:
            return None, f"the answer is not JSON: {exc}"
        import jsonschema  # noqa: PLC0415 - only a schema given whole needs it

        problems = sorted(jsonschema.Draft202012Validator(dict(self.schema)).iter_errors(value),
                          key=lambda e: list(e.path))
        if problems:
            return None, "; ".join(f"{'.'.join(str(p) for p in e.path) or '(answer)'}: "
                                   f"{e.message}" for e in problems)
        return value, None


def shape_of(response_schema: Any) -> ResponseShape:
    """A JSON schema (a mapping) or a pydantic model class, as a `ResponseShape`.

    Raises:
        TypeError: It is neither.
    """
    if isinstance(response_schema, type) and issubclass(response_schema, pydantic.BaseModel):
        return ResponseShape(response_schema.model_json_schema(), response_schema)
    if isinstance(response_schema, Mapping):
        return ResponseShape(dict(response_schema))
    raise TypeError("response_schema must be a JSON schema (a dict) or a pydantic model class, "
                    f"got {type(response_schema).__name__}")


def retry_message(errors: str) -> dict[str, str]:
    """What the model is told when its answer did not match the schema."""
    return {"role": "user", "content": f"Your answer did not match the required JSON schema: "
                                       f"{errors}. Answer again with JSON only, matching the "
                                       "schema."}
