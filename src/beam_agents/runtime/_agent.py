"""An agent declared with what it brings: its tools, its MCP servers, its memory version.

``@agent(tools=[...])`` over a function ``fn(ctx)`` makes an `Agent`, which
the pipeline runs as it runs the function. A plain function is an agent too,
with no tools; the declaration exists so that what the library must know
about an agent before it runs one (which tools it may call and how their
results are recorded, how its working memory is versioned) is said in one
visible place, checked when the worker loads it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from beam_agents.errors import ConfigError
from beam_agents.runtime._tools import Tool, tool

__all__ = ["Agent", "McpServer", "agent"]


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServer:
    """An MCP server whose tools the agent may call; plain, picklable settings.

    Its tools are listed once per worker, when the worker starts, and each
    call of one is recorded like any tool's (invariant 13).

    Attributes:
        name: A short name; its tools are called ``<name>__<tool>``.
        url: A streamable-HTTP endpoint (``http://host:port/mcp``), or None.
        command: With no `url`: the command that starts a stdio server.
        args: The command's arguments.
        headers_env: HTTP headers whose values the worker reads from
            environment variables: ``{"Authorization": "MCP_TOKEN"}``.
        headers_secret: HTTP headers whose values the worker reads from Secret
            Manager versions (``projects/P/secrets/S/versions/V``).
        timeout_s: How long one call may take.
    """

    name: str
    url: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    headers_env: tuple[tuple[str, str], ...] = ()
    headers_secret: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for field_name in ("headers_env", "headers_secret"):
            given = getattr(self, field_name)
            if isinstance(given, Mapping):  # {"Authorization": "MCP_TOKEN"} reads best
                object.__setattr__(self, field_name, tuple(sorted(given.items())))
        object.__setattr__(self, "args", tuple(self.args))
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ConfigError(f"McpServer name {self.name!r} must be letters, digits or '_'",
                              field="mcp.name")
        if (self.url is None) == (self.command is None):
            raise ConfigError(f"McpServer {self.name!r}: set url (streamable HTTP) or command "
                              "(stdio), not both", field=f"mcp.{self.name}")
        if self.command is not None and (self.headers_env or self.headers_secret):
            raise ConfigError(f"McpServer {self.name!r}: headers go with url, not a stdio "
                              "command", field=f"mcp.{self.name}.headers_env")


@dataclass(frozen=True, slots=True, eq=False)
class Agent:
    """An agent function with its declaration; called exactly as the function is.

    Attributes:
        function: ``fn(ctx)``, sync or async.
        tools: The tools it may call, by name.
        mcp: MCP servers whose tools it may also call.
        memory_version: The working-memory version it reads and writes.
        migrate: ``migrate(old_version, memory)``, for memory of older versions.
    """

    function: Callable[..., Any] = field(repr=False)
    tools: tuple[Tool, ...] = ()
    mcp: tuple[McpServer, ...] = ()
    memory_version: int = 0
    migrate: Callable[..., Any] | None = field(default=None, repr=False)

    @property
    def __name__(self) -> str:
        return str(getattr(self.function, "__name__", "agent"))

    @property
    def is_async(self) -> bool:
        """Whether the function is a coroutine function."""
        return inspect.iscoroutinefunction(self.function)

    def __call__(self, ctx: Any) -> Any:
        return self.function(ctx)


@overload
def agent(function: Callable[..., Any], *, tools: Sequence[Any] = (),
          mcp: Sequence[McpServer] = (), memory_version: int = 0,
          migrate: Callable[..., Any] | None = None) -> Agent: ...


@overload
def agent(function: None = None, *, tools: Sequence[Any] = (),
          mcp: Sequence[McpServer] = (), memory_version: int = 0,
          migrate: Callable[..., Any] | None = None) -> Callable[[Callable[..., Any]], Agent]: ...


def agent(function: Callable[..., Any] | None = None, *, tools: Sequence[Any] = (),
          mcp: Sequence[McpServer] = (), memory_version: int = 0,
          migrate: Callable[..., Any] | None = None
          ) -> Agent | Callable[[Callable[..., Any]], Agent]:
    """Declare an agent: ``@agent``, or ``@agent(tools=[lookup_order], ...)``.

    Args:
        function: The agent, ``fn(ctx)``, sync or async.
        tools: Functions (declared with `tool` if they are not already) that
            ``ctx.tools.call`` and ``ctx.model.run_tools`` may run.
        mcp: MCP servers whose tools join them.
        memory_version: The working-memory version (see "Working-memory
            versions" in docs/design.md); with `migrate` for older memory.
        migrate: ``migrate(old_version, memory)``, sync or async.

    Raises:
        ConfigError: A tool cannot be declared, or two tools share a name.
    """
    def declare(fn: Callable[..., Any]) -> Agent:
        declared = tuple(t if isinstance(t, Tool) else tool(t) for t in tools)
        seen: set[str] = set()
        for each in declared:
            if each.name in seen:
                raise ConfigError(f"two tools are named {each.name!r}; tool names must be "
                                  "unique", field=f"tools.{each.name}")
            seen.add(each.name)
        names = [server.name for server in mcp]
        if len(set(names)) != len(names):
            raise ConfigError(f"two MCP servers share a name among {names}", field="mcp")
        return Agent(function=fn, tools=declared, mcp=tuple(mcp),
                     memory_version=memory_version, migrate=migrate)

    return declare if function is None else declare(function)
