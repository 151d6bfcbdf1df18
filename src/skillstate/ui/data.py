"""What the inspector's pages show, read from a store: the only module that reads one.

Everything here reads through the store protocol and the engine's own readers
(:meth:`Store.heads`, ``load``, ``events``, ``checkpoint``, :func:`read_artifact`,
:func:`~skillstate.engine.replay.attribute`), the way the ``tasks``, ``show``,
``log`` and ``replay`` commands do, and everything it returns has been through a
:class:`~skillstate.ui.masking.Masker`. A task's agent is imported only through the
operator's allow-list (:func:`skillstate.cli._common._agent_for`); without it the
pages show the card as stored and say why the rest is missing.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from skillstate.errors import SkillstateError, StoreError, UsageError
from skillstate.store.base import is_reserved
from skillstate.ui.masking import Masker

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.replay import Attribution, Expectations
    from skillstate.events import Event
    from skillstate.store.base import HeadInfo, Store

__all__ = [
    "PAGE_SIZE",
    "WAITING_ANY",
    "FieldChange",
    "StepDiff",
    "StepRow",
    "TaskAccess",
    "TaskPage",
    "access",
    "artifact_text",
    "first_bad",
    "list_tasks",
    "state_at",
    "step_diff",
    "step_rows",
]

PAGE_SIZE = 50
"""Tasks per page of the task list."""
WAITING_ANY = "waiting-any"
"""The task list's status filter for every task waiting on a person, the world or its
children (``waiting_user``, ``waiting_approval``, ``waiting``, ``waiting_children``)."""
ARTIFACT_CHARS = 200_000
"""An artifact page shows at most this much of the output (the rest is cut, and says so)."""
_REF = re.compile(r"sha256:[0-9a-f]{64}")
_UNSET = object()


# ---------------------------------------------------------------- the task list


@dataclass(frozen=True)
class TaskPage:
    """One page of the task list, filtered."""

    rows: list[dict[str, Any]]
    """``skillstate tasks --json`` rows, plus ``steps`` and ``tokens``."""
    total: int
    """Tasks that match the filters."""
    stored: int
    """Tasks in the store."""
    page: int
    pages: int
    size: int
    """Rows a page holds."""
    statuses: list[str]
    """Every status present in the store (for the filter)."""
    agents: list[str]
    """Every agent named by a card in the store (for the filter)."""


def list_tasks(
    store: Store,
    *,
    status: str | None = None,
    agent: str | None = None,
    query: str | None = None,
    page: int = 1,
    size: int = PAGE_SIZE,
    sort: str = "updated",
    tree: bool = False,
) -> TaskPage:
    """The store's tasks from one :meth:`Store.heads` read: filtered, sorted, one page.

    ``query`` matches task ids by substring (case-insensitive); ``sort`` is
    ``updated`` (latest first), ``waited`` (the longest unchanged first: the tasks
    that have waited longest) or ``id``. ``status`` :data:`WAITING_ANY` keeps the tasks
    waiting on a person or the world (as ``skillstate tasks --waiting``). With ``tree``,
    child tasks follow their parents (:func:`skillstate.ui.tree.tree_page`: a page
    holds ``size`` roots).
    """
    from skillstate.cli.listing import WAITING, _status

    if sort not in {"updated", "waited", "id"}:
        raise UsageError(f"sort must be updated, waited or id, not {sort[:40]!r}")
    heads = store.heads()
    needle = (query or "").strip().casefold()
    statuses = set(WAITING) if status == WAITING_ANY else {status} if status else None
    rows = [
        head
        for head in heads
        if not is_reserved(head.task_id)
        and (statuses is None or _status(head) in statuses)
        and (not agent or head.agent == agent)
        and (not needle or needle in head.task_id.casefold())
    ]
    if sort in {"updated", "waited"}:
        oldest = datetime.min.replace(tzinfo=timezone.utc)
        rows.sort(key=lambda h: h.updated_at or oldest, reverse=sort == "updated")
    pages = max(1, -(-len(rows) // size))
    page = min(max(page, 1), pages)
    now = datetime.now(timezone.utc)
    shown = [_row(head, now) for head in rows[(page - 1) * size : page * size]]
    if tree:
        from skillstate.ui.tree import tree_page

        listed = [head for head in heads if not is_reserved(head.task_id)]
        shown, page, pages = tree_page(listed, rows, page, size, lambda h: _row(h, now))
    from skillstate.ui.alerts import with_alerts

    shown = with_alerts(store, shown, {h.task_id: h for h in heads})  # badges: this page only
    return TaskPage(
        rows=shown,
        total=len(rows),
        stored=len(heads),
        page=page,
        pages=pages,
        size=size,
        statuses=sorted({s for s in map(_status, heads) if s}),
        agents=sorted({h.agent for h in heads if h.agent}),
    )


def _row(head: HeadInfo, now: datetime) -> dict[str, Any]:
    from skillstate.cli.listing import _as_json, _duration, _lease_cell

    row = _as_json(head, now)
    waited = row.get("waited_s")
    return {
        **row,
        "steps": head.steps,
        "tokens": head.tokens,
        "lease_text": _lease_cell(head, now),
        "waited_text": _duration(waited) if isinstance(waited, float | int) else None,
    }


# ---------------------------------------------------------------- one task


@dataclass(frozen=True)
class TaskAccess:
    """How the pages of one task read it: its agent (if allowed) and its masker."""

    agent: Agent[Any] | None
    why_no_agent: str | None
    """Why the agent is not used (not allowed, not importable), for the pages to say."""
    masker: Masker


def access(store: Store, task_id: str, allowed: Collection[str] = ()) -> TaskAccess:
    """The task's agent through the operator's allow-list, and what to mask for it.

    ``allowed`` are the references ``skillstate ui --agent`` names: a task whose card
    names one of them is run with it, as ``--agent`` does for one command; any other
    reference must be on the configured allow-list, checked before any import
    (``_agent_for``). With the agent,
    its state class says which fields are sensitive; with ``SKILLSTATE_KEY`` too, the
    plaintext of their values is masked wherever it appears in text.
    """
    from skillstate.cli._common import _agent_for
    from skillstate.state.secrets import secret_values, sensitive_fields

    ref = store.load(task_id, verify=False).state.get("agent")  # TaskNotFound first
    try:
        agent = _agent_for(store, task_id, ref if ref in allowed else None)
    except SkillstateError as exc:
        return TaskAccess(None, str(exc), Masker())
    hidden = sensitive_fields(agent.state_type)
    secrets: tuple[str, ...] = ()
    if hidden:
        try:
            secrets = secret_values(agent.parse_state(store.load(task_id).state))
        except SkillstateError:
            secrets = ()  # no key, or a damaged head: sealed values are masked anyway
    return TaskAccess(agent, None, Masker.of(hidden, secrets))


@dataclass(frozen=True)
class StepRow:
    """One committed event, as a timeline row shows it (masked)."""

    version: int
    actor: str
    kind: str
    label: str
    decision: int | None
    """1-based index among the policy's decisions."""
    reason: str
    detail: str
    """What the action carried: params, a question, a reply, a summary, the writes."""
    skill: str | None
    skill_version: str | None
    verdict: str | None
    """``ok``, ``failed: REASON``, or ``None`` (no verify ran)."""
    attempts: int
    tool_calls: list[dict[str, Any]]
    error: str | None
    changed: list[str]
    """The top-level fields its JSON Patch touches."""
    prompt_tokens: int | None
    view_tokens: int | None
    finished_at: datetime
    duration_ms: float
    step_id: str | None
    action: dict[str, Any] = field(default_factory=dict)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    """The skills a retriever offered the decision, with their scores (skill library)."""
    view_budget: int | None = None
    """The token budget the decision's view was fitted into (``None``: none)."""
    view_overrun: int | None = None
    """Tokens that view was over its budget with everything hideable hidden."""
    view_peek: str | None = None
    """Ref of the raw evidence the view showed (an earlier ``load_evidence``)."""
    by: str | None = None
    """Who made a person's commit (:attr:`skillstate.events.Event.by`)."""
    why: str | None = None
    """Why they said they made it (:attr:`skillstate.events.Event.reason`), masked."""

    def as_json(self) -> dict[str, Any]:
        data = dict(vars(self).items())
        data["finished_at"] = self.finished_at.isoformat()
        return data


