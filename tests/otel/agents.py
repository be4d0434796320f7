"""Agents the tracing tests run by reference ("tests.otel.agents:NAME")."""

from __future__ import annotations

from beam_agents.runtime import AgentContext, agent, tool


@tool
def lookup(order_id: str) -> dict[str, str]:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    return {"order_id": order_id, "status": "shipped"}


@agent(tools=[lookup])
async def traced(ctx: AgentContext) -> None:
    """A tool call, a model call, the same call again (replayed from the cache), another one."""
    assert ctx.tools is not None
    order = await ctx.tools.acall("lookup", {"order_id": ctx.payload.decode()})
    question = [{"role": "user", "content": f"order {order['order_id']} is {order['status']}"}]
    first = await ctx.model.acomplete(question)
    again = await ctx.model.acomplete(question)
    other = await ctx.model.acomplete([{"role": "user", "content": "and then?"}])
    ctx.emit("reply", {"text": first.text, "again": again.cached, "other": other.text})


async def once(ctx: AgentContext) -> None:
    """One model call and one intent."""
    reply = await ctx.model.acomplete([{"role": "user", "content": ctx.payload.decode()}])
    ctx.emit("reply", reply.text)
