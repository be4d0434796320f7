"""Reading what the Flink job's file sinks committed.

Kept apart from ``conftest`` so the Python workers can import it too (the
failover fault waits on committed output) without pytest or PyFlink.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["part_lines"]


def part_lines(directory: Path) -> list[bytes]:
    """All committed lines of a FileSink directory, sorted (in-progress files excluded).

    A part file is committed once its name no longer starts with "."; a
    directory that does not exist yet has committed nothing.
    """
    lines: list[bytes] = []
    for part in directory.rglob("*"):
        if part.is_file() and not part.name.startswith("."):
            lines += part.read_bytes().splitlines()
    return sorted(lines)
