"""The README's "Testing an agent" example, and the reference's async one, run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"
_BLOCK = re.compile(r"^### Testing an agent\n.*?^```python\n(.*?)^```", re.M | re.S)


def test_the_readme_testing_example_runs_and_its_asserts_hold() -> None:
    found = _BLOCK.search(README.read_text(encoding="utf-8"))
    assert found is not None, "README.md has no python block under '### Testing an agent'"
    code = found.group(1)
    assert "assert model.calls == 2" in code  # the example checks what it claims
    assert "env.replay()" in code
    namespace: dict[str, object] = {}
    exec(compile(code, f"{README}:Testing an agent", "exec"), namespace)
    env = namespace["env"]
    assert [intent.seq for intent in getattr(env, "intents", [])] == [1, 2]
    assert getattr(env, "dead_letters", None) == []


REFERENCE = README.parent / "docs" / "reference.md"
_ASYNC_BLOCK = re.compile(r"^## Async agents and tool turns\n.*?^```python\n(.*?)^```", re.M | re.S)


def test_the_async_agent_example_runs_by_hand_and_with_the_tool_loop() -> None:
    """The reference's async example (acomplete, arun_tools, a tool turn's messages) runs."""
    found = _ASYNC_BLOCK.search(REFERENCE.read_text(encoding="utf-8"))
    assert found is not None, "docs/reference.md has no python block under its async section"
    code = found.group(1)
    for name in ("await ctx.model.acomplete(", "await ctx.model.arun_tools(", '"tool_call_id"',
                 '"tool_calls"', "assert isinstance(outcome, Committed) and model.calls == 2"):
        assert name in code, name
    # The block names its agents by its module (`__name__`), as a saved file would.
    module = types.ModuleType("reference_async_example")
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, f"{REFERENCE}:Async agents", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    assert module.__dict__["name"] == "with_the_loop"  # both agents ran
