"""Agents whose MCP servers the tests start: declared when the test loads them.

`load_agent("tests.mcp.agents:http_agent")` reads the server's address from
the environment the test sets, as a deployment's agent module would name its
real server.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from beam_agents.runtime import Agent, AgentContext, McpServer, agent

URL_ENV = "BEAM_AGENTS_TEST_MCP_URL"
LOG_ENV = "BEAM_AGENTS_TEST_MCP_LOG"
TOKEN_ENV = "BEAM_AGENTS_TEST_MCP_TOKEN"


async def _open_ticket(ctx: AgentContext) -> None:
    assert ctx.tools is not None
    name = next(n for n in ctx.tools.names if n.endswith("__create_ticket"))
    ticket = await ctx.tools.acall(name, {"title": ctx.payload.decode(), "priority": 2})
    ctx.emit("ticket", ticket)


def _fail(ctx: AgentContext) -> Any:
    """Calls the server's tool that always fails."""
    assert ctx.tools is not None
    name = next(n for n in ctx.tools.names if n.endswith("__fail"))
    return ctx.tools.call(name, {"reason": "on purpose"})


def _stdio_server() -> McpServer:
    return McpServer(name="desk", command=sys.executable,
                     args=("-m", "tests.mcp_server", "stdio", "--log", os.environ[LOG_ENV]))


def __getattr__(name: str) -> Agent:
    if name == "http_agent":
        server = McpServer(name="desk", url=os.environ[URL_ENV],
                           headers_env={"Authorization": TOKEN_ENV})
        return agent(_open_ticket, mcp=[server])  # type: ignore[no-any-return]
    if name == "stdio_agent":
        return agent(_open_ticket, mcp=[_stdio_server()])  # type: ignore[no-any-return]
    if name == "failing_agent":
        return agent(_fail, mcp=[_stdio_server()])  # type: ignore[no-any-return]
    raise AttributeError(name)
