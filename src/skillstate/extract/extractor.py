"""From a transcript to a proposal: mask, extract, check, and say what was rejected."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skillstate.extract.check import check
from skillstate.extract.heuristic import heuristic_extract
from skillstate.extract.model import MAX_ITEMS, REPLY_TOKENS, TURN_CHARS, model_extract
from skillstate.extract.proposal import ExtractorInfo, Proposal, TranscriptRecord
from skillstate.extract.target import Target
from skillstate.extract.transcript import Transcript
from skillstate.state.model import AgentState

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.llm.base import Provider

__all__ = ["HEURISTIC", "extract"]

HEURISTIC = "heuristic"
"""The ``--model`` of the rule-based extractor (the offline default)."""


def extract(
    transcript: Transcript,
    agent: Agent[Any] | None,
    *,
    provider: Provider | None = None,
    max_repairs: int = 2,
    turn_chars: int = TURN_CHARS,
    max_tokens: int = REPLY_TOKENS,
    max_items: int = MAX_ITEMS,
    state_type: type[AgentState] | None = None,
) -> Proposal:
    """The proposal for ``agent`` (``None``: a new agent, the base card or
    ``state_type``) from ``transcript``: by ``provider``, else by the rules.

    The transcript is masked with the agent's redaction policy (the default policy
    without an agent) before the extractor reads it: the prompt, the proposal and
    whatever is later stored hold the masked turns only.
    """
    from skillstate.engine.agent import DEFAULT_POLICY

    policy = agent.redaction if agent is not None else DEFAULT_POLICY
    masked = transcript.masked(policy.redactor().text)
    target = Target.of(agent, state_type)
    if provider is None:
        items, problems = check(heuristic_extract(masked, target), masked, target)
        info = ExtractorInfo(name=HEURISTIC)
    else:
        found = model_extract(
            provider,
            masked,
            target,
            max_repairs=max_repairs,
            turn_chars=turn_chars,
            max_tokens=max_tokens,
            max_items=max_items,
        )
        items, problems, info = found.items, found.problems, found.info
    return Proposal(
        agent=target.agent,
        state_class=target.state_type.__name__,
        extractor=info,
        goal=items.goal,
        constraints=items.constraints,
        facts=items.facts,
        completed_steps=items.completed_steps,
        pending_steps=items.pending_steps,
        evidence=items.evidence,
        notes=tuple(str(p) for p in problems),
        transcript=TranscriptRecord.of(masked),
    )
