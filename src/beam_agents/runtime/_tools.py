"""Tools an agent declares: plain functions, with a JSON schema the model can call them by.

A tool is a function, sync or async, whose parameters have type hints. Its
JSON schema comes from those hints and the ``Args:`` section of its
docstring (or is given whole), the way the model providers describe a
function, so one declaration serves both the agent's own calls
(``ctx.tools.call``) and the tool loop, where the model picks the calls.

Why a declaration rather than any callable: a tool's result is recorded and
never run again (invariant 13), so the library must know what a tool is, how
to check its arguments before running it, and how to hand it the idempotency
key that makes an external effect happen once. Every problem with a
declaration is a `ConfigError` naming the tool, raised when the worker loads
the agent, not in the middle of an activation.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pydantic

from beam_agents.errors import ConfigError

__all__ = ["IDEMPOTENCY_PARAMETER", "Tool", "ToolSource", "tool", "tool_specs"]

#: A tool with a parameter of this name is handed its call's idempotency key there.
IDEMPOTENCY_PARAMETER = "idempotency_key"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_ARGS_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(\([^)]*\))?:\s*(.*)$")


@dataclass(frozen=True, slots=True, eq=False)
class Tool:
    """A function an agent may call, with the schema its arguments must match.

    Attributes:
        name: How the agent and the model call it.
        description: What it does, for the model.
        parameters: The JSON schema of its arguments (an object schema).
        function: The function itself, sync or async.
        reconcile: ``reconcile(idempotency_key)``, sync or async, or None:
            asked first when a call was started and never recorded (cut off by
            a crash); it returns the call's result if the effect happened,
            else None and the call runs again with the same key.
        wants_key: Whether the function takes ``idempotency_key``.
        validator: Checks and converts arguments before a call; None when the
            schema was given whole (it is then checked as JSON Schema).
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., Any] = field(repr=False)
    reconcile: Callable[[str], Any] | None = field(default=None, repr=False)
    wants_key: bool = False
    validator: type[pydantic.BaseModel] | None = field(default=None, repr=False)

    @property
    def is_async(self) -> bool:
        """Whether calling the function returns an awaitable."""
        return inspect.iscoroutinefunction(self.function)

    def spec(self) -> dict[str, Any]:
        """The tool as a model sees it: ``{"type": "function", "function": {...}}``."""
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": dict(self.parameters)}}

    def arguments(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """`args` checked against the schema, converted to what the function takes.

        Raises:
            ValueError: The arguments do not match; the message says which and why.
        """
        if self.validator is None:
            _check_schema(self.name, self.parameters, args)
            return dict(args)
        try:
            model = self.validator.model_validate(dict(args))
        except pydantic.ValidationError as exc:
            raise ValueError(f"arguments of tool {self.name!r} do not match its schema: "
                             f"{_errors(exc)}") from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, unrecorded (in a unit test of the tool, say)."""
        return self.function(*args, **kwargs)


class ToolSource(Protocol):
    """Tools a worker lists once from somewhere else (an MCP server); the host builds it.

    `tools` connects and lists; it raises `ToolUnavailable` if it cannot, and
    is asked again by the next activation. The runtime closes it with `aclose`.
    """

    async def tools(self) -> Sequence[Tool]:
        """Connect and list the tools."""
        ...

    async def aclose(self) -> None:
        """Disconnect; safe to call twice."""
        ...


def tool(function: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None, parameters: Mapping[str, Any] | None = None,
         reconcile: Callable[[str], Any] | None = None) -> Any:
    """Declare a tool: ``@tool``, ``@tool(name=..., reconcile=...)`` or ``tool(fn)``.

    Args:
        function: The function, sync or async; its type hints and docstring
            describe it unless `parameters` does.
        name: Defaults to the function's name.
        description: Defaults to the docstring's first paragraph.
        parameters: A JSON schema of the arguments, instead of the hints.
        reconcile: What to ask before running again a call that was cut off
            between its start and its record (see `Tool.reconcile`).

    Raises:
        ConfigError: The declaration cannot describe the tool; names it.
    """
    def declare(fn: Callable[..., Any]) -> Tool:
        return _declare(fn, name=name, description=description, parameters=parameters,
                        reconcile=reconcile)

    return declare if function is None else declare(function)


def tool_specs(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The specs of `tools`, for ``ctx.model.complete(..., tools=...)``."""
    return [t.spec() for t in tools]


def _declare(fn: Callable[..., Any], *, name: str | None, description: str | None,
             parameters: Mapping[str, Any] | None,
             reconcile: Callable[[str], Any] | None) -> Tool:
    if isinstance(fn, Tool):
        return fn
    label = name or getattr(fn, "__name__", repr(fn))
    if not callable(fn):
        raise ConfigError(f"tool {label!r} is not callable", field=f"tools.{label}")
    if not isinstance(label, str) or not _NAME.match(label):
        raise ConfigError(f"tool name {label!r} must be 1-64 letters, digits, '_', '.' or '-', "
                          "starting with a letter or '_'", field=f"tools.{label}")
    if reconcile is not None and not callable(reconcile):
        raise ConfigError(f"tool {label!r}: reconcile must be callable as "
                          "reconcile(idempotency_key)", field=f"tools.{label}.reconcile")
    doc = inspect.getdoc(fn) or ""
    summary = description if description is not None else doc.split("\n\n")[0].strip()
    signature = inspect.signature(fn)
    wants_key = IDEMPOTENCY_PARAMETER in signature.parameters
    if parameters is not None:
        if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
            raise ConfigError(f"tool {label!r}: parameters must be a JSON schema of an object "
                              '({"type": "object", "properties": {...}})',
                              field=f"tools.{label}.parameters")
        return Tool(name=label, description=summary, parameters=dict(parameters), function=fn,
                    reconcile=reconcile, wants_key=wants_key)
    validator = _validator(label, fn, signature, _arg_docs(doc))
    schema = _untitled(validator.model_json_schema())
    return Tool(name=label, description=summary, parameters=schema, function=fn,
                reconcile=reconcile, wants_key=wants_key, validator=validator)


def _validator(label: str, fn: Callable[..., Any], signature: inspect.Signature,
               docs: Mapping[str, str]) -> type[pydantic.BaseModel]:
    """A pydantic model of the function's parameters, from its hints."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # a hint that does not resolve: a declaration error
        raise ConfigError(f"tool {label!r}: its type hints do not resolve: {exc}",
                          field=f"tools.{label}") from exc
    fields: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.name == IDEMPOTENCY_PARAMETER:
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD,
                              parameter.POSITIONAL_ONLY):
            raise ConfigError(f"tool {label!r}: parameter {parameter.name!r} must be a plain "
                              "named parameter (no *args, **kwargs or positional-only)",
                              field=f"tools.{label}")
        if parameter.name not in hints:
            raise ConfigError(f"tool {label!r}: parameter {parameter.name!r} has no type hint; "
                              "the model needs its type", field=f"tools.{label}")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints[parameter.name],
                                  pydantic.Field(default, description=docs.get(parameter.name)))
    try:
        model: type[pydantic.BaseModel] = pydantic.create_model(f"{label}_arguments", **fields)
        model.model_json_schema()
    except Exception as exc:  # an annotation pydantic cannot describe
        raise ConfigError(f"tool {label!r}: its parameters cannot be described as JSON "
                          f"schema: {exc}", field=f"tools.{label}") from exc
    return model


def _untitled(schema: Any) -> Any:
    """The schema without pydantic's generated titles, which tell a model nothing."""
    if isinstance(schema, dict):
        return {key: _untitled(value) for key, value in schema.items()
                if not (key == "title" and isinstance(value, str))}
    if isinstance(schema, list):
        return [_untitled(value) for value in schema]
    return schema


def _arg_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    found: dict[str, str] = {}
    inside, current = False, None
    for line in doc.splitlines():
        if _ARGS_SECTION.match(line):
            inside, current = True, None
            continue
        if inside and _SECTION.match(line):
            break
        if not inside:
            continue
        matched = _ARG_LINE.match(line)
        if matched and len(line) - len(line.lstrip()) <= 8:
            current = matched.group(1).lstrip("*")
            found[current] = matched.group(3).strip()
        elif current and line.strip():
            found[current] = f"{found[current]} {line.strip()}".strip()
    return found


def _errors(exc: pydantic.ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in error['loc']) or '(arguments)'}: "
                     f"{error['msg']}" for error in exc.errors())


def _check_schema(name: str, schema: Mapping[str, Any], args: Mapping[str, Any]) -> None:
    """Check `args` against a schema given whole, with a kept JSON Schema validator."""
    import jsonschema  # noqa: PLC0415 - only tools declared with a whole schema need it

    validator = jsonschema.Draft202012Validator(dict(schema))
    problems = sorted(validator.iter_errors(dict(args)), key=lambda e: list(e.path))
    if problems:
        said = "; ".join(f"{'.'.join(str(p) for p in e.path) or '(arguments)'}: {e.message}"
                         for e in problems)
        raise ValueError(f"arguments of tool {name!r} do not match its schema: {said}")


async def call_function(function: Callable[..., Any], kwargs: Mapping[str, Any],
                        run_sync: Callable[[Callable[[], Any]], Awaitable[Any]]) -> Any:
    """Call a tool function: awaited if async, on a worker thread (`run_sync`) if not."""
    if inspect.iscoroutinefunction(function):
        return await function(**kwargs)
    result = await run_sync(lambda: function(**kwargs))
    if inspect.isawaitable(result):
        return await result
    return result