def step_rows(events: Sequence[Event], masker: Masker) -> list[StepRow]:
    """The timeline rows of ``events`` (oldest first), numbering the policy's decisions."""
    rows = []
    decision = 0
    for event in events:
        index = None
        if event.actor == "policy":
            decision += 1
            index = decision
        rows.append(_step_row(event, index, masker))
    return rows


def _step_row(event: Event, decision: int | None, masker: Masker) -> StepRow:
    action = masker.value(dict(event.action))
    verdict = None
    if event.verdict is not None:
        verdict = "ok" if event.verdict.ok else f"failed: {masker.text(event.verdict.reason)}"
    changed = sorted({_top(op.get("path")) for op in event.patch} - {"version", ""})
    calls = [
        {
            "tool": call.tool,
            "ok": call.ok,
            "summary": masker.text(call.summary),
            "args": masker.value(call.args),
            "ref": call.ref,
            "attempt": call.attempt,
        }
        for call in event.tool_calls
    ]
    spent = (event.finished_at - event.started_at).total_seconds() * 1000
    return StepRow(
        version=event.version,
        actor=event.actor,
        kind=str(event.action.get("kind", "?")),
        label=event.label,
        decision=decision,
        reason=str(action.get("reason") or ""),
        detail=_detail(action),
        skill=event.skill,
        skill_version=event.skill_version,
        verdict=verdict,
        attempts=event.attempts,
        tool_calls=calls,
        error=masker.text(event.error) if event.error else None,
        changed=changed,
        prompt_tokens=event.usage.prompt if event.usage else None,
        view_tokens=event.view_tokens,
        finished_at=event.finished_at,
        duration_ms=round(max(spent, 0.0), 1),
        step_id=event.step_id,
        action=action,
        candidates=[c.model_dump(mode="json") for c in event.candidates or ()],
        view_budget=event.view_budget,
        view_overrun=event.view_overrun,
        view_peek=event.view_peek,
        by=event.by,
        why=masker.text(event.reason) if event.reason else None,
    )


