"""The text of a view: its sections, and hiding the lowest-priority lines to fit a budget.

:func:`trimmed` renders a card as the prompt view (see :mod:`skillstate.state.view`
for what a view is): sections in priority order, and under a token budget the
lowest-priority lines hidden first, each hidden kind leaving a marker, with the
overrun reported when even that is not enough (:mod:`skillstate.state.budget`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from skillstate.fanout.view import children_lines, children_section
from skillstate.memory.view import memory_section, recalled_lines
from skillstate.shared.view import SharedLine, shared_lines, shared_section
from skillstate.skills.binding import BoundParams, FromState, OneOf, bindings
from skillstate.state.budget import PRIORITIES, Fitted, Hideable, field_priorities, fit
from skillstate.state.model import AgentState, StepRecord, UserMessage
from skillstate.state.rejected import holding, until
from skillstate.state.secrets import MASK, sensitive_fields
from skillstate.templates.hint import hint_lines

if TYPE_CHECKING:
    from skillstate.skills.skill import Skill

__all__ = [
    "PEEK_CHARS",
    "RECENT_EVIDENCE",
    "RECENT_STEPS",
    "VALUE_CHARS",
    "Peek",
    "Rendered",
    "peek_lines",
    "signature",
    "trimmed",
]

T = TypeVar("T")

RECENT_STEPS = 5
RECENT_EVIDENCE = 5
VALUE_CHARS = 200
PEEK_CHARS = 4000
"""Characters of a loaded artifact (``load_evidence``) the next view shows at most."""
SHORT_REF = 19
"""How much of a ref the view shows (``sha256:`` and 12 hex digits): enough to name it."""


class Peek(NamedTuple):
    """Raw evidence shown to one decision (see :attr:`View.peek`)."""

    ref: str
    text: str | None
    """The artifact's text, masked, cut to the view's limit (``None``: not readable
    here: no store at hand, or no longer in it)."""
    chars: int
    """Characters of the whole artifact (``text`` may be the first part of it)."""

    @property
    def truncated(self) -> bool:
        return self.text is not None and len(self.text) < self.chars


class Rendered(NamedTuple):
    """A view's text as rendered: tokens if counted, what the budget hid, the overrun."""

    text: str
    tokens: int | None
    dropped: tuple[str, ...]
    overrun: int | None


def signature(skill: Skill[Any, Any], bind: bool) -> str:
    """The params a decision gives, as the system prompt lists them (bound ones left out)."""
    bound = bindings(skill.params) if bind else {}
    return ", ".join(
        n for n in skill.params.model_fields if not isinstance(bound.get(n), FromState)
    )


def _call_line(skill: Skill[Any, Any], decision: BoundParams) -> str:
    """``- name(params): description``, bound values shown as ``i=3 (from next_record)``."""
    marks = bindings(skill.params) if decision.values else {}
    shown = [
        f"{n}={json.dumps(decision.values[n], ensure_ascii=False)} "
        f"(from {marks[n].describe() if isinstance(marks[n], FromState) else 'the only choice'})"
        if n in decision.values
        else n
        for n in skill.params.model_fields
    ]
    choices = [
        f"{n} one of {list(getattr(f.annotation, '__args__', ()))}"
        for n, f in decision.model.model_fields.items()
        if isinstance(bindings(skill.params).get(n), OneOf)
    ]
    params = ", ".join(shown) or "no params"
    extra = f" [{'; '.join(choices)}]" if choices else ""
    return f"- {skill.name}({params}): {skill.description}{extra}"


