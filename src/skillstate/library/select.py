"""Which skills a decision is offered: retrieval, ranked by each skill's record.

``Agent(retriever=..., top_k=k)`` makes every view offer at most ``k`` skills
(more only when more than ``k`` are pinned, below) among those that apply now (``when`` holds, the
machine allows their step, their bound params bind). Each applicable skill is
scored::

    score = relevance × (successes + 1) / (attempts + 2)

``relevance`` is the retriever's, for the decision's query
(:func:`~skillstate.library.retrieval.decision_query`); the second factor is the
skill's success rate in this store with one success and one failure added, so a
skill that never ran weighs 0.5 and a record moves the weight only as it grows
(:mod:`skillstate.library.stats`). Ties keep the order the skills were declared in.

Pinned, whatever their score: the skill the plan's next step names
(``pending_steps[0]``), and the skills loaded ``SKILL.md`` instructions name in
``allowed-tools``. They come first (by score) and count towards ``k``.

Only the candidates reach the model: the view lists them, the decision's response
schema has a branch for each, and the system prompt's skill catalog lists them
instead of every skill. The candidates and their scores go on the decision's
event (:class:`~skillstate.events.Candidate`, seed 004 §5.1).
"""

from __future__ import annotations

import heapq
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skillstate.events import Candidate
from skillstate.library.retrieval import Retriever, decision_query, skill_document
from skillstate.library.stats import SkillRecord, SuccessRates, _forget
from skillstate.skills.skill import Skill
from skillstate.state.model import AgentState

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.state.view import Choose

__all__ = ["chooser", "rank"]

_DIGITS = 4


def chooser(agent: Agent[Any], state: AgentState, rates: SuccessRates | None) -> Choose:
    """The ``choose`` of ``agent``'s view of ``state`` (:func:`~skillstate.state.view.render_view`
    calls it with the skills that apply)."""
    retriever = agent.retriever
    assert retriever is not None

    def choose(
        applicable: Sequence[Skill[Any, Any]],
    ) -> tuple[list[Skill[Any, Any]], tuple[Candidate, ...]]:
        if not applicable:
            return [], ()
        _ensure_index(agent, retriever)
        relevance = retriever.scores(decision_query(state))
        return rank(applicable, relevance, state, rates=rates, top_k=agent.top_k)

    return choose


def rank(
    applicable: Sequence[Skill[Any, Any]],
    relevance: Mapping[str, float],
    state: AgentState,
    *,
    rates: SuccessRates | None,
    top_k: int,
) -> tuple[list[Skill[Any, Any]], tuple[Candidate, ...]]:
    """The ``top_k`` of ``applicable`` (pinned first) and their :class:`Candidate` records."""
    pinned_names = _pinned(state)
    counts = rates.records() if rates is not None else {}
    scored = []
    for position, skill in enumerate(applicable):
        found = float(relevance.get(skill.name, 0.0))
        weight = counts.get(skill.name, _NEVER_RAN).weight
        scored.append((found * weight, weight, -position, found, skill))
    pinned = sorted((item for item in scored if item[4].name in pinned_names), key=_order,
                    reverse=True)  # fmt: skip
    room = max(top_k - len(pinned), 0)
    rest = heapq.nlargest(room, (i for i in scored if i[4].name not in pinned_names), key=_order)
    chosen = pinned + rest
    candidates = []
    for score, _, _, found, skill in chosen:
        record = counts.get(skill.name, _NEVER_RAN)
        rate = record.rate
        candidates.append(
            Candidate(
                skill=skill.name,
                score=round(score, _DIGITS),
                relevance=round(found, _DIGITS),
                success_rate=None if rate is None else round(rate, _DIGITS),
                attempts=record.attempts,
                pinned=skill.name in pinned_names,
            )
        )
    return [item[4] for item in chosen], tuple(candidates)


def _order(item: tuple[float, float, int, float, Any]) -> tuple[float, float, int]:
    """Score, then the skill's weight, then declaration order (earlier first)."""
    return item[0], item[1], item[2]


_NEVER_RAN = SkillRecord()


def _pinned(state: AgentState) -> set[str]:
    names = {name for loaded in state.skill_instructions for name in loaded.uses}
    if state.pending_steps:
        names.add(state.pending_steps[0])
    return names


def _ensure_index(agent: Agent[Any], retriever: Retriever) -> None:
    """Index ``agent``'s skills in ``retriever`` once, again only when skills were
    registered since or another agent's skills were indexed in it meanwhile."""
    registry = agent.skills
    key = (id(registry), len(registry))
    with _INDEXED_GUARD:
        held = _INDEXED.get(id(retriever))
        if held is None or held[0]() is not retriever:
            held = _INDEXED[id(retriever)] = [_ref(retriever), None, threading.Lock()]
    with held[2]:  # one indexing at a time per retriever; scoring needs no lock
        if held[1] != key:
            retriever.index([skill_document(s) for s in registry])
            held[1] = key


_INDEXED: dict[int, list[Any]] = {}
"""Per retriever (by id): ``[reference to it, (registry id, size) indexed, its lock]``."""
_INDEXED_GUARD = threading.Lock()


def _ref(retriever: Retriever) -> Callable[[], Retriever | None]:
    key = id(retriever)
    try:  # forgotten with the retriever
        return weakref.ref(retriever, _forget(_INDEXED, key))
    except TypeError:  # not weakly referenceable: kept for the process
        return lambda: retriever