def _detail(action: Mapping[str, Any]) -> str:
    kind = action.get("kind")
    if kind == "reply" and isinstance(action.get("text"), str):
        return f"answer: {action['text']}"
    if kind in ("approve", "reject"):
        verb = "approved" if kind == "approve" else "rejected"
        edited = action.get("edited")
        more = f"; edited {json.dumps(edited, ensure_ascii=False)}" if edited else ""
        return f"{verb} by {action.get('actor') or '?'}{more}"
    for key in ("question", "text", "summary"):
        if isinstance(action.get(key), str) and kind != "create":
            return str(action[key])
    rest = {k: v for k, v in action.items() if k not in {"kind", "reason", "skill"}}
    if list(rest) == ["params"]:
        rest = rest["params"] or {}
    return "" if not rest else json.dumps(rest, ensure_ascii=False, sort_keys=True)


def _top(path: object) -> str:
    parts = str(path or "").split("/")
    return parts[1].replace("~1", "/").replace("~0", "~") if len(parts) > 1 else ""


def first_bad(
    store: Store,
    task_id: str,
    expected: Expectations | None = None,
    events: Sequence[Event] | None = None,
) -> Attribution | None:
    """The first bad step, as ``skillstate replay [--expect]`` names it (from ``events``
    when the caller has read them already)."""
    from skillstate.engine.replay import attribute

    return attribute(store, task_id, expected, events=events)


# ---------------------------------------------------------------- diffs and versions


@dataclass(frozen=True)
class FieldChange:
    """A top-level field one step changed: its JSON before and after, and the line diff."""

    name: str
    before: str | None
    after: str | None
    lines: list[tuple[str, str]]
    """``(tag, line)`` with tag ``-`` (removed), ``+`` (added) or ``" "`` (context)."""


