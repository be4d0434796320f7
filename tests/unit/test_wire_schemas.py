"""Wire schemas: generated code matches proto/, and committed golden blobs still decode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from beam_agents._proto.budget_pb2 import TokenBudgetBlob
from beam_agents._proto.llm_cache_pb2 import LlmCacheBlob
from beam_agents._proto.memory_pb2 import MemoryBlob
from beam_agents.memory import Memory
from beam_agents.model import TokenBudget

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


def test_generated_code_has_not_drifted_from_proto() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_protos.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_every_blob_schema_carries_state_schema_version() -> None:
    for message in (MemoryBlob, LlmCacheBlob, TokenBudgetBlob):
        assert "state_schema_version" in message.DESCRIPTOR.fields_by_name


def test_golden_memory_blob_v1_still_decodes() -> None:
    memory = Memory((GOLDEN / "memory_v1.bin").read_bytes(), now_ms=0)
    assert memory.keys() == ("profile", "history")
    assert memory.ring("history") == (b"hello", b"", b"world")
    assert memory.dirty is False
    assert memory.get("profile") == b'{"name":"Ada"}'


def test_golden_llm_cache_blob_v1_still_parses() -> None:
    blob = LlmCacheBlob.FromString((GOLDEN / "llm_cache_v1.bin").read_bytes())
    assert blob.state_schema_version == 1
    assert [e.cache_key for e in blob.entries] == ["a" * 64]
    assert blob.entries[0].response == b"cached"


def test_golden_budget_blob_v1_still_decodes() -> None:
    budget = TokenBudget((GOLDEN / "budget_v1.bin").read_bytes(), entity_key=b"acct-1",
                         now_ms=86_400_000 + 60_000, max_tokens=1_000)
    assert (budget.window_start_ms, budget.tokens_used) == (86_400_000, 321)
