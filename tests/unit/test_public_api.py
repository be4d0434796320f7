"""Pins the public surface: an API change shows up here as a diff (STYLE)."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "beam_agents.memory": [
        "DEFAULT_MAX_ITEMS", "HARD_CAP_BYTES", "SOFT_CAP_BYTES", "STATE_SCHEMA_VERSION",
        "Compactor", "LruCompactor", "Memory", "MemoryOverflow", "RingCorruptError",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_exported_names_are_pinned(module: str) -> None:
    loaded = importlib.import_module(module)
    assert sorted(loaded.__all__) == sorted(PUBLIC[module])
    for name in loaded.__all__:
        assert hasattr(loaded, name), f"{module}.{name} is exported but missing"
