"""What spot-checks cost: per task on the write path, and to read the queue and the report.

Two measurements on a SQLite file:

1. **Per task.** A task of 12 verified steps by an agent with ``spot_checks`` (rate 0.5)
   against the same agent without (the baseline), run in turns, best of ``--runs``. The
   marks are computed on read (:mod:`skillstate.ops.spotchecks`), so the two should be
   the same within the noise, which the baseline run twice (an A/A control) measures.
2. **Reading.** ``spot_check_queue`` (every marked step with its verdicts) and the
   report over ``--tasks`` tasks of 12 steps, a tenth of the marked steps reviewed:
   time, steps read, steps marked, and the share marked against the rate.

    .venv/bin/python benchmarks/spotchecks.py           # --tasks 200 --per-task 20 --runs 6
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    View,
)
from skillstate.engine.actions import Action
from skillstate.ops.review import record_verdict, spot_check_queue
from skillstate.ops.spot_report import spot_check_report
from skillstate.ops.spotchecks import SpotChecks
from skillstate.store import open_store

STEPS = 12
RULE = SpotChecks(rate=0.5, seed=3)


class CountState(AgentState):
    n: int = 0
    goal_n: int = STEPS


skills = SkillRegistry()


@skills.skill(outputs=["n"])
def bump(state: CountState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Add one to n."""
    return Outcome(writes={"n": state.n + 1}, summary=f"n={state.n + 1}", value=state.n + 1)


@bump.verifier
def _(state: CountState, outcome: Outcome) -> bool:
    return bool(state.n == outcome.value)


def decide(view: View[CountState]) -> Action:
    if view.state.n < view.state.goal_n:
        return CallSkill(skill="bump")
    return Finish(summary=f"counted to {view.state.n}")


WITH_RULE: Agent[Any] = Agent(
    name="counter",
    state_type=CountState,
    machine=StateMachine({"init": []}),
    skills=skills,
    policy=ScriptedPolicy(decide),
    spot_checks=RULE,
)


def _task_ms(agent: Any, db: Path, tasks: int, tag: str) -> float:
    store = open_store(f"sqlite:///{db}")
    runtime = Runtime(agent, store)
    try:
        start = time.perf_counter()
        for i in range(tasks):
            runtime.start(f"{tag}-{i}", goal_n=STEPS)
            assert runtime.run(f"{tag}-{i}").stopped == "completed"
        return (time.perf_counter() - start) * 1000 / tasks
    finally:
        store.close()


def per_task(root: Path, tasks: int, runs: int) -> dict[str, float]:
    """Best ms per task of each case. The baseline runs twice (an A/A control): the gap
    between its two copies is the noise any other gap has to beat."""
    without = dataclasses.replace(WITH_RULE, spot_checks=None)
    cases = [("without", without), ("without again", without), ("with", WITH_RULE)]
    best = dict.fromkeys((name for name, _ in cases), float("inf"))
    for run in range(runs):  # the cases take turns, each going first in turn, so load
        # from elsewhere on the machine hits them alike
        shift = run % len(cases)
        for name, agent in cases[shift:] + cases[:shift]:
            ms = _task_ms(agent, root / f"{name.replace(' ', '-')}-{run}.db", tasks, name[:7])
            best[name] = min(best[name], ms)
    return best


def reading(root: Path, tasks: int) -> dict[str, Any]:
    db = root / "queue.db"
    _task_ms(WITH_RULE, db, tasks, "q")
    store = open_store(f"sqlite:///{db}")
    rule = RULE

    def rule_for(task_id: str, card: dict[str, Any]) -> SpotChecks:
        return rule

    try:
        rows = spot_check_queue(store, rule_for)
        for step, _ in rows[::10]:
            record_verdict(
                store,
                scope=step.scope,
                task=step.task_id,
                step=step.step_id,
                step_version=step.version,
                skill=step.skill,
                verdict="correct",
                note="",
                by="bench",
            )
        start = time.perf_counter()
        rows = spot_check_queue(store, rule_for)
        queue_s = time.perf_counter() - start
        start = time.perf_counter()
        report = spot_check_report(spot_check_queue(store, rule_for))
        report_s = time.perf_counter() - start
    finally:
        store.close()
    return {
        "steps": tasks * STEPS,
        "marked": len(rows),
        "rate": rule.rate,
        "reviewed": report["overall"]["reviewed"],
        "queue_s": queue_s,
        "report_s": report_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200, help="tasks read by the queue")
    parser.add_argument("--per-task", type=int, default=20, help="tasks per timed run")
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    print(f"# spot-checks, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        best = per_task(root, args.per_task, args.runs)
        base = best["without"]
        print(
            f"per task ({STEPS} verified steps, {args.per_task} tasks, best of {args.runs} "
            "interleaved runs, SQLite file):"
        )
        again = best["without again"]
        print(f"  no spot_checks (baseline)     {base:7.2f} ms  1.00x")
        print(f"  no spot_checks again (A/A)    {again:7.2f} ms  {again / base:.2f}x")
        print(f"  spot_checks rate 0.5          {best['with']:7.2f} ms  {best['with'] / base:.2f}x")
        found = reading(root, args.tasks)
    share = found["marked"] / found["steps"]
    print(
        f"queue over {args.tasks} tasks: {found['steps']} verified steps read, "
        f"{found['marked']} marked ({share:.3f} at rate {found['rate']}), "
        f"{found['queue_s'] * 1000:.0f} ms; report with {found['reviewed']} reviewed: "
        f"{found['report_s'] * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
