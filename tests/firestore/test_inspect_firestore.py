"""``beam-agents inspect`` against the official Firestore emulator: rows and journal entries."""

from __future__ import annotations

import hashlib
import io
from typing import Any

from beam_agents import inspection
from beam_agents.backend import JournalEntry
from beam_agents.memory import LongtermRecord
from beam_agents.model import ModelResponse
from beam_agents.stores import FirestoreCallJournalConfig
from beam_agents.stores.firestore import FirestoreLongtermConfig, FirestoreLongtermStore
from tests.conftest import Run

ENTITY = b"customer-07"


def _entry(seq: int, response: bytes, request: str = "") -> JournalEntry:
    return JournalEntry(cache_key=hashlib.sha256(response).hexdigest(), entity_key=ENTITY,
                        seq=seq, response=response, sha256=hashlib.sha256(response).digest(),
                        digest_only=False, created_at_ms=1_767_225_600_000,
                        expire_at_ms=1_767_225_600_000 + 3_600_000, request=request)


def test_inspect_reads_rows_and_journal_entries_from_firestore(
        config: FirestoreLongtermConfig, store: FirestoreLongtermStore, run: Run[Any]) -> None:
    run(store.stage(ENTITY, [LongtermRecord(entity_key=ENTITY, key="profile",
                                            value=b'{"plan": "team"}', seq=4,
                                            updated_at_ms=1_767_225_600_000)]))
    run(store.flush(ENTITY))
    journal = FirestoreCallJournalConfig(project=config.project, timeout_ms=10_000).open()
    answer = ModelResponse(text="Your order shipped.", model_id="gemini-2.5-flash",
                           usage={"prompt_tokens": 12, "completion_tokens": 5})
    run(journal.write(_entry(4, b'{"result":{"order_id":"A1042","status":"shipped"}}')))
    run(journal.write(_entry(4, answer.to_bytes(), '{"model_id":"gemini-2.5-flash"}')))
    run(journal.close())
    out = io.StringIO()

    status = inspection.main(["--entity_key", ENTITY.decode(), "--longterm_store", "firestore",
                              "--call_journal", "firestore",
                              "--firestore_project", config.project], out=out)

    shown = out.getvalue()
    assert status == 0
    assert "long-term rows: 1" in shown
    assert 'profile (seq 4, 2026-01-01T00:00:00.000+00:00) = "{\\"plan\\": \\"team\\"}"' in shown
    assert "call journal entries: 2" in shown
    assert 'tool result "{\\"order_id\\": \\"A1042\\", \\"status\\": \\"shipped\\"}"' in shown
    assert ('model call {"model_id":"gemini-2.5-flash"}, 12 in / 5 out: '
            '"Your order shipped."') in shown