def trimmed(
    state: AgentState,
    applicable: Sequence[Skill[Any, Any]],
    decisions: Mapping[str, BoundParams],
    next_steps: tuple[str, ...],
    *,
    budget: int | None,
    value_chars: int,
    peek: Sequence[str] = (),
) -> Rendered:
    evidence = state.evidence[-RECENT_EVIDENCE:]
    tried = state.tried
    steps = state.completed_steps[-RECENT_STEPS:]
    fields = _fields(state, applicable, value_chars)
    # Rendered once however often the budget re-renders (thousands for a large library).
    calls = [_call_line(s, decisions[s.name]) for s in applicable]
    rejected = _rejected_lines(state, applicable)  # digests computed once, not per re-render
    recalled = recalled_lines(state, value_chars)  # cross-task memory (issue 27)
    shared = shared_lines(state, value_chars)  # shared records (issue 28)
    hint = _template_lines(state)
    kids = children_lines(state, value_chars)  # fan-out (issue 28)

    def build(hidden: Collection[tuple[str, int]]) -> str:
        def kept(group: str, items: Sequence[T]) -> list[T]:
            return [item for i, item in enumerate(items) if (group, i) not in hidden]

        shown = kept("fields", fields)
        counts = {
            "evidence": len(evidence) - len(kept("evidence", evidence)),
            "tried": len(tried) - len(kept("tried", tried)),
            "facts": sum(f.fact for f in fields) - sum(f.fact for f in shown),
            "fields": sum(not f.fact for f in fields) - sum(not f.fact for f in shown),
            "template": len(hint[1]) - len(kept("template", hint[1])),
            "memory": len(recalled) - len(kept("memory", recalled)),
            "children": len(kids) - len(kept("children", kids)),
        }
        return _render(
            state,
            applicable,
            decisions,
            next_steps=next_steps,
            evidence=kept("evidence", evidence),
            tried=kept("tried", tried),
            steps=kept("steps", steps),
            fields=shown,
            hidden=counts,
            peek=peek,
            calls=calls,
            rejected=rejected,
            value_chars=value_chars,
            template=(hint[0], kept("template", hint[1])),
            memory=kept("memory", recalled),
            children=kept("children", kids),
            shared=kept("shared", shared),
        )

    if budget is None:
        return Rendered(build(()), None, (), None)
    items = _hideable(state, evidence, tried, steps, fields)
    # The template's hint (issue 27): its last entries go first, the next one last.
    items += [
        Hideable("template", i, PRIORITIES["template"], -i, line, "template")
        for i, line in enumerate(hint[1])
    ]
    # Facts recalled from other tasks (issue 27): the least recent (listed last) go first.
    items += [
        Hideable("memory", i, PRIORITIES["memory"], -i, line, "memory")
        for i, line in enumerate(recalled)
    ]
    items += [  # shared records (issue 28): the last field of a record goes first
        Hideable("shared", i, PRIORITIES["shared"], -i, s.text, "shared")
        for i, s in enumerate(shared)
    ]
    items += [  # a parent's children (issue 28): the oldest go first
        Hideable("children", i, PRIORITIES["children"], i, line, "children")
        for i, line in enumerate(kids)
    ]
    fitted: Fitted = fit(build, items, budget)
    return Rendered(fitted.text, fitted.tokens, fitted.dropped, fitted.overrun)


def _hideable(
    state: AgentState,
    evidence: Sequence[Any],
    tried: Sequence[Any],
    steps: Sequence[StepRecord],
    fields: Sequence[_Field],
) -> list[Hideable]:
    """What the budget may hide, each with its priority (:mod:`skillstate.state.budget`)."""
    items = [
        Hideable("evidence", i, PRIORITIES["evidence"], i, _evidence_line(e), "evidence")
        for i, e in enumerate(evidence)
    ]
    items += [
        Hideable("tried", i, PRIORITIES["tried"], i, _tried(t) + "; ", "tried")
        for i, t in enumerate(tried)
    ]
    items += [
        Hideable("steps", i, PRIORITIES["steps"], i, s.id + ", ", "steps")
        for i, s in enumerate(steps)
    ]
    declared = field_priorities(type(state))
    for i, f in enumerate(fields):
        line = f"- {f.name}: {f.text}"
        if f.fact:  # oldest first
            items.append(Hideable("fields", i, PRIORITIES["facts"], i, line, f"facts.{f.name}"))
        else:  # declaration order is the author's: the last declared goes first
            priority = declared.get(f.name, PRIORITIES["fields"])
            items.append(Hideable("fields", i, priority, -i, line, f.name))
    return items


