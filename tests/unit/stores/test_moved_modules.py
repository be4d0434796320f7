"""The backends' old module paths forward to their packages through 0.1.0, with a warning."""

from __future__ import annotations

import importlib
import pickle
import sys
import warnings

import pytest

from beam_agents.stores import InMemoryLongtermConfig

#: old module -> the package its names moved to
MOVED = {
    "beam_agents.stores.sqlite_journal": "beam_agents.stores.sqlite",
    "beam_agents.stores.firestore_journal": "beam_agents.stores.firestore",
    "beam_agents.stores.in_memory": "beam_agents.stores.memory",
    "beam_agents.stores.snapshot_files": "beam_agents.stores.files",
    "beam_agents.stores.snapshot_firestore": "beam_agents.stores.firestore",
}

#: InMemoryLongtermConfig(name="old-graph"), pickled when the class lived in
#: beam_agents.stores.in_memory, as a job graph built then holds it.
_OLD_PICKLE = bytes.fromhex(
    "8004954e000000000000008c1c6265616d5f6167656e74732e73746f7265732e696e5f6d656d6f7279948c16"
    "496e4d656d6f72794c6f6e677465726d436f6e6669679493942981945d948c096f6c642d67726170689461"
    "622e")


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_warns_once_naming_the_new_one_and_gives_the_same_objects(
        old: str, new: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        __import__(old)  # as an import statement does, so the warning points here
        __import__(old)
    module = sys.modules[old]
    [warning] = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert f"{old} is deprecated: import from {new} instead" in str(warning.message)
    assert warning.filename == __file__
    home = importlib.import_module("beam_agents.stores.firestore._snapshot"
                                   if old.endswith("snapshot_firestore") else new)
    for name in module.__all__:
        assert getattr(module, name) is getattr(home, name), name


def test_a_config_pickled_under_its_old_module_still_loads() -> None:
    """A job graph pickled before the move opens the same in-process store."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        config = pickle.loads(_OLD_PICKLE)
    assert type(config) is InMemoryLongtermConfig
    assert config == InMemoryLongtermConfig(name="old-graph")
