"""The page models: what one page (or its JSON twin under /api/) shows, built from a store.

The HTML pages and the API read the same objects, so the two never disagree. A
:class:`Source` is where a page reads from: the store the inspector serves, or one
run of an evaluation report (its own SQLite store, with its expectations).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillstate.errors import StateCorrupted, StoreError, UsageError
from skillstate.ui.data import StepRow, TaskAccess, access, first_bad, step_rows
from skillstate.ui.masking import without_paths
from skillstate.ui.tree import family_view

if TYPE_CHECKING:
    from skillstate.engine.replay import Attribution
    from skillstate.store.base import Store

__all__ = ["Source", "TaskView", "head_summary", "task_view", "token_chart"]


@dataclass(frozen=True)
class Source:
    """Where a task page reads from."""

    store: Store
    base: str
    """The URL prefix of its task pages: ``""`` for the served store, ``/r/N/RUN`` for a run."""
    label: str
    allowed: tuple[str, ...] = ()
    """Agent references the operator passed with ``--agent``."""
    expect: Path | None = None
    """The expectations of an evaluation run (``expected.json``)."""
    editable: bool = False
    """Writes are possible here (the served store, started with ``--allow-edit``)."""

    def access(self, task_id: str) -> TaskAccess:
        return access(self.store, task_id, self.allowed)


@dataclass(frozen=True)
class TaskView:
    """The task page: the head's card, one page of the timeline, the first bad step."""

    task_id: str
    version: int
    status: str
    card: dict[str, Any]
    """The head's card, masked."""
    problem: str | None
    """Why the head does not verify (shown as stored, with this warning)."""
    rows: list[StepRow]
    """This page of the timeline, oldest first."""
    page: int
    pages: int
    steps: int
    """Events in the timeline."""
    first_bad: Attribution | None
    first_bad_page: int | None
    expect: str | None
    """Where the expectations came from (a path, as :func:`without_paths` shows it)."""
    agent_note: str | None
    """Why the task's agent is not used (the pages then show what is stored)."""
    question: str | None
    approval: dict[str, Any] | None = None
    """The call waiting for a person's approval (skill, masked params, reason, step, and
    ``tool``: the tool call it waits on, ``{"tool", "args"}`` masked, or ``None``)."""
    wait: dict[str, Any] | None = None
    """What a ``waiting`` task waits for: kind (``until``/``signal``), signal, deadline
    (ISO UTC), reason and the step a timeout goes to."""
    family: dict[str, Any] | None = None
    """Its parent link and children tree (:func:`skillstate.ui.tree.family_view`)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "version": self.version,
            "status": self.status,
            "card": self.card,
            "problem": self.problem,
            "timeline": {
                "page": self.page,
                "pages": self.pages,
                "steps": self.steps,
                "rows": [row.as_json() for row in self.rows],
            },
            "first_bad": self.first_bad.as_json() if self.first_bad else None,
            "first_bad_page": self.first_bad_page,
            "expect": self.expect,
            "agent_note": self.agent_note,
            "question": self.question,
            "approval": self.approval,
            "wait": self.wait,
            "family": self.family,
        }


def task_view(
    source: Source,
    task_id: str,
    *,
    page: int | None = None,
    size: int = 50,
    expect: str | None = None,
) -> TaskView:
    """The task page of ``task_id``: ``page`` of its timeline (default: the last one).

    ``expect`` is an expectations file (as ``replay --expect`` takes); an evaluation
    run's own is used when none is given.
    """
    from skillstate.engine.replay import Expectations

    acc = source.access(task_id)
    masker = acc.masker
    problem = None
    try:
        head = source.store.load(task_id)
    except StateCorrupted as exc:
        problem = masker.text(str(exc))
        head = source.store.load(task_id, verify=False)
    events = source.store.events(task_id)
    rows = step_rows(events, masker)
    pages = max(1, -(-len(rows) // size))
    page = pages if page is None else min(max(page, 1), pages)
    path = expect or (str(source.expect) if source.expect and source.expect.is_file() else None)
    expected = Expectations.load(path) if path else None
    try:
        found = first_bad(source.store, task_id, expected, events)
    except (StoreError, UsageError) as exc:
        found, problem = None, problem or masker.text(f"replay could not attribute: {exc}")
    bad_page = None
    if found is not None:
        found = type(found)(found.version, found.decision, masker.text(found.reason))
        index = next((i for i, r in enumerate(rows) if r.version == found.version), None)
        bad_page = None if index is None else index // size + 1
    card = masker.card(head.state)
    question = card.get("question")
    return TaskView(
        task_id=task_id,
        version=head.version,
        status=str(card.get("status") or "?"),
        card=card,
        problem=problem,
        rows=rows[(page - 1) * size : page * size],
        page=page,
        pages=pages,
        steps=len(rows),
        first_bad=found,
        first_bad_page=bad_page,
        expect=without_paths(path) if path else None,
        agent_note=acc.why_no_agent,
        question=question if isinstance(question, str) else None,
        approval=_approval(card.get("pending_approval")),
        wait=_wait(card.get("wait")),
        family=family_view(source.store, head.state, masker),
    )


def _approval(pending: Any) -> dict[str, Any] | None:
    """The pending approval of a masked card, as the page shows it."""
    if not isinstance(pending, dict):
        return None
    params = pending.get("params")
    tool = pending.get("tool")
    call = None
    if isinstance(tool, dict):  # the approval is for one tool call of the skill
        args = tool.get("args")
        call = {
            "tool": str(tool.get("tool") or "?"),
            "args": args if isinstance(args, dict) else {},
        }
    return {
        "skill": str(pending.get("skill") or "?"),
        "params": params if isinstance(params, dict) else {},
        "reason": str(pending.get("reason") or ""),
        "step": pending.get("target"),
        "tool": call,
    }


def _wait(wait: Any) -> dict[str, Any] | None:
    """The wait of a masked card, as the page shows it (text fields only)."""
    if not isinstance(wait, dict):
        return None
    return {
        name: wait.get(name) if isinstance(wait.get(name), str) else None
        for name in ("kind", "signal", "deadline", "reason", "on_timeout")
    }


def head_summary(store: Store, task_id: str) -> dict[str, Any]:
    """The few head fields a live page polls for (one load, nothing validated)."""
    head = store.load(task_id, verify=False)
    state = head.state
    return {
        "task_id": task_id,
        "version": head.version,
        "status": state.get("status"),
        "current_step": state.get("current_step"),
    }


def token_chart(source: Source, task_id: str) -> tuple[str, dict[str, Any]]:
    """The token chart of a task as inline SVG, and its data."""
    from skillstate.ui.chart import line_chart
    from skillstate.ui.tokens import token_curve

    acc = source.access(task_id)
    curve = token_curve(source.store, task_id, acc.agent, acc.why_no_agent)
    svg = line_chart(
        curve.series(),
        title="Prompt tokens per decision",
        x_label="decision",
        y_label="tokens",
    )
    data = curve.as_json()
    if data["note"]:
        data["note"] = acc.masker.text(str(data["note"]))
    return svg, data