def _render(
    state: AgentState,
    applicable: Sequence[Skill[Any, Any]],
    decisions: Mapping[str, BoundParams],
    *,
    next_steps: Sequence[str],
    evidence: Sequence[Any],
    tried: Sequence[Any],
    steps: Sequence[Any],
    fields: Sequence[_Field],
    hidden: Mapping[str, int] | None = None,
    peek: Sequence[str] = (),
    calls: Sequence[str] | None = None,
    rejected: Sequence[str] | None = None,
    value_chars: int = VALUE_CHARS,
    template: tuple[str, Sequence[str]] | None = None,
    memory: Sequence[str] | None = None,
    children: Sequence[str] | None = None,
    shared: Sequence[SharedLine] | None = None,
) -> str:
    """The view's text; ``hidden`` counts what the budget hid, by kind (a marker each)."""
    hidden = hidden or {}
    lines = [f"## Task {state.task_id}", f"Goal: {state.goal or '(none)'}"]
    if state.constraints:
        lines.append("Constraints (hard rules, always apply):")
        lines += [f"- {c}" for c in state.constraints]
    lines.append(f"Status: {state.status.value} | step: {state.current_step}")
    # An interrupting message comes before everything else the decision reads.
    lines += [_message_line(m) for m in state.messages if m.urgent]
    if next_steps:
        lines.append(f"Allowed next steps: {', '.join(next_steps)}")
    done = ", ".join(s.id for s in steps)
    earlier = state.step_count - len(steps)
    if earlier:
        done = f"({earlier} earlier)" + (f" {done}" if done else "")
    lines.append(f"Completed: {done or 'none'}")
    if state.pending_steps:
        lines.append(f"Pending: {', '.join(state.pending_steps)}")
    lines += _template_section(state, template, hidden.get("template", 0))
    lines += _facts_lines(fields, hidden)
    recalled = memory if memory is not None else recalled_lines(state, value_chars)
    lines += memory_section(recalled, hidden.get("memory", 0))
    kids = children if children is not None else children_lines(state, value_chars)
    lines += children_section(kids, hidden.get("children", 0))
    lines += shared_section(state, shared_lines(state, value_chars), shared)
    if state.last_decision:
        d = state.last_decision
        target = f" {d.target}" if d.target else ""
        lines.append(f"Last decision: {d.action}{target}" + (f" ({d.reason})" if d.reason else ""))
    lines += _evidence_lines(evidence, hidden.get("evidence", 0))
    lines += peek
    lines += _signal_lines(state, value_chars)
    for loaded in state.skill_instructions:  # a SKILL.md skill loaded them: follow them
        lines.append(f"Instructions loaded by {loaded.skill} (follow them):")
        lines.append(loaded.text)
    lines += _tried_lines(tried, hidden.get("tried", 0))
    lines += rejected if rejected is not None else _rejected_lines(state, applicable)
    if applicable:
        lines.append("Skills you can call now:")
        lines += (
            calls if calls is not None else [_call_line(s, decisions[s.name]) for s in applicable]
        )
    if state.question:
        lines.append(f"Open question: {state.question}")
    for reply in state.inputs:
        lines.append(f"User input #{reply.index + 1}: {reply.text}")
    lines += [_message_line(m) for m in state.messages if not m.urgent]
    return "\n".join(lines)


def _template_lines(state: AgentState) -> tuple[str, list[str]]:
    """The header of the template hint's section and its entry lines (none: no hint)."""
    hint = getattr(state, "template", None)
    if hint is None:
        return "", []
    hidden = sensitive_fields(type(state))

    def lookup(path: str) -> tuple[bool, Any]:
        top, _, rest = path.partition(".")
        if top not in type(state).model_fields:
            return False, None
        if top in hidden:
            return True, MASK
        value = getattr(state, top)
        for part in rest.split(".") if rest else ():
            if not isinstance(value, Mapping) or part not in value:
                return False, None
            value = value[part]
        return True, value

    return hint_lines(hint, lookup)


def _template_section(
    state: AgentState, template: tuple[str, Sequence[str]] | None, hidden: int
) -> list[str]:
    header, lines = template if template is not None else _template_lines(state)
    if not header:
        return []
    more = [f"- ({hidden} later hinted steps hidden by the view budget)"] if hidden else []
    return [header, *lines, *more]


def _message_line(message: UserMessage) -> str:
    """A message sent while the task ran (control.inbox), as the view shows it once."""
    who = f" from {message.actor}" if message.actor else ""
    if not message.urgent:
        return f"Message{who} (sent while the task ran): {message.text}"
    asked = f" (it interrupts your question: {message.interrupted})" if message.interrupted else ""
    return f"URGENT message{who}, read this first{asked}: {message.text}"


