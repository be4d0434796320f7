"""An httpx transport that takes the send gate's last look at a request's first write.

httpx hands a request to httpcore, which waits for a pooled connection (and
may connect and shake hands) before it writes; a 429 can be read in that
time. The gate (`check_before_send`) must therefore run where the bytes are
written, not where the request is handed over: this module wraps httpcore's
network streams so that the first write of each request checks the gate and
then writes, with no await in between (anyio writes to the socket before it
yields). See `beam_agents.model._send_gate`.
"""

from __future__ import annotations

import ssl
import typing

import httpcore
import httpx

from beam_agents.model._send_gate import check_before_send

__all__ = ["gated_transport"]


class _GatedStream(httpcore.AsyncNetworkStream):
    """A connection whose writes look at the send gate first (one-shot per attempt)."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            check_before_send()
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        # The handshake writes through the inner stream: only requests meet the gate.
        return _GatedStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _GatedBackend(httpcore.AsyncNetworkBackend):
    """Opens connections through `inner` and gates them."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: typing.Iterable[typing.Any] | None = None,
                          ) -> httpcore.AsyncNetworkStream:
        return _GatedStream(await self._inner.connect_tcp(
            host, port, timeout=timeout, local_address=local_address,
            socket_options=socket_options))

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: typing.Iterable[typing.Any] | None = None,
                                  ) -> httpcore.AsyncNetworkStream:
        return _GatedStream(await self._inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def gated_transport() -> httpx.AsyncHTTPTransport:
    """Httpx's own transport, no retries, whose connections take the send gate's last look.

    Raises:
        RuntimeError: This httpx keeps its connection pool elsewhere; the pin
            in pyproject.toml and the flow-control tests guard against that.
    """
    transport = httpx.AsyncHTTPTransport(retries=0)
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(pool, httpcore.AsyncConnectionPool) or backend is None:
        raise RuntimeError(f"httpx {httpx.__version__} has no connection pool to gate; the "
                           "send gate needs httpx's AsyncHTTPTransport over httpcore")
    pool._network_backend = _GatedBackend(backend)
    return transport
