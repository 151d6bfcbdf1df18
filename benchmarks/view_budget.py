"""What fitting a view into its token budget costs, against rendering it whole.

A budgeted view (``Agent(view_budget=...)``, on by default for model policies) hides
lines by priority until it fits (:mod:`skillstate.state.budget`). This renders cards
with 30, 300 and 3,000 applicable skills and 50 or 200 long facts (plus 20 steps,
20 evidence items and 10 failed attempts) under a budget, and prints, per case, the
time of the budgeted view against the whole view measured in the same run (best of
``--runs``), how many lines were hidden, the overrun, and how often the whole text
was counted (the fit counts each hideable line once and the whole text a few times,
never once per line hidden).

    .venv/bin/python benchmarks/view_budget.py            # --runs 5, budget 2000
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from pydantic import BaseModel

from skillstate import AgentState, Evidence, Outcome, Skill, StepRecord
from skillstate.llm.tokens import count_tokens, tokenizer_name
from skillstate.state import budget as budget_module
from skillstate.state.model import FailedAttempt
from skillstate.state.view import render_view


class Params(BaseModel):
    x: int = 0


class Report(AgentState):
    notes: str | None = None
    summary: str | None = None


def skills(n: int) -> list[Skill[Any, Any]]:
    def run(state: Report, params: Params, ctx: Any) -> Outcome:
        return Outcome()

    return [
        Skill(
            run,
            name=f"skill_{i:04d}",
            description=f"does thing number {i} to the report",
            params=Params,
            verify=lambda s, o: bool(s.task_id),
        )
        for i in range(n)
    ]


def card(facts: int) -> Report:
    state = Report(
        task_id="t",
        goal="ship the report",
        constraints=("never touch prod", "EUR only"),
        notes="n" * 300,
        summary="s" * 300,
        facts={f"fact_{i}": "value " * 60 for i in range(facts)},
    )
    state = state.with_evidence(
        Evidence(kind="k", source="tool", summary="x" * 150, ref="sha256:" + "a" * 64)
        for _ in range(20)
    )
    for n in range(20):
        state = state.with_step(StepRecord(id=f"{n:04d}-s", step="init", action="call_skill"))
    tried = tuple(FailedAttempt(action=f"a{i}", reason="r" * 80) for i in range(10))
    return state.replace(tried=tried)


def best(state: Report, offered: list[Skill[Any, Any]], budget: int | None, runs: int) -> float:
    """The fastest of ``runs`` renders (and counts) of the view, in milliseconds."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        _ = render_view(state, skills=offered, budget=budget).tokens
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget", type=int, default=2000)
    args = parser.parse_args()
    count_tokens("load the tokenizer before timing")
    wholes = [0]
    counted = budget_module.count_tokens

    def counting(text: str) -> int:
        wholes[0] += text.startswith("## Task")
        return counted(text)

    budget_module.count_tokens = counting  # type: ignore[assignment]
    print(f"budget {args.budget} tokens, tokenizer {tokenizer_name()}, best of {args.runs}")
    header = "skills  facts  whole ms  budgeted ms  ratio  hidden  overrun  whole-text counts"
    print(header)
    for n_skills in (30, 300, 3000):
        offered = skills(n_skills)
        for n_facts in (50, 200):
            state = card(n_facts)
            whole = best(state, offered, None, args.runs)
            fitted = best(state, offered, args.budget, args.runs)
            wholes[0] = 0
            view = render_view(state, skills=offered, budget=args.budget)
            _ = view.tokens
            print(
                f"{n_skills:6d} {n_facts:6d} {whole:9.1f} {fitted:12.1f} {fitted / whole:6.2f} "
                f"{len(view.dropped):7d} {view.overrun:8d} {wholes[0]:18d}"
            )


if __name__ == "__main__":
    main()
