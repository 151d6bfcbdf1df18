"""Where spot-check verdicts live: one reserved record per agent, committed like a card.

A person's verdict on a marked step (:mod:`skillstate.ops.spotchecks`) goes to the
record ``skillstate:review:<scope>``, the scope being the ``agent`` reference the
task's card names (``default`` for a card without one), a plain JSON document::

    {"task_id": ..., "version": N, "kind": "skillstate.review", "scope": ..., "next": 4,
     "verdicts": {"r3": {"seq": 3, "task": "t1", "step": "0002-triage", "verdict": "correct",
                         "note": "...", "by": "alice", "at": "..."}}}

written with :meth:`~skillstate.store.base.Store.commit`, the store's compare-and-set,
as :mod:`skillstate.memory.record` keeps a memory scope: every store has it already.
Why not an event on the task itself: a task's versions are its card's history (a
rollback to version N must not drop a review given later, and a review must not wake
a worker or move the task's head under a running step). Why one record per agent: the
report reads one record per agent, not one per task.

**No verdict is lost.** Two people reviewing the same step at once both land: the
loser of the compare-and-set reads the record again and adds its verdict to the
winner's, and both are kept (a second opinion is data). A step's verdict in the
report is its latest; disagreements are counted. The same person sending the same
verdict and note again (a form submitted twice) changes nothing. Every verdict is an
event of the record with actor ``human`` and the reviewer in its action
(``skillstate log skillstate:review:SCOPE``); its note is masked by the default
redaction policy before it is stored.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from skillstate._validation import first_error
from skillstate.errors import Conflict, StaleState, StateCorrupted, TaskNotFound, UsageError
from skillstate.events import Event
from skillstate.ops.spotchecks import RuleFor, SampledStep, sampled_steps
from skillstate.state.diff import make_patch
from skillstate.store.base import RESERVED, Store

__all__ = [
    "KIND",
    "NOTE_CHARS",
    "PREFIX",
    "Review",
    "VerdictName",
    "check_verdict",
    "load_reviews",
    "record_id",
    "record_verdict",
    "review_scopes",
    "review_step",
    "reviews_by_step",
    "spot_check_queue",
]

PREFIX = f"{RESERVED}review:"
KIND = "skillstate.review"
VerdictName = Literal["correct", "incorrect", "unsure"]
VERDICTS: tuple[str, ...] = get_args(VerdictName)
NOTE_CHARS = 2000
"""The longest note kept with a verdict."""
_ATTEMPTS = 64


class Review(BaseModel):
    """One person's verdict on one marked step."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    """Its number in the record (1, 2, 3... in the order recorded)."""
    task: str
    step: str
    """The step's id (``0003-refund``)."""
    step_version: int
    """The task version the reviewed step committed."""
    skill: str
    verdict: VerdictName
    note: str = ""
    by: str
    """The reviewer: the inspector token's name, or ``--actor`` / ``$SKILLSTATE_ACTOR``."""
    at: datetime


def record_id(scope: str) -> str:
    return PREFIX + scope


def review_scopes(store: Store) -> list[str]:
    return sorted(t[len(PREFIX) :] for t in store.tasks() if t.startswith(PREFIX))


def check_verdict(value: object) -> VerdictName:
    """``value`` if it names a verdict; else a one-line ``UsageError``."""
    if isinstance(value, str) and value in VERDICTS:
        return value  # type: ignore[return-value]
    raise UsageError(f"verdict must be one of {', '.join(VERDICTS)}, not {str(value)[:40]!r}")


def check_note(note: object) -> str:
    if not isinstance(note, str):
        raise UsageError("a note must be text")
    if len(note) > NOTE_CHARS:
        raise UsageError(f"a note must be at most {NOTE_CHARS} characters, not {len(note)}")
    if any(ord(c) < 32 and c not in "\n\t" for c in note):
        raise UsageError("a note may not contain control characters")
    return note.strip()


def check_reviewer(by: object) -> str:
    """The reviewer, checked as every audited identity is (:func:`skillstate.audit.check_by`)."""
    from skillstate.audit import check_by

    if not isinstance(by, str) or not by.strip():
        raise UsageError("a verdict needs a reviewer: --actor NAME or $SKILLSTATE_ACTOR")
    return check_by(by)


def load_reviews(store: Store, scope: str) -> tuple[int, list[Review]]:
    """The record's version and its verdicts, oldest first (version 0: none yet)."""
    version, doc = _head(store, record_id(scope))
    return version, _parse(scope, version, doc)


