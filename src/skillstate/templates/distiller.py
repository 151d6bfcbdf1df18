"""Distilling a finished task into a template: its verified steps, generalised.

The plan is read from the store alone (the event log, folded from its patches), so it
works on any backend, after the fact. Only steps that *stayed* are kept:

* a step is a committed skill call: an event that added a ``call_skill`` record to
  ``completed_steps`` (its verify passed; a failed attempt adds none);
* a rollback (``skillstate rollback --to V``) drops the steps committed after ``V``;
* a stale step (its world changed, ``recheck``) is dropped: the task re-ran it later
  under a new step id if it needed it;
* a forked task starts with its source's steps up to the fork point.

What each param was (a value the task was given, one the card held, one read out of
a tool's output, a secret) is decided by :class:`~skillstate.templates.generalise.Generaliser`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skillstate.engine.agent import Agent
from skillstate.engine.history import step_records
from skillstate.errors import ArtifactNotFound, StateError, StoreError, UsageError
from skillstate.events import Event
from skillstate.skills.binding import FromState, bindings
from skillstate.state.diff import apply_patch
from skillstate.state.model import AgentState, StepRecord
from skillstate.state.secrets import sensitive_fields
from skillstate.store.base import Store
from skillstate.templates.generalise import Generaliser
from skillstate.templates.model import PlanStep, Source, Template

__all__ = ["distill"]

MAX_FORKS = 8
"""Forks followed back to their source at most (a longer chain is refused)."""


@dataclass(frozen=True)
class _Call:
    """A committed skill call and the card (as stored) right before it."""

    version: int
    record: StepRecord
    params: dict[str, Any]
    before: dict[str, Any]


@dataclass(frozen=True)
class _History:
    calls: list[_Call]
    initial: dict[str, Any]
    replies: list[tuple[int, int, str]]
    """(version, reply index, text) of each reply the task kept."""


def distill(store: Store, task_id: str, agent: Agent[Any], *, name: str | None = None) -> Template:
    """The template of the completed task ``task_id`` run by ``agent`` (see the module).

    Raises a one-line :class:`~skillstate.errors.UsageError` for a task that is not
    completed, and :class:`~skillstate.errors.TaskNotFound` for one that is not there.
    """
    head = store.load(task_id)
    status = head.state.get("status")
    if status != "completed":
        raise UsageError(
            f"task {task_id!r} is {status}, not completed: only a finished task can be "
            "distilled into a template"
        )
    history = _history(store, task_id, head.version, forks=0)
    state_type: type[AgentState] = agent.state_type
    hidden = sensitive_fields(state_type)
    gen = Generaliser(agent.redaction.redactor(), hidden)
    fields = _given_fields(gen, state_type, history.initial)
    goal = str(head.state.get("goal") or "")
    constraints = [str(c) for c in head.state.get("constraints") or ()]
    quoted = "\n".join([goal, *constraints])
    for _, number, text in history.replies:
        if _reappears(text, history.calls) or gen.quoted(text, quoted):
            gen.add(f"reply_{number + 1}", text, origin=f"reply {number + 1}")
    for call in history.calls:
        for key, value in call.params.items():
            if _specific(value) and gen.quoted(value, quoted):
                gen.add(key, value, origin=f"goal (used by {call.record.skill}.{key})")
    plan = [
        PlanStep(
            skill=str(call.record.skill),
            params=gen.params(
                str(call.record.skill),
                call.params,
                _searchable(call.before, state_type),
                _bound(agent, call),
            ),
            step=call.record.step,
        )
        for call in history.calls
    ]
    definition = head.state.get("definition")
    return Template(
        name=name or f"{agent.name}-from-{task_id}",
        source=Source(
            task=task_id,
            version=head.version,
            agent=head.state.get("agent"),
            definition=definition,
        ),
        goal=gen.text(goal),
        constraints=tuple(gen.text(c) for c in constraints),
        fields={name: "{{" + param + "}}" for name, param in fields.items()},
        parameters=dict(gen.parameters),
        skills=_manifest_skills(store, agent, definition, {s.skill for s in plan}),
        plan=tuple(plan),
        path=_path(history, head.state),
    )


# ---------------------------------------------------------------- reading the log


def _history(store: Store, task_id: str, until: int, *, forks: int) -> _History:
    """The verified calls of ``task_id`` up to version ``until``, its first card and the
    replies it received."""
    events = [e for e in store.events(task_id) if e.version <= until]
    calls: list[_Call] = []
    replies: list[tuple[int, int, str]] = []
    initial: dict[str, Any] | None = None
    doc: dict[str, Any] = {}
    for event in events:
        kind = event.action.get("kind")
        if kind == "fork" and event.version == 1:
            if forks >= MAX_FORKS:
                raise UsageError(
                    f"task {task_id!r} descends from more than {MAX_FORKS} forks; distill "
                    "an earlier task of the chain"
                )
            parent = _history(
                store,
                str(event.action.get("from_task")),
                int(event.action.get("from_version") or 0),
                forks=forks + 1,
            )
            calls, replies, initial = list(parent.calls), list(parent.replies), parent.initial
            doc = store.checkpoint(task_id, 1).state if _kept(store, task_id, 1) else {}
            continue
        if kind == "rollback":
            target = int(event.action.get("to_version") or 0)
            calls = [c for c in calls if c.version <= target]
            replies = [r for r in replies if r[0] <= target]
        elif kind == "recheck":
            stale = set(event.action.get("stale") or ())
            calls = [c for c in calls if c.record.id not in stale]
        elif kind == "reply" and "into" not in event.action:  # a secret reply is no input
            index, text = int(event.action.get("index") or 0), str(event.action.get("text"))
            replies.append((event.version, index, text))
        for record in step_records([event]):
            if record.action == "call_skill" and record.skill:
                calls.append(_Call(event.version, record, _params(event), doc))
        doc = _apply(store, task_id, doc, event)
        if initial is None:
            initial = doc
    return _History(calls, initial or {}, replies)


def _apply(store: Store, task_id: str, doc: dict[str, Any], event: Event) -> dict[str, Any]:
    """The stored card after ``event``: its patch applied, or its checkpoint if kept."""
    try:
        return apply_patch(doc, event.patch)
    except StateError:
        pass
    try:
        return store.checkpoint(task_id, event.version).state
    except StoreError:
        raise UsageError(
            f"cannot rebuild version {event.version} of task {task_id!r} from its event log"
        ) from None


def _kept(store: Store, task_id: str, version: int) -> bool:
    return any(info.version == version for info in store.checkpoints(task_id))


def _params(event: Event) -> dict[str, Any]:
    params = event.action.get("params")
    return dict(params) if isinstance(params, Mapping) else {}


def _reappears(text: str, calls: Sequence[_Call]) -> bool:
    """Whether a reply's text is the value of some param (a value the task was given)."""

    def walk(value: Any) -> bool:
        if isinstance(value, Mapping):
            return any(walk(v) for v in value.values())
        if isinstance(value, list):
            return any(walk(v) for v in value)
        return isinstance(value, str) and value == text

    return any(walk(call.params) for call in calls)


