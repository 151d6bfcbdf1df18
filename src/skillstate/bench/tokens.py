"""Prompt tokens per decision: the state policy against the history baseline.

One long task (``steps`` records to process, each fetched by a tool whose output is
a realistic ~500-token JSON record, with constraints stated once at the start) is
driven twice through the real runtime: by :class:`~skillstate.engine.policy.StatePolicy`
and by :class:`~skillstate.engine.policy.HistoryPolicy`. Both talk to the same
deterministic model (:class:`~skillstate.llm.replay.ScriptedProvider`): it reads the
response schema and calls the one skill that applies, or finishes, so both runs
take exactly the same decisions and only the prompts differ. Prompt tokens are what
each policy actually put into the provider's messages, counted with the offline
BPE tokenizer (``o200k_base``) plus a per-message overhead.

Run: ``skillstate bench tokens --steps 50`` (``--json`` for the raw series) or
``python benchmarks/tokens.py``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.engine.agent import Agent
from skillstate.engine.policy import HistoryPolicy, ModelPolicy, ScriptedPolicy, StatePolicy
from skillstate.engine.runtime import Runtime
from skillstate.llm.base import Message
from skillstate.llm.replay import ScriptedProvider
from skillstate.llm.tokens import tokenizer_name
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState
from skillstate.state.view import View
from skillstate.store.memory import MemoryStore

__all__ = [
    "CHECKPOINTS",
    "Report",
    "TokenSeries",
    "build_agent",
    "compare",
    "run",
    "scripted_model",
]

CHECKPOINTS = (1, 10, 25, 50)
"""Steps whose prompt sizes are reported (those within the run)."""

CONSTRAINTS = (
    "Never approve a refund above 500 EUR without a manager's sign-off.",
    "Escalate every record flagged as possible fraud; never close it yourself.",
    "Do not contact a customer who opted out of messages.",
    "Keep customer personal data out of summaries.",
)

_TEXT = """parcel delayed customs invoice corrected carrier warehouse Lisbon refund partial
shipping fee policy tracking scanned depot courier signature missing damaged box
replacement requested voucher issued apology callback scheduled address verified"""
_WORDS = tuple(_TEXT.split())


class ReviewState(AgentState):
    """The card of the review task: how far it got and a few running totals."""

    target: int = 50
    reviewed: int = 0
    flagged: int = 0
    refund_total: float = 0.0


def fetch_record(n: int) -> dict[str, Any]:
    """A deterministic, realistic order record of about 500 tokens."""
    rng = random.Random(n)
    notes = [" ".join(rng.choice(_WORDS) for _ in range(14)) for _ in range(8)]
    return {
        "record": n,
        "order": f"A-{10_000 + n}",
        "customer": {"id": f"C-{rng.randrange(10**6):06d}", "tier": rng.choice("ABC")},
        "amount_eur": round(rng.uniform(10, 900), 2),
        "flags": ["possible_fraud"] if rng.random() < 0.1 else [],
        "events": [
            {"at": f"2026-07-{1 + i:02d}T{rng.randrange(24):02d}:00Z", "note": note}
            for i, note in enumerate(notes)
        ],
    }


def build_agent(provider_policy: ModelPolicy | None = None) -> Agent[Any]:
    """The review agent; its policy is replaced by the model policy under test."""
    skills = SkillRegistry()

    @skills.skill(
        outputs=["reviewed", "flagged", "refund_total"],
        tools=["fetch_record"],
        step="reviewing",
        reads=["reviewed", "target", "flagged", "refund_total"],
    )
    def review_next(state: ReviewState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Fetch the next record and review it."""
        n = state.reviewed + 1
        record = ctx.call("fetch_record", n=n)
        flagged = state.flagged + bool(record["flags"])
        summary = f"record {n}: {record['amount_eur']} EUR" + (
            " flagged" if record["flags"] else ""
        )
        return Outcome(
            writes={
                "reviewed": n,
                "flagged": flagged,
                "refund_total": round(state.refund_total + record["amount_eur"] * 0.1, 2),
            },
            summary=summary,
            evidence=[ctx.evidence(summary)],
        )

    @review_next.verifier
    def _counted(state: ReviewState, outcome: Outcome) -> bool:
        return state.reviewed <= state.target

    @review_next.precondition
    def _more(state: ReviewState) -> bool:
        return state.reviewed < state.target

    def rules(view: View[Any]) -> Action:
        if "review_next" in view.skills:
            return CallSkill(skill="review_next", reason="next record")
        return Finish(summary="all records reviewed", reason="done")

    return Agent(
        name="review",
        description="Review order records one by one and keep running totals.",
        state_type=ReviewState,
        machine=StateMachine(
            {"init": ["reviewing"], "reviewing": ["reviewing", "done"], "done": []},
            initial="init",
        ),
        skills=skills,
        policy=provider_policy or ScriptedPolicy(rules),
        tools={"fetch_record": fetch_record},
        goal="Review every order record and report flagged ones and the refund total.",
        constraints=CONSTRAINTS,
    )


