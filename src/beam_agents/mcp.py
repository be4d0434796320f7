"""MCP tools at the edge: an agent's MCP servers, listed once per worker, called durably.

The only module that imports the official ``mcp`` SDK. For each `McpServer`
an agent declares, `McpToolSource` connects when the worker starts (streamable
HTTP, with headers read from environment variables or Secret Manager as
model keys are, or a stdio command), lists the server's tools once, and
offers each as a `Tool` named ``<server>__<tool>``, with the schema the server
gave. The calls go through ``ctx.tools`` like any tool's, so each result is
recorded and never asked for twice (invariant 13).

A call that cannot reach the server raises `ToolUnavailable` (the activation
suspends and retries); a tool the server reports as failed is a TOOL dead
letter naming it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from beam_agents.errors import ConfigError, ToolUnavailable
from beam_agents.runtime import McpServer, Tool

__all__ = ["McpToolSource", "mcp_headers"]

#: Between a server's name and its tool's: what every provider accepts in a function name.
SEPARATOR = "__"


def mcp_headers(server: McpServer) -> dict[str, str]:
    """The HTTP headers `server` declares, read on the worker from where they live.

    Raises:
        ConfigError: A variable is unset or empty; names it and the header.
    """
    headers: dict[str, str] = {}
    for header, variable in server.headers_env:
        value = os.environ.get(variable, "").strip()
        if not value:
            raise ConfigError(f"MCP server {server.name!r}: header {header} comes from the "
                              f"environment variable {variable}, which is not set or empty on "
                              "this worker", field=f"mcp.{server.name}.headers_env")
        headers[header] = value
    for header, version in server.headers_secret:
        from beam_agents._secrets import read_secret_version  # noqa: PLC0415 - loads the client

        headers[header] = read_secret_version(version).strip()
    return headers


class McpToolSource:
    """One MCP server's tools for one worker: connected once, closed with the runtime."""

    def __init__(self, server: McpServer) -> None:
        self._server = server
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Client | None = None

    async def tools(self) -> Sequence[Tool]:
        """Connect, list the server's tools, and offer each as a `Tool`.

        Raises:
            ToolUnavailable: The server cannot be reached (the activation that
                first needed it suspends; the next one tries again).
        """
        server = self._server
        self._stack = contextlib.AsyncExitStack()
        try:
            if server.url is not None:
                http = httpx2.AsyncClient(headers=mcp_headers(server),
                                          timeout=httpx2.Timeout(server.timeout_s))
                await self._stack.enter_async_context(http)
                transport: Any = streamable_http_client(server.url, http_client=http)
            else:
                assert server.command is not None
                transport = StdioServerParameters(command=server.command, args=list(server.args))
            client = Client(transport, read_timeout_seconds=server.timeout_s)
            self._client = await self._stack.enter_async_context(client)
            listed = await self._client.list_tools()
        except ConfigError:
            await self.aclose()
            raise
        except Exception as exc:  # the SDK's and its transports' errors, whatever their kind
            await self.aclose()
            raise ToolUnavailable(f"MCP server {server.name!r} cannot be reached to list its "
                                  f"tools: {type(exc).__name__}: {exc}",
                                  tool=server.name) from exc
        return [self._tool(tool) for tool in listed.tools]

    def _tool(self, listed: Any) -> Tool:
        name = f"{self._server.name}{SEPARATOR}{listed.name}"

        async def call(**arguments: Any) -> Any:
            return await self._call(listed.name, arguments)

        schema = dict(listed.input_schema or {"type": "object", "properties": {}})
        schema.setdefault("type", "object")
        return Tool(name=name, description=listed.description or "", parameters=schema,
                    function=call)

    async def _call(self, tool: str, arguments: dict[str, Any]) -> Any:
        if self._client is None:
            raise ToolUnavailable(f"MCP server {self._server.name!r} is not connected",
                                  tool=tool)
        try:
            result = await self._client.call_tool(tool, arguments)
        except Exception as exc:  # a transport that failed: try again later
            raise ToolUnavailable(f"MCP server {self._server.name!r} failed the call of "
                                  f"{tool!r}: {type(exc).__name__}: {exc}", tool=tool) from exc
        text = "".join(getattr(part, "text", "") for part in result.content or ())
        if result.is_error:
            raise RuntimeError(f"the MCP tool reported an error: {text}")
        if result.structured_content is not None:
            return result.structured_content
        return text

    async def aclose(self) -> None:
        """Disconnect; safe to call twice."""
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):  # closing must not hide the run's own error
                await stack.aclose()
