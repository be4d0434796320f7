"""Agents the chaos tests run by reference ("tests.chaos._agents:NAME").

Each follows the replay discipline of seed 000: what it saves and emits is
computed from the event, working memory and replay-cached model output only,
never from a same-activation long-term read, so a replay writes the same bytes.
"""

from __future__ import annotations

import asyncio
import json

from beam_agents.runtime import AgentContext


async def consult(ctx: AgentContext) -> None:
    """Pays for two model calls, saving after each, then emits both answers.

    The first save is staged before the second call, so a provider failure on
    the second call leaves staged upserts that must not be flushed (invariant 1),
    and a retry must replay the first call rather than pay for it again (invariant 9).
    """
    note = ctx.payload.decode()
    count = int(ctx.memory.get("n") or b"0") + 1
    ctx.memory.set("n", str(count).encode())
    longterm = ctx.memory.longterm
    summary = await ctx.model.acomplete([{"role": "user", "content": f"summarise: {note}"}])
    longterm.save(f"summary/{count:04d}", summary.text.encode())
    label = await ctx.model.acomplete([{"role": "user", "content": f"classify: {note}"}])
    longterm.save("profile", json.dumps({"label": label.text, "n": count},
                                        sort_keys=True).encode())
    ctx.emit("consulted", {"n": count, "summary": summary.text, "label": label.text})


def recall(ctx: AgentContext) -> None:
    """Saves the note, then reads and extends its working-memory history ring.

    The save comes first, so a corrupt ring (found only when it is read) fails
    the activation after it staged a long-term upsert.
    """
    note = ctx.payload.decode()
    count = int(ctx.memory.get("n") or b"0") + 1
    ctx.memory.set("n", str(count).encode())
    ctx.memory.longterm.save(f"note/{count:04d}", note.encode())
    history = ctx.memory.ring("history")
    ctx.memory.append("history", note.encode(), max_items=8)
    ctx.emit("recalled", {"n": count, "history": len(history) + 1})


async def save_in_background_then_fail(ctx: AgentContext) -> None:
    """Saves one record in the foreground and one in the background, then raises."""

    async def late_value() -> bytes:
        await asyncio.sleep(0.01)
        return b"computed late"

    longterm = ctx.memory.longterm
    longterm.save("foreground", ctx.payload)
    longterm.save_in_background("background", late_value())
    await asyncio.sleep(0)
    raise RuntimeError("failing after staging a foreground and a background save")