def scripted_model(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
    """A deterministic "model": call the one skill the schema offers, else finish.

    It looks only at the response schema, which both policies build the same way
    from the state, so both take the same decisions.
    """
    for branch in (schema or {}).get("anyOf", []):
        skill = branch.get("properties", {}).get("skill", {}).get("const")
        if skill:
            return json.dumps(
                {"kind": "call_skill", "skill": skill, "params": {}, "reason": "next record"}
            )
    return json.dumps({"kind": "finish", "summary": "all records reviewed", "reason": "done"})


@dataclass(frozen=True)
class TokenSeries:
    """Prompt tokens of every decision of one run, in order."""

    policy: str
    prompts: list[int]
    decisions: int

    def at(self, step: int) -> int | None:
        return self.prompts[step - 1] if 0 < step <= len(self.prompts) else None

    @property
    def total(self) -> int:
        return sum(self.prompts)


def run(steps: int, policy: str) -> TokenSeries:
    """Drive the review task for ``steps`` records with ``policy`` (state or history)."""
    provider = ScriptedProvider(scripted_model, name="scripted-model")
    model_policy: ModelPolicy = (
        StatePolicy(provider) if policy == "state" else HistoryPolicy(provider)
    )
    agent = build_agent(model_policy)
    store = MemoryStore()
    runtime = Runtime(agent, store, max_steps=steps + 5)
    runtime.start("review", target=steps)
    result = runtime.run("review")
    if result.stopped != "completed":
        raise RuntimeError(f"the {policy} run stopped early: {result.stopped}")
    prompts = [e.usage.prompt for e in store.events("review") if e.usage and e.actor == "policy"]
    # The last decision is the finish; the series is one prompt per review step.
    return TokenSeries(policy=policy, prompts=prompts[:steps], decisions=len(prompts))


@dataclass(frozen=True)
class Report:
    steps: int
    state: TokenSeries
    history: TokenSeries
    tokenizer: str

    def rows(self) -> list[tuple[str, int, int, float]]:
        points = [s for s in CHECKPOINTS if s <= self.steps]
        if self.steps not in points:
            points.append(self.steps)
        out = []
        for step in points:
            state, history = self.state.at(step) or 0, self.history.at(step) or 0
            out.append((f"step {step}", state, history, state / history if history else 0.0))
        total_s, total_h = self.state.total, self.history.total
        out.append(("total", total_s, total_h, total_s / total_h if total_h else 0.0))
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "tokenizer": self.tokenizer,
            "state": self.state.prompts,
            "history": self.history.prompts,
        }


def compare(steps: int) -> Report:
    """Both runs, side by side."""
    return Report(
        steps=steps,
        state=run(steps, "state"),
        history=run(steps, "history"),
        tokenizer=tokenizer_name(),
    )
