"""The README's "Testing an agent" example runs as written: a newcomer copies it first."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"
_BLOCK = re.compile(r"^### Testing an agent\n.*?^```python\n(.*?)^```", re.M | re.S)


def test_the_readme_testing_example_runs_and_its_asserts_hold() -> None:
    found = _BLOCK.search(README.read_text(encoding="utf-8"))
    assert found is not None, "README.md has no python block under '### Testing an agent'"
    code = found.group(1)
    assert "assert model.calls == 2" in code  # the example checks what it claims
    namespace: dict[str, object] = {}
    exec(compile(code, f"{README}:Testing an agent", "exec"), namespace)
    state = namespace["state"]
    assert getattr(state, "seq", None) == 2 and getattr(state, "memory", None)
