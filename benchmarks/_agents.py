"""The agents the pipeline and soak benchmarks run, referenced as ``benchmarks._agents:NAME``.

They are small on purpose: the benchmarks measure what the library adds
around an agent, so the agent itself does what a typical one does and no more.
"""

from __future__ import annotations

from beam_agents.memory import LruCompactor, Memory
from beam_agents.runtime import AgentContext, agent, tool

__all__ = ["CountingCompactor", "chat", "chat_async", "grow", "slow_reply"]

_SOAK_ITEM = b"i" * 1_000
_SOAK_VALUE = b"v" * 6_000


def chat(ctx: AgentContext) -> None:
    """The README's agent: keep a bounded conversation and a counter, ask the model, reply."""
    text = ctx.payload.decode()
    ctx.memory.append("conversation", text.encode(), max_items=20)
    turns = int(ctx.memory.get("turns") or b"0") + 1
    ctx.memory.set("turns", str(turns).encode())
    reply = ctx.model.complete([{"role": "user", "content": text}])
    ctx.emit("reply", {"text": reply.text, "turns": turns})


async def chat_async(ctx: AgentContext) -> None:
    """`chat`, written async: the same work without the sync agent's thread hand-offs."""
    text = ctx.payload.decode()
    ctx.memory.append("conversation", text.encode(), max_items=20)
    turns = int(ctx.memory.get("turns") or b"0") + 1
    ctx.memory.set("turns", str(turns).encode())
    reply = await ctx.model.acomplete([{"role": "user", "content": text}])
    ctx.emit("reply", {"text": reply.text, "turns": turns})


async def grow(ctx: AgentContext) -> None:
    """Grows working memory without limit: an unbounded ring and a new key every event.

    Only the compactor keeps it bounded (B4). Each event also asks the model,
    so the replay cache fills up to its own bounds.
    """
    ctx.memory.append("log", _SOAK_ITEM, max_items=1_000_000)
    ctx.memory.set(f"note:{ctx.seq}", _SOAK_VALUE)
    await ctx.model.acomplete([{"role": "user", "content": f"event {ctx.seq}"}])


async def slow_reply(ctx: AgentContext) -> None:
    """One model call per event, nothing else: the model's latency is the whole cost (B6)."""
    reply = await ctx.model.acomplete([{"role": "user", "content": ctx.payload.decode()}])
    ctx.emit("reply", {"text": reply.text})


@tool
def order_status(order_id: str) -> dict[str, str]:
    """An order's status, computed at once: the tool's own cost is nothing (B7).

    Args:
        order_id: The order's id.
    """
    return {"order_id": order_id, "status": "shipped"}


@agent(tools=[order_status])
async def one_tool_call(ctx: AgentContext) -> None:
    """One durable tool call per event and no model call: its cost is the call's record (B7)."""
    assert ctx.tools is not None
    ctx.emit("order", await ctx.tools.acall("order_status", {"order_id": ctx.payload.decode()}))


class CountingCompactor:
    """The default `LruCompactor`, counting how often the facade calls it."""

    def __init__(self) -> None:
        self._inner = LruCompactor()
        self.calls = 0

    def compact(self, memory: Memory) -> None:
        """Count, then compact exactly as the default compactor does."""
        self.calls += 1
        self._inner.compact(memory)
