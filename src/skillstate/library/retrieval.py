"""Skill retrieval: the extension point that finds the skills relevant to a decision.

An agent with hundreds of skills cannot show a model all of them: the system
prompt's catalog and the decision's response schema would grow with every skill.
``Agent(retriever=..., top_k=8)`` offers each decision only the ``top_k`` applicable
skills most relevant to it (:mod:`skillstate.library.select`); without a retriever
nothing changes.

A :class:`Retriever` indexes one document per skill (:func:`skill_document`: its
name, description, tags, step, params and, for a ``SKILL.md``, the start of its
instructions) and scores a query (:func:`decision_query`: the goal, the current and
pending steps, the latest user input and evidence, loaded instructions) against
them. Implementations: :class:`~skillstate.library.bm25.BM25Retriever` (the
``library`` extra) and
:class:`~skillstate.library.embeddings.EmbeddingRetriever` (the ``embeddings``
extra); ``tests/contract/test_retriever_contract.py`` is what each one passes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from skillstate.skills.skill import Skill
from skillstate.state.model import AgentState

__all__ = ["Retriever", "SkillDocument", "decision_query", "skill_document", "words"]

QUERY_CHARS = 2_000
"""A query is cut to this many characters (an instruction or a reply can be long)."""


@dataclass(frozen=True)
class SkillDocument:
    """What a retriever indexes for one skill."""

    name: str
    text: str


@runtime_checkable
class Retriever(Protocol):
    """Scores skills against a query. Stateful: :meth:`index` once, then :meth:`scores`.

    :meth:`scores` is called from several threads at once (the async runtime builds
    views in worker threads) and may run while :meth:`index` replaces the index (never
    two indexings at once): swap the whole index in one assignment."""

    def index(self, documents: Sequence[SkillDocument]) -> None:
        """Build the index over ``documents`` (replacing any earlier one)."""
        ...

    def scores(self, query: str) -> Mapping[str, float]:
        """The relevance of every indexed skill to ``query``, by name: finite, ``>= 0``,
        higher is more relevant, 0 for no relevance (an empty query scores all 0).
        Raises :class:`~skillstate.errors.UsageError` before :meth:`index`."""
        ...


def skill_document(skill: Skill[Any, Any]) -> SkillDocument:
    """The text a retriever indexes for ``skill``."""
    params = [
        " ".join(filter(None, (name, field.description)))
        for name, field in skill.params.model_fields.items()
    ]
    parts = [
        skill.name,
        skill.description,
        " ".join(skill.tags),
        skill.step or "",
        " ".join(params),
        getattr(skill, "search_text", ""),
    ]
    return SkillDocument(skill.name, "\n".join(p for p in parts if p))


def decision_query(state: AgentState) -> str:
    """What a decision is about, as retrieval sees it.

    The latest user input and messages first (what was just asked), the next plan
    step, the goal, the current step, the latest evidence and what loaded
    instructions say: the words a relevant skill's description shares.
    """
    parts: list[str] = []
    parts += [m.text for m in state.messages]
    if state.inputs:
        parts.append(state.inputs[-1].text)
    parts += list(state.pending_steps[:3])
    parts += [state.goal, state.current_step]
    if state.evidence:
        parts.append(state.evidence[-1].summary)
    parts += [loaded.text for loaded in state.skill_instructions]
    return "\n".join(p for p in parts if p)[:QUERY_CHARS]


_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_STOP = """a an and are as at be by for from has have in into is it its of on or that
the their then this to was were will with"""
STOPWORDS = frozenset(_STOP.split())


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")


def words(text: str) -> list[str]:
    """Lower-case word tokens: ``compute_channel_agg`` and ``computeChannelAgg`` give
    ``compute channel agg``; English stop words and one-letter words are left out.
    Chinese, Japanese and Korean text, written without spaces, gives its character
    bigrams (``按渠道汇总`` gives ``按渠 渠道 道汇 汇总``)."""
    out: list[str] = []
    for token in _WORD.findall(_CAMEL.sub(" ", text)):
        for piece in _CJK.split(token):
            low = piece.lower()
            if len(low) > 1 and low not in STOPWORDS:
                out.append(low)
        for run in _CJK.findall(token):
            out += [run[i : i + 2] for i in range(len(run) - 1)] if len(run) > 1 else [run]
    return out
