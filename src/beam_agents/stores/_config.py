"""Picklable configs for the long-term store backends.

A config is what ``AgentConfig.longterm_memory`` holds and what gets pickled
with the DoFn. It holds settings only, never a client or a connection; its
:meth:`open` imports the backend module (and so its SDK) on the worker, in
``DoFn.setup()``. Importing this module imports neither sqlite3 nor
google.cloud.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from beam_agents._checks import require_int
from beam_agents.errors import ConfigError
from beam_agents.stores._firestore_rules import require_collection_id

if TYPE_CHECKING:
    from beam_agents.stores.firestore import FirestoreLongtermStore
    from beam_agents.stores.sqlite import SqliteLongtermStore

__all__ = ["FirestoreLongtermConfig", "SqliteLongtermConfig", "longterm_config_from_mapping"]

@dataclass(frozen=True, slots=True, kw_only=True)
class SqliteLongtermConfig:
    """Settings for `SqliteLongtermStore`, the embedded default backend.

    Attributes:
        path: Database file; created with its table on first use. ``:memory:``
            gives a private, non-durable database (tests only).
        busy_timeout_ms: How long a write waits for another connection's lock
            before the call fails with `MemoryUnavailable`.
    """

    path: str
    busy_timeout_ms: int = 5_000

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path:
            raise ConfigError(
                f"SqliteLongtermConfig.path must be a non-empty file path, got {self.path!r}",
                field="path",
            )
        if "\x00" in self.path:
            raise ConfigError("SqliteLongtermConfig.path must not contain NUL", field="path")
        require_int(self.busy_timeout_ms, name="SqliteLongtermConfig.busy_timeout_ms", low=0,
                    field="busy_timeout_ms")

    def open(self) -> SqliteLongtermStore:
        """Build the store; the database is opened lazily on first use."""
        from beam_agents.stores.sqlite import SqliteLongtermStore  # noqa: PLC0415 - lazy

        return SqliteLongtermStore(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class FirestoreLongtermConfig:
    """Settings for `FirestoreLongtermStore`.

    Rows live at ``{collection}/{hex(entity_key)}/records/{encoded key}`` in the
    given project and database. Credentials come from the environment the
    Google client reads (Application Default Credentials, or
    ``FIRESTORE_EMULATOR_HOST`` for an emulator); the library reads none.

    Attributes:
        project: Google Cloud project id.
        database: Firestore database id.
        collection: Top-level collection holding one document per entity.
        timeout_ms: Deadline for one store call (a load, a search, or a whole
            flush transaction including the SDK's own retries); past it the
            call raises `MemoryUnavailable`.
    """

    project: str
    database: str = "(default)"
    collection: str = "beam_agents"
    timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        for name in ("project", "database"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "/" in value:
                raise ConfigError(
                    f"FirestoreLongtermConfig.{name} must be a non-empty id without '/', "
                    f"got {value!r}",
                    field=name,
                )
        require_collection_id(self.collection)
        require_int(self.timeout_ms, name="FirestoreLongtermConfig.timeout_ms", low=1,
                    field="timeout_ms")

    def open(self) -> FirestoreLongtermStore:
        """Build the store; the Firestore client is created on first use."""
        from beam_agents.stores.firestore import FirestoreLongtermStore  # noqa: PLC0415 - lazy

        return FirestoreLongtermStore(self)


def longterm_config_from_mapping(
        data: Mapping[str, Any]) -> SqliteLongtermConfig | FirestoreLongtermConfig:
    """Build a store config from plain data: ``{"backend": "sqlite"|"firestore", ...fields}``.

    Raises:
        ConfigError: unknown backend or field, named as ``longterm_memory.<field>``.
    """
    fields = dict(data)
    backend = fields.pop("backend", None)
    classes: dict[str, type[SqliteLongtermConfig] | type[FirestoreLongtermConfig]] = {
        "sqlite": SqliteLongtermConfig, "firestore": FirestoreLongtermConfig}
    if backend not in classes:
        raise ConfigError(f"longterm_memory.backend must be one of {sorted(classes)}, "
                          f"got {backend!r}", field="longterm_memory.backend")
    cls = classes[backend]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"unknown longterm_memory field(s) for {backend}: {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}",
                          field=f"longterm_memory.{unknown[0]}")
    return cls(**fields)
