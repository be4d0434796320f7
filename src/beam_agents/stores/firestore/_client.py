"""What the Firestore backends share: one lazy AsyncClient, the deadline, error translation.

The long-term store and the call journal each build their ``AsyncClient`` on
first use, inside the event loop that uses it (credential discovery runs in a
worker thread, since it may block on the metadata server), bound every call
by ``timeout_ms``, and translate ``google.api_core`` / ``google.auth`` errors
into the backend's unavailable error (`MemoryUnavailable` for the store,
`JournalUnavailable` for the journal), so the core never sees SDK types.
Missing credentials are a `ConfigError` naming the backend's config field.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from beam_agents.errors import BeamAgentsError, ConfigError

if TYPE_CHECKING:
    from google.cloud.firestore_v1 import AsyncClient

__all__ = ["FirestoreClient", "close_client"]

_T = TypeVar("_T")


def _find_cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


async def close_client(client: AsyncClient) -> None:
    """Release `client`'s HTTP resources and, if it was built, its gRPC channel."""
    client.close()  # type: ignore[no-untyped-call]  # public; releases HTTP resources only
    # The AsyncClient has no public way to close its gRPC channel. The GAPIC
    # client it wraps does (transport.close()); reach it only if it was built.
    api = getattr(client, "_firestore_api_internal", None)
    if api is not None:
        with contextlib.suppress(Exception):
            await api.transport.close()


class FirestoreClient:
    """One backend's lazily built ``AsyncClient`` and the plumbing of each call.

    Args:
        timeout_ms: Deadline for one call, the SDK's own retries included.
        factory: Builds the client (blocking; run in a worker thread). Each
            backend passes its own, so the ``AsyncClient`` it names is the
            one its module imported.
        where: Names the backend in error messages.
        field: The config field a missing-credentials `ConfigError` names.
        unavailable: The error an SDK failure or a passed deadline becomes.
        ensure_open: The owner's closed check for building the client, called
            with the operation's name under the client lock.
        unwrap_value_errors: Also translate a ``ValueError`` that the SDK's
            transaction runner raised in place of a transport error or an
            expired deadline (chained to the original).
    """

    def __init__(self, *, timeout_ms: int, factory: Callable[[], AsyncClient], where: str,
                 field: str,
                 unavailable: Callable[[str], BeamAgentsError],
                 ensure_open: Callable[[str], None], unwrap_value_errors: bool = False) -> None:
        self._timeout_ms = timeout_ms
        self._factory = factory
        self._where = where
        self._field = field
        self._unavailable = unavailable
        self._ensure_open = ensure_open
        self._unwrap_value_errors = unwrap_value_errors
        self._client: AsyncClient | None = None
        self._lock = asyncio.Lock()

    async def _get(self, what: str) -> AsyncClient:
        async with self._lock:
            self._ensure_open(what)
            if self._client is None:
                # Credential discovery may block on the metadata server; keep it
                # off the event loop. The gRPC channel itself is created lazily
                # on first RPC, in this loop.
                self._client = await asyncio.to_thread(self._factory)
            return self._client

    async def call(self, what: str, work: Callable[[AsyncClient], Awaitable[_T]]) -> _T:
        """Run `work` on the client within the deadline, translating SDK failures."""
        where = self._where
        late = f"{where}: {what} did not finish within {self._timeout_ms} ms"
        try:
            async with asyncio.timeout(self._timeout_ms / 1000) as deadline:
                return await work(await self._get(what))
        except auth_exceptions.DefaultCredentialsError as exc:
            raise ConfigError(
                f"{where}: no Google credentials found ({exc}); configure Application "
                "Default Credentials for the workers",
                field=self._field,
            ) from exc
        except (api_exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError) as exc:
            raise self._unavailable(f"{where}: {what} failed: {exc}") from exc
        except TimeoutError as exc:
            raise self._unavailable(late) from exc
        except ValueError as exc:
            if not self._unwrap_value_errors:
                raise
            if deadline.expired():
                raise self._unavailable(late) from exc
            cause = _find_cause(exc, api_exceptions.GoogleAPIError)
            if cause is None:
                raise
            raise self._unavailable(f"{where}: {what} failed: {cause}") from exc

    async def close(self, mark_closed: Callable[[], None]) -> None:
        """Run `mark_closed` under the client lock, then close the client if built."""
        async with self._lock:
            mark_closed()
            client, self._client = self._client, None
        if client is not None:
            await close_client(client)
