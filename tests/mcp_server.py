"""A real MCP server, built with the official SDK, for the MCP tool tests.

    python -m tests.mcp_server stdio --log FILE
    python -m tests.mcp_server http --port N --token T --log FILE

Its tools append a line per run to ``--log``, so a test counts what ran. Over
HTTP it refuses requests that lack ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer


def build(log: Path) -> MCPServer:
    server = MCPServer("beam-agents-test")

    @server.tool()
    def create_ticket(title: str, priority: int = 3) -> dict[str, Any]:
        """Open a support ticket."""
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"create_ticket {title}\n")
        return {"ticket": f"T-{abs(hash(title)) % 10_000:04d}", "priority": priority}

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ValueError(reason)

    return server


async def serve_http(server: MCPServer, port: int, token: str) -> None:
    import uvicorn  # noqa: PLC0415

    app = server.streamable_http_app()

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
                return
        await app(scope, receive, send)

    config = uvicorn.Config(guarded, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    await uvicorn.Server(config).serve()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=("stdio", "http"))
    parser.add_argument("--log", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="")
    args = parser.parse_args()
    server = build(Path(args.log))
    if args.transport == "stdio":
        server.run("stdio")
    else:
        asyncio.run(serve_http(server, args.port, args.token))


if __name__ == "__main__":
    main()
