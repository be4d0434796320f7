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
from typing import TYPE_CHECKING, Any, TypeVar

from beam_agents._checks import require_int
from beam_agents.errors import ConfigError
from beam_agents.stores.firestore._rules import require_collection_id

if TYPE_CHECKING:
    from beam_agents.stores.firestore._longterm import FirestoreLongtermStore
    from beam_agents.stores.sqlite._longterm import SqliteLongtermStore

__all__ = [
    "FirestoreLongtermConfig",
    "SqliteLongtermConfig",
    "check_firestore_settings",
    "check_sqlite_settings",
    "config_from_mapping",
    "longterm_config_from_mapping",
]

_C = TypeVar("_C")


def check_sqlite_settings(owner: str, *, path: object, busy_timeout_ms: object) -> None:
    """Validate an SQLite backend's settings; errors name ``<owner>.<field>``.

    Raises:
        ConfigError: ``path`` is not a non-empty str without NUL, or
            ``busy_timeout_ms`` is not an int >= 0.
    """
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{owner}.path must be a non-empty file path, got {path!r}",
                          field="path")
    if "\x00" in path:
        raise ConfigError(f"{owner}.path must not contain NUL", field="path")
    require_int(busy_timeout_ms, name=f"{owner}.busy_timeout_ms", low=0, field="busy_timeout_ms")


def check_firestore_settings(owner: str, *, project: object, database: object,
                             collection: object, timeout_ms: object) -> None:
    """Validate a Firestore backend's settings; errors name ``<owner>.<field>``.

    Raises:
        ConfigError: ``project`` or ``database`` is not a non-empty id without
            ``/``, ``collection`` is not a usable collection id, or
            ``timeout_ms`` is not an int >= 1.
    """
    for name, value in (("project", project), ("database", database)):
        if not isinstance(value, str) or not value or "/" in value:
            raise ConfigError(
                f"{owner}.{name} must be a non-empty id without '/', got {value!r}",
                field=name,
            )
    require_collection_id(collection, owner=owner)
    require_int(timeout_ms, name=f"{owner}.timeout_ms", low=1, field="timeout_ms")


def config_from_mapping(classes: Mapping[str, type[_C]], data: Mapping[str, Any],
                        prefix: str) -> _C:
    """Build the config ``data["backend"]`` names from the rest of `data`'s fields.

    Raises:
        ConfigError: unknown backend or field, named as ``<prefix>.<field>``.
    """
    fields = dict(data)
    backend = fields.pop("backend", None)
    if backend not in classes:
        raise ConfigError(f"{prefix}.backend must be one of {sorted(classes)}, "
                          f"got {backend!r}", field=f"{prefix}.backend")
    cls = classes[backend]
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if unknown := sorted(set(fields) - known):
        raise ConfigError(f"unknown {prefix} field(s) for {backend}: {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}",
                          field=f"{prefix}.{unknown[0]}")
    return cls(**fields)

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
        check_sqlite_settings("SqliteLongtermConfig", path=self.path,
                              busy_timeout_ms=self.busy_timeout_ms)

    def open(self) -> SqliteLongtermStore:
        """Build the store; the database is opened lazily on first use."""
        from beam_agents.stores.sqlite._longterm import SqliteLongtermStore  # noqa: PLC0415 - lazy

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
        check_firestore_settings("FirestoreLongtermConfig", project=self.project,
                                 database=self.database, collection=self.collection,
                                 timeout_ms=self.timeout_ms)

    def open(self) -> FirestoreLongtermStore:
        """Build the store; the Firestore client is created on first use."""
        from beam_agents.stores.firestore._longterm import FirestoreLongtermStore  # noqa: PLC0415 - lazy

        return FirestoreLongtermStore(self)


def longterm_config_from_mapping(
        data: Mapping[str, Any]) -> SqliteLongtermConfig | FirestoreLongtermConfig:
    """Build a store config from plain data: ``{"backend": "sqlite"|"firestore", ...fields}``.

    Raises:
        ConfigError: unknown backend or field, named as ``longterm_memory.<field>``.
    """
    classes: dict[str, type[SqliteLongtermConfig] | type[FirestoreLongtermConfig]] = {
        "sqlite": SqliteLongtermConfig, "firestore": FirestoreLongtermConfig}
    return config_from_mapping(classes, data, "longterm_memory")
