"""Rejected calls in the card: how one is recognised, and whether it still holds.

A :class:`~skillstate.state.model.Rejected` entry keeps a digest of the call's
params and a digest of the values it depended on (its skill's declared ``reads``;
without them, every typed field and fact of the card). It *holds* while the card
still gives the same dependency digest; once a value it read changes, the reason it
was rejected may no longer apply and it is ignored (and dropped at the next step).

Digests are salted with the task id and keep no value: a param that is a secret is
never stored, only a digest of it. The entry's ``shown`` text is masked like any
other text the card keeps.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from skillstate._json import get_path

if TYPE_CHECKING:
    from skillstate.state.model import AgentState, Rejected

__all__ = ["depends_digest", "holding", "holds", "params_digest", "until"]


def _digest(task_id: str, *parts: str) -> str:
    text = "\0".join((task_id, *parts))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))


def params_digest(task_id: str, skill: str, params: Mapping[str, Any]) -> str:
    """What an identical call of ``skill`` is recognised by (salted, no values kept)."""
    return _digest(task_id, skill, _canonical(dict(params)))


def depends_digest(state: AgentState, reads: Iterable[str] | None) -> str:
    """A digest of the values ``reads`` name in ``state`` (``None``: every typed field and
    fact). A read names a field, a dotted path, or a fact's key (``total`` is
    ``facts.total`` when the card has no field ``total``), as ``Skill(reads=...)`` does."""
    fields = type(state).model_fields
    if reads is None:
        names = {*state.custom_fields(), "facts"}
        return _digest(state.task_id, "*", _canonical(state.model_dump(mode="json", include=names)))
    paths = sorted(set(reads))
    tops = {p.partition(".")[0] for p in paths if p.partition(".")[0] in fields}
    document = state.model_dump(mode="json", include={*tops, "facts"})
    values = {
        p: get_path(document, p) if p.partition(".")[0] in fields else state.facts.get(p)
        for p in paths
    }
    return _digest(state.task_id, *paths, _canonical(values))


def holds(state: AgentState, entry: Rejected) -> bool:
    """Whether ``entry`` still applies: what it depended on has not changed."""
    return depends_digest(state, entry.reads) == entry.depends


def holding(state: AgentState, skills: Iterable[str] | None = None) -> tuple[Rejected, ...]:
    """The card's rejected calls that still hold (of ``skills`` only, when given)."""
    wanted = None if skills is None else set(skills)
    return tuple(
        entry
        for entry in state.rejected
        if (wanted is None or entry.skill in wanted) and holds(state, entry)
    )


def until(entry: Rejected) -> str:
    """What must change for ``entry`` to go, as the view says it."""
    if entry.reads is None:
        return "any field or fact changes"
    names = ", ".join(entry.reads)
    return f"{names} {'changes' if len(entry.reads) == 1 else 'change'}"
