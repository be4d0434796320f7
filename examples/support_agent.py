"""A customer-support agent: the main job's example.

Per customer (the entity key) it keeps:

* ``conversation``: a bounded ring of the last 20 turns (user and assistant);
* ``profile``: a scalar JSON profile (name, plan, message count);
* ``doc:<event id>``: attachments a customer sends, which is what makes a
  heavy customer's memory cross the soft cap, where the default
  `LruCompactor` evicts the oldest attachments.

Each message is answered through ``ctx.model`` (replay-cached, so a retried
activation never pays twice) and emitted as a ``reply`` intent. With
long-term memory configured, the profile is also saved there, so it outlives
the bounded working memory. The save is computed from the event and working
memory only, never from a long-term read of the same key (the replay
discipline of seed 000).

Input payloads are JSON objects: ``{"text": "...", "name": "...",
"plan": "...", "attachment": "..."}``; all but ``text`` are optional. The text
``/crash`` makes the agent raise, to show a dead letter.
"""

from __future__ import annotations

import json
from typing import Any

from beam_agents.runtime import AgentContext

HISTORY_TURNS = 20


class UnsupportedCommandError(ValueError):
    """The customer sent a command this agent does not handle."""


def _profile(ctx: AgentContext) -> dict[str, Any]:
    raw = ctx.memory.get("profile")
    return json.loads(raw) if raw else {"messages": 0}


def agent(ctx: AgentContext) -> None:
    """Answer one customer message."""
    message = ctx.payload_json()
    text = str(message.get("text", ""))
    if text.startswith("/crash"):
        raise UnsupportedCommandError(f"command {text!r} is not supported")

    profile = _profile(ctx)
    for field in ("name", "plan"):
        if field in message:
            profile[field] = message[field]
    profile["messages"] += 1
    ctx.memory.set("profile", json.dumps(profile, sort_keys=True).encode())
    if "attachment" in message:
        ctx.memory.set(f"doc:{ctx.event.event_id}", str(message["attachment"]).encode())

    ctx.memory.append("conversation", json.dumps({"role": "user", "content": text}).encode(),
                      max_items=HISTORY_TURNS)
    history = [json.loads(turn) for turn in ctx.memory.ring("conversation")]
    who = profile.get("name", "a customer")
    system = {"role": "system",
              "content": f"You are a support agent helping {who} on the "
                         f"{profile.get('plan', 'free')} plan. Be brief."}
    reply = ctx.model.complete([system, *history], temperature=0.2, max_tokens=200)
    ctx.memory.append("conversation",
                      json.dumps({"role": "assistant", "content": reply.text}).encode(),
                      max_items=HISTORY_TURNS)

    if ctx.memory.has_longterm:
        ctx.memory.longterm.save("profile", json.dumps(profile, sort_keys=True).encode())
    ctx.emit("reply", {"customer": ctx.entity_key.decode(errors="replace"), "text": reply.text,
                       "turns": len(history)})

