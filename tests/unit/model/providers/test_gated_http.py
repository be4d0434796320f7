"""The HTTP providers' transport looks at the send gate at a request's first write."""

from __future__ import annotations

import asyncio
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from beam_agents.model._send_gate import RequestHeldBack, armed
from beam_agents.model.providers._gated_http import gated_transport
from tests._http import LocalServer, send_json

pytestmark = pytest.mark.timeout(30)


def test_a_request_whose_gate_refuses_never_reaches_the_server_and_the_next_one_does() -> None:
    arrived: list[str] = []

    def handle(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        arrived.append(body.decode())
        send_json(handler, b"{\"ok\": true}")

    def refuse() -> None:
        raise RequestHeldBack("a 429 was read")

    async def scenario(url: str) -> int:
        async with httpx.AsyncClient(transport=gated_transport()) as client:
            with armed(refuse), pytest.raises(RequestHeldBack):
                await client.post(url, content=b"held")
            checks: list[int] = []
            with armed(lambda: checks.append(1)):
                reply = await client.post(url, content=b"sent" * 10_000)  # several writes
            assert checks == [1]  # one look per attempt, at its first write
            return reply.status_code

    with LocalServer(handle, keep_alive=True) as server:
        assert asyncio.run(scenario(server.url)) == 200
    assert arrived == ["sent" * 10_000]