def record_verdict(
    store: Store,
    *,
    scope: str,
    task: str,
    step: str,
    step_version: int,
    skill: str,
    verdict: str,
    note: str,
    by: str,
) -> Review:
    """Commit one verdict to ``scope``'s record; returns it as recorded. A concurrent
    reviewer's verdict is kept beside it; the same person's identical verdict again is
    returned as it was, nothing written."""
    from skillstate.state.redact import RedactionPolicy

    name = check_verdict(verdict)
    # A note is free text a person typed: a token pasted into it is masked as a card's is.
    text = RedactionPolicy().redactor().text(check_note(note))
    reviewer = check_reviewer(by)
    rid = record_id(scope)
    for attempt in range(_ATTEMPTS):
        version, doc = _head(store, rid)
        reviews = _parse(scope, version, doc)
        for old in reviews:
            if (old.task, old.step, old.by, old.verdict, old.note) == (
                task,
                step,
                reviewer,
                name,
                text,
            ):
                return old
        seq = int(doc["next"]) if doc is not None else 1
        review = Review(
            seq=seq,
            task=task,
            step=step,
            step_version=step_version,
            skill=skill,
            verdict=name,
            note=text,
            by=reviewer,
            at=datetime.now(timezone.utc),
        )
        new, patch = _written(rid, scope, doc, version + 1, review)
        action = {
            "kind": "spot_check",
            "task": task,
            "step": step,
            "verdict": name,
            "by": reviewer,
            "seq": seq,
        }
        event = Event(
            task_id=rid,
            version=version + 1,
            actor="human",
            action=action,
            patch=patch,
            by=reviewer,
            reason=text or None,
        )
        try:
            store.commit(rid, version, new, event)
        except StaleState:
            # Another reviewer got there first: add this verdict to theirs.
            time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 20)))
            continue
        return review
    raise Conflict(
        f"review record {scope!r} kept changing under {_ATTEMPTS} attempts; nothing was written"
    )


def reviews_by_step(store: Store, scopes: Iterable[str]) -> dict[tuple[str, str], list[Review]]:
    """Every verdict of ``scopes``, by (task, step), oldest first."""
    found: dict[tuple[str, str], list[Review]] = {}
    for scope in sorted(set(scopes)):
        for review in load_reviews(store, scope)[1]:
            found.setdefault((review.task, review.step), []).append(review)
    return found


def spot_check_queue(
    store: Store, rule_for: RuleFor, *, pending: bool = False, tasks: Iterable[str] | None = None
) -> list[tuple[SampledStep, list[Review]]]:
    """The marked steps with their verdicts (``pending``: only those nobody reviewed yet)."""
    steps = sampled_steps(store, rule_for, tasks=tasks)
    reviews = reviews_by_step(store, {s.scope for s in steps})
    rows = [(s, reviews.get((s.task_id, s.step_id), [])) for s in steps]
    return [(s, r) for s, r in rows if not (pending and r)]


def review_step(
    store: Store,
    rule_for: RuleFor,
    task: str,
    step: str,
    *,
    verdict: str,
    note: str,
    by: str,
) -> Review:
    """Record ``by``'s verdict on step ``step`` of ``task``, which the rule must mark:
    a verdict on a step the sample did not draw would bias the precision it measures."""
    check_verdict(verdict)
    check_note(note)
    check_reviewer(by)
    store.load(task, verify=False)  # TaskNotFound names the task and the store
    found = [s for s in sampled_steps(store, rule_for, tasks=[task]) if s.step_id == step]
    if not found:
        raise UsageError(
            f"step {step!r} of task {task!r} is not marked for a spot check "
            "(skillstate spot-checks lists those that are)"
        )
    marked = found[0]
    return record_verdict(
        store,
        scope=marked.scope,
        task=task,
        step=step,
        step_version=marked.version,
        skill=marked.skill,
        verdict=verdict,
        note=note,
        by=by,
    )


def _head(store: Store, rid: str) -> tuple[int, dict[str, Any] | None]:
    try:
        head = store.load(rid)
    except TaskNotFound:
        return 0, None
    return head.version, head.state


def _parse(scope: str, version: int, doc: dict[str, Any] | None) -> list[Review]:
    if doc is None:
        return []
    rid = record_id(scope)
    raw = doc.get("verdicts")
    if doc.get("kind") != KIND or not isinstance(raw, dict) or not isinstance(doc.get("next"), int):
        raise StateCorrupted(rid, version, f"it is not a {KIND} record")
    reviews = []
    for name, body in raw.items():
        try:
            review = Review.model_validate(body)
        except ValidationError as exc:
            raise StateCorrupted(rid, version, f"verdict {name}: {first_error(exc)}") from None
        if name != f"r{review.seq}":
            raise StateCorrupted(rid, version, f"verdict {name} is numbered {review.seq}")
        reviews.append(review)
    return sorted(reviews, key=lambda r: r.seq)


def _written(
    rid: str, scope: str, doc: dict[str, Any] | None, version: int, review: Review
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The next document and the patch to it: only the verdict added (verdicts are never
    changed once written, so the patch does not grow with the record)."""
    body = review.model_dump(mode="json")
    name = f"r{review.seq}"
    if doc is None:
        first: dict[str, Any] = {
            "task_id": rid,
            "version": version,
            "kind": KIND,
            "scope": scope,
            "next": review.seq + 1,
            "verdicts": {name: body},
        }
        return first, make_patch({}, first)
    new: dict[str, Any] = {
        **doc,
        "version": version,
        "next": review.seq + 1,
        "verdicts": {**doc["verdicts"], name: body},
    }
    patch: list[dict[str, Any]] = [
        {"op": "add", "path": f"/verdicts/{name}", "value": body},
        {"op": "replace", "path": "/next", "value": review.seq + 1},
        {"op": "replace", "path": "/version", "value": version},
    ]
    return new, patch