class _Field(NamedTuple):
    """A line of the view's Facts section: a typed field or a fact."""

    name: str
    text: str
    fact: bool


def _facts_lines(fields: Sequence[_Field], hidden: Mapping[str, int]) -> list[str]:
    """The Facts section; what the budget hid is counted (``2 more fields and 1 more fact``)."""
    cut = " and ".join(
        f"{n} more {kind}{'s' if n > 1 else ''}"
        for kind in ("field", "fact")
        if (n := hidden.get(kind + "s", 0))
    )
    if not fields and not cut:
        return []
    more = [f"- ({cut} hidden by the view budget)"] if cut else []
    return ["Facts:", *(f"- {f.name}: {f.text}" for f in fields), *more]


def _evidence_lines(evidence: Sequence[Any], hidden: int) -> list[str]:
    if not evidence and not hidden:
        return []
    more = [f"- ({hidden} older hidden by the view budget)"] if hidden else []
    return ["Evidence:", *(_evidence_line(e) for e in evidence), *more]


def _tried_lines(tried: Sequence[Any], hidden: int) -> list[str]:
    if not tried and not hidden:
        return []
    more = [f"({hidden} more hidden)"] if hidden else []
    return ["Already tried without progress: " + "; ".join([*(_tried(t) for t in tried), *more])]


def peek_lines(peek: Peek | None) -> list[str]:
    """The raw evidence a ``load_evidence`` decision asked to see, as the next view shows it."""
    if peek is None:
        return []
    short = peek.ref[:SHORT_REF]
    if peek.text is None:
        return [f"Raw evidence {short} was asked for, but it cannot be read here"]
    size = (
        f"the first {len(peek.text):,} of {peek.chars:,} characters"
        if peek.truncated
        else f"{peek.chars:,} characters"
    )
    return [
        f"Raw evidence {short} ({size}, masked), as you asked; shown to this decision only:",
        peek.text,
        "(end of raw evidence)",
    ]


def _fields(
    state: AgentState, applicable: Sequence[Skill[Any, Any]], limit: int = VALUE_CHARS
) -> list[_Field]:
    """Typed custom fields and facts. If every applicable skill declares ``reads``,
    only the facts they read are shown."""
    reads: set[str] | None = None
    if applicable and all(s.reads for s in applicable):
        reads = {r for s in applicable for r in s.reads}
    out: list[_Field] = []
    # A sensitive value is shown as *** (never to a model), but shown: the policy
    # may need to know that a token is there.
    hidden = sensitive_fields(type(state))
    for name in state.custom_fields():
        value = getattr(state, name)
        if value is None or (reads is not None and name not in reads):
            continue
        out.append(_Field(name, MASK if name in hidden else _short(value, limit), False))
    for key, value in state.facts.items():
        if reads is not None and f"facts.{key}" not in reads and key not in reads:
            continue
        out.append(_Field(key, _short(value, limit), True))
    return out


def _signal_lines(state: AgentState, limit: int) -> list[str]:
    """The payload of the latest signal of each name a wait received."""
    return [
        f"Signal received: {name} {_short(received.data, limit)}"
        for name, received in state.signals.items()
        if received.data is not None
    ]


def _rejected_lines(state: AgentState, applicable: Sequence[Skill[Any, Any]]) -> list[str]:
    """Calls of the skills offered now that were judged wrong and still hold (issue 26):
    unlike ``tried``, they outlive unrelated progress (:mod:`skillstate.engine.rejections`)."""
    if not state.rejected or not applicable:
        return []
    return [
        f"Rejected earlier (until {until(r)}): {r.shown} -> {r.reason}"
        + (" [an identical call is refused]" if r.permanent else "")
        for r in holding(state, [s.name for s in applicable])
    ]


def _tried(t: Any) -> str:
    times = f" ({t.times}x)" if t.times > 1 else ""
    return f"{t.action}{times} -> {t.reason}"


def _evidence_line(e: Any) -> str:
    # A short ref prefix is enough for a human to match it in `skillstate log`.
    ref = f" ({e.ref[:19]})" if e.ref else ""
    return f"- [{e.source}] {e.summary}{ref}"


def _short(value: Any, limit: int = VALUE_CHARS) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