# ---------------------------------------------------------------- what the task was given


def _specific(value: Any) -> bool:
    """Whether a value quoted in the goal looks like this task's own (a number, an id, an
    address, a name) rather than a word of the goal's vocabulary (``amount``): it has a
    digit, a capital letter or one of ``@ . - / :``."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return False
    text = str(value)
    return any(c.isdigit() or c.isupper() or c in "@.-/:" for c in text)


def _given_fields(
    gen: Generaliser, state_type: type[AgentState], initial: Mapping[str, Any]
) -> dict[str, str]:
    """Parameters for the initial custom fields that differ from their defaults:
    field name -> parameter name."""
    out: dict[str, str] = {}
    for field_name in state_type.custom_fields():
        value = initial.get(field_name)
        info = state_type.model_fields[field_name]
        default = info.get_default(call_default_factory=True)
        if value is None or _json(value) == _json(default):
            continue
        found = gen.add(
            field_name, value, origin=f"initial field {field_name}", field_name=field_name
        )
        if found is not None:
            out[field_name] = found
    return out


def _json(value: Any) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    return json.dumps(value, sort_keys=True, default=str)


def _searchable(doc: Mapping[str, Any], state_type: type[AgentState]) -> dict[str, Any]:
    """The part of a card a param value may be found in: custom fields and facts."""
    out = {name: doc[name] for name in state_type.custom_fields() if name in doc}
    out["facts"] = doc.get("facts") or {}
    return out


def _bound(agent: Agent[Any], call: _Call) -> dict[str, str]:
    """The call's params the skill binds to the state (``FromState``): param -> path."""
    skill = agent.skills.get(str(call.record.skill))
    if skill is None:
        return {}
    return {n: b.path for n, b in bindings(skill.params).items() if isinstance(b, FromState)}


def _manifest_skills(
    store: Store, agent: Agent[Any], definition: Any, names: set[str]
) -> dict[str, Any]:
    """The manifest entry of each skill in ``names``, from the definition the task ran
    under (kept in the store), else from the agent when it is that definition."""
    manifest: Mapping[str, Any] | None = None
    if isinstance(definition, str):
        try:
            manifest = json.loads(store.get_artifact(definition))
        except (ArtifactNotFound, StoreError, ValueError):
            manifest = None
    if manifest is None and agent.definition.ref == definition:
        manifest = agent.definition.manifest
    skills = manifest.get("skills") if isinstance(manifest, Mapping) else None
    if not isinstance(skills, Mapping):
        return {}
    return {name: skills[name] for name in sorted(names) if name in skills}


def _path(history: _History, head: Mapping[str, Any]) -> tuple[str, ...]:
    """The machine steps the task went through (consecutive repeats collapsed)."""
    steps = [str(history.initial.get("current_step") or "init")]
    steps += [call.record.step for call in history.calls]
    steps.append(str(head.get("current_step") or steps[-1]))
    out: list[str] = []
    for step in steps:
        if not out or out[-1] != step:
            out.append(step)
    return tuple(out)