@dataclass(frozen=True)
class StepDiff:
    """What one version changed: its JSON Patch and the before/after of each field."""

    version: int
    patch: list[dict[str, Any]]
    fields: list[FieldChange]
    note: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "patch": self.patch,
            "fields": [
                {"name": f.name, "before": f.before, "after": f.after, "lines": f.lines}
                for f in self.fields
            ],
            "note": self.note,
        }


def step_diff(store: Store, task_id: str, version: int, masker: Masker) -> StepDiff:
    """The diff of ``version``: its event's patch, and its fields before and after.

    The states come from :meth:`Store.checkpoint`; when one was pruned, the patch
    (which events keep) is what is shown, with a note saying so.
    """
    events = store.events(task_id, since=version - 1)
    if not events or events[0].version != version:
        raise UsageError(f"task {task_id!r} has no event for version {version}")
    patch = masker.patch(events[0].patch)
    try:
        before = store.checkpoint(task_id, version - 1).state if version > 1 else {}
        after = store.checkpoint(task_id, version).state
    except StoreError as exc:
        return StepDiff(version, patch, [], f"the states are not kept ({exc}): the patch is")
    changes = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, _UNSET), after.get(name, _UNSET)
        if old == new or name == "version":
            continue
        shown_old, shown_new = (_shown(name, v, masker) for v in (old, new))
        changes.append(FieldChange(name, shown_old, shown_new, _lines(shown_old, shown_new)))
    return StepDiff(version, patch, changes)


def _shown(name: str, value: Any, masker: Masker) -> str | None:
    if value is _UNSET:
        return None
    masked = masker.card({name: value})[name]
    return json.dumps(masked, ensure_ascii=False, indent=2, sort_keys=True)


def _lines(before: str | None, after: str | None) -> list[tuple[str, str]]:
    old = before.splitlines() if before is not None else []
    new = after.splitlines() if after is not None else []
    out: list[tuple[str, str]] = []
    for line in list(difflib.unified_diff(old, new, n=3, lineterm=""))[2:]:
        if line.startswith("@@"):
            out.append(("@", line))
        else:
            out.append((line[:1], line[1:]))
    return out


def state_at(store: Store, task_id: str, version: int, masker: Masker) -> dict[str, Any]:
    """The card as it was at ``version`` (any kept one), masked."""
    try:
        return masker.card(store.checkpoint(task_id, version).state)
    except StoreError as exc:
        raise UsageError(f"version {version} of task {task_id!r} cannot be shown: {exc}") from exc


# ---------------------------------------------------------------- artifacts


@dataclass(frozen=True)
class ArtifactText:
    ref: str
    text: str
    size: int
    cut: bool


def artifact_text(store: Store, task_id: str, ref: str, masker: Masker) -> ArtifactText:
    """A raw output of task ``task_id`` as text (opened if sealed, masked, pretty when JSON).

    Artifacts are content-addressed and shared by the whole store, so a ref alone says
    nothing of whose output it is, and ``masker`` knows the secrets of ``task_id``
    only. The artifact is served only if the task's own log names it (a tool call's
    ref, or a ref its card or an action holds); any other is "not found" here, never
    another task's output under this task's masking.
    """
    from skillstate.errors import ArtifactNotFound
    from skillstate.store.sealing import read_artifact

    if not _REF.fullmatch(ref):
        raise UsageError(f"not an artifact ref: {ref[:80]!r} (expected sha256:<64 hex digits>)")
    if not any(ref in event.model_dump_json() for event in store.events(task_id)):
        raise ArtifactNotFound(f"task {task_id!r} has no artifact {ref}")
    data = read_artifact(store, ref)
    text = data.decode("utf-8", errors="replace")
    try:
        text = json.dumps(masker.value(json.loads(text)), ensure_ascii=False, indent=2)
    except ValueError:
        text = masker.text(text)
    cut = len(text) > ARTIFACT_CHARS
    return ArtifactText(ref, text[:ARTIFACT_CHARS], len(data), cut)
