"""What a history-driven agent would have sent, rebuilt from a task's events.

The usual agent loop appends every user message, every model reply and every full
tool output to one message list and sends all of it at each decision. The event
log holds exactly those pieces (tool outputs as artifacts), so the transcript can
be rebuilt after the fact and counted with the same tokenizer as the state views:
the comparison the demos print is measured, not assumed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from skillstate.engine.agent import Agent
from skillstate.errors import ArtifactNotFound, SkillstateError
from skillstate.events import Event, TokenUsage
from skillstate.llm.base import Message
from skillstate.llm.tokens import count_tokens
from skillstate.state.redact import Redactor
from skillstate.store.base import Store
from skillstate.store.sealing import read_artifact

__all__ = [
    "DecisionTokens",
    "compare_prompts",
    "conversation",
    "decision_usage",
    "history_messages",
]


@dataclass(frozen=True)
class DecisionTokens:
    """Prompt sizes of one decision under both context strategies."""

    version: int
    state_view: int
    history: int


def _system_prompt(agent: Agent[Any]) -> str:
    lines = [f"You are the {agent.name} agent. {agent.description}".strip(), "Skills:"]
    lines += [
        f"- {s.name}({', '.join(s.params.model_fields)}): {s.description}" for s in agent.skills
    ]
    lines.append("Reply with one JSON action.")
    return "\n".join(lines)


def _opening(store: Store, task_id: str) -> list[Message]:
    head = store.load(task_id).state  # goal and constraints never change
    text = f"Goal: {head.get('goal', '')}\nConstraints:\n" + "\n".join(
        f"- {c}" for c in head.get("constraints", [])
    )
    return [Message("user", text)]


def _fold(store: Store, messages: list[Message], event: Event) -> list[Message]:
    """The conversation after ``event``: its reply, decision and full tool outputs added."""
    added: list[Message] = []
    kind = event.action.get("kind")
    if kind == "reply":
        added.append(Message("user", str(event.action.get("text", ""))))
    elif kind == "inbox":  # messages sent while the task ran (control.inbox)
        for sent in event.action.get("messages") or ():
            added.append(Message("user", str(sent.get("text", ""))))
    elif event.actor == "policy" and kind not in {None, "invalid"}:
        added.append(Message("assistant", json.dumps(event.action)))
    for call in event.tool_calls:
        added.append(
            Message("user", f"[{call.tool} output]\n{_raw(store, call.ref, call.summary)}")
        )
    return [*messages, *added] if added else messages


def _walk(store: Store, task_id: str) -> Iterator[tuple[Event, list[Message]]]:
    """Each event with the conversation as it stood just before it.

    The conversation opens with the goal and the constraints (stated once, as a user
    would), then grows by every reply (user), every decision (assistant) and every
    full tool output, fetched from the artifact store (user, labelled by tool).
    """
    messages = _opening(store, task_id)
    for event in store.events(task_id):
        yield event, messages
        messages = _fold(store, messages, event)


def conversation(store: Store, task_id: str, *, redactor: Redactor | None = None) -> list[Message]:
    """The whole conversation of a task so far (what :class:`HistoryPolicy` sends).

    ``redactor`` masks what the stored pieces may still hold for the *current* card:
    a tool output stored before the step that made its token a secret.
    """
    messages = _opening(store, task_id)
    for event in store.events(task_id):
        messages = _fold(store, messages, event)
    if redactor is None:
        return messages
    return [Message(m.role, redactor.text(m.content)) for m in messages]


def history_messages(store: Store, task_id: str, agent: Agent[Any]) -> list[list[dict[str, str]]]:
    """The message list as it stood before each decision, one list per decision."""
    system = Message("system", _system_prompt(agent))
    return [
        [m.as_dict() for m in (system, *before)]
        for event, before in _walk(store, task_id)
        if event.actor == "policy"
    ]


def compare_prompts(store: Store, task_id: str, agent: Agent[Any]) -> list[DecisionTokens]:
    """Per decision: the state view's tokens and the transcript's.

    A decision no model made (a scripted policy) recorded no view size: its view is
    rendered again from the version it was decided on, and counted.
    """
    decisions = [e for e in store.events(task_id) if e.actor == "policy"]
    prompts = history_messages(store, task_id, agent)
    out = []
    for event, messages in zip(decisions, prompts, strict=True):
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        view = event.view_tokens
        if view is None:
            view = _view_tokens_at(store, task_id, agent, event.version - 1) or 0
        out.append(DecisionTokens(event.version, view, count_tokens(text)))
    return out


def decision_usage(store: Store, task_id: str, agent: Agent[Any] | None) -> list[Event]:
    """Every decision's event with its usage: as recorded when a model decided.

    A decision no model made recorded none (nothing was spent, nothing counted at
    run time); with the agent known, it gets an estimate here: the tokens of the
    view it was decided on and of the action, as one model call would have used.
    """
    out = []
    for event in store.events(task_id):
        if event.usage is not None:
            out.append(event)
            continue
        if event.actor != "policy" or agent is None:
            continue
        prompt = event.view_tokens
        if prompt is None:
            prompt = _view_tokens_at(store, task_id, agent, event.version - 1)
        if prompt is None:
            continue
        reply = count_tokens(json.dumps(event.action, ensure_ascii=False))
        usage = TokenUsage(prompt=prompt, completion=reply, estimated=True)
        out.append(event.model_copy(update={"usage": usage}))
    return out


def _view_tokens_at(store: Store, task_id: str, agent: Agent[Any], version: int) -> int | None:
    """Tokens of the view of ``version``, rendered again (``None``: version pruned)."""
    try:
        document = store.checkpoint(task_id, version).state
    except SkillstateError:
        return None
    return agent.view(agent.parse_state(document, task_id=task_id)).tokens


def _raw(store: Store, ref: str | None, fallback: str) -> str:
    if ref is None:
        return fallback
    try:
        return read_artifact(store, ref).decode("utf-8", errors="replace")
    except ArtifactNotFound:
        return fallback
