"""What a history-driven agent would have sent, rebuilt from a task's events.

The usual agent loop appends every user message, every model reply and every full
tool output to one message list and sends all of it at each decision. The event
log holds exactly those pieces (tool outputs as artifacts), so the transcript can
be rebuilt after the fact and counted with the same tokenizer as the state views:
the comparison the demos print is measured, not assumed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from skillstate.engine.agent import Agent
from skillstate.errors import ArtifactNotFound
from skillstate.llm.tokens import count_tokens
from skillstate.store.base import Store

__all__ = ["DecisionTokens", "compare_prompts", "history_messages"]


@dataclass(frozen=True)
class DecisionTokens:
    """Prompt sizes of one decision under both context strategies."""

    version: int
    state_view: int
    history: int


def _system_prompt(agent: Agent) -> str:
    lines = [f"You are the {agent.name} agent. {agent.description}".strip(), "Skills:"]
    lines += [
        f"- {s.name}({', '.join(s.params.model_fields)}): {s.description}" for s in agent.skills
    ]
    lines.append("Reply with one JSON action.")
    return "\n".join(lines)


def history_messages(store: Store, task_id: str, agent: Agent) -> list[list[dict[str, str]]]:
    """The message list as it stood before each decision, one list per decision."""
    first = store.checkpoint(task_id, 1).state
    opening = f"Goal: {first.get('goal', '')}\nConstraints:\n" + "\n".join(
        f"- {c}" for c in first.get("constraints", [])
    )
    messages = [
        {"role": "system", "content": _system_prompt(agent)},
        {"role": "user", "content": opening},
    ]
    prompts: list[list[dict[str, str]]] = []
    for event in store.events(task_id):
        kind = event.action.get("kind")
        if kind == "reply":
            messages.append({"role": "user", "content": str(event.action.get("text", ""))})
        elif event.actor == "policy":
            prompts.append(list(messages))
            messages.append({"role": "assistant", "content": json.dumps(event.action)})
            for call in event.tool_calls:
                messages.append({"role": "tool", "content": _raw(store, call.ref, call.summary)})
    return prompts


def compare_prompts(store: Store, task_id: str, agent: Agent) -> list[DecisionTokens]:
    """Per decision: the state view's tokens (as recorded) and the transcript's."""
    decisions = [e for e in store.events(task_id) if e.actor == "policy"]
    prompts = history_messages(store, task_id, agent)
    out = []
    for event, messages in zip(decisions, prompts, strict=True):
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        out.append(DecisionTokens(event.version, event.view_tokens or 0, count_tokens(text)))
    return out


def _raw(store: Store, ref: str | None, fallback: str) -> str:
    if ref is None:
        return fallback
    try:
        return store.get_artifact(ref).decode("utf-8", errors="replace")
    except ArtifactNotFound:
        return fallback
