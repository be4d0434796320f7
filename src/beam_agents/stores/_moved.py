"""The warning a module left at an old path gives, once, when it is imported.

The backends moved into one package per technology (`beam_agents.stores.sqlite`,
``.firestore``, ``.memory``, ``.files``). Their old modules stay through
0.1.0 as forwarders, so imports keep working, and so does a pickle naming a
config by its old module path (a job graph built before the move).
"""

from __future__ import annotations

import warnings

__all__ = ["warn_moved"]


def warn_moved(old: str, new: str) -> None:
    """Warn that module `old` moved to `new`; call it from `old`'s body, which runs once.

    The warning points at the import statement (`warnings` skips the import
    system's frames), so Python's default filters show it for a script's imports.
    """
    warnings.warn(f"{old} is deprecated: import from {new} instead; the old module goes in "
                  "the next release", DeprecationWarning, stacklevel=3)
