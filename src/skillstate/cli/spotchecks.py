"""``skillstate spot-checks``: the verified steps people review, their verdicts, the metrics.

``spot-checks [--pending]`` lists the marked steps (:mod:`skillstate.ops.spotchecks`),
``spot-checks review TASK STEP --verdict correct|incorrect|unsure --note N`` records a
verdict (:mod:`skillstate.ops.review`: audited, never lost to a concurrent reviewer),
``spot-checks report`` prints the precision of verify with its Wilson interval, overall,
by skill and by agent (:mod:`skillstate.ops.spot_report`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from skillstate.cli._app import ActorOpt, JsonOpt, StoreOpt, app
from skillstate.cli._common import _store

if TYPE_CHECKING:
    from skillstate.eval.forced_metrics import Rate
    from skillstate.ops.review import Review
    from skillstate.ops.spot_report import SpotCheckGroup
    from skillstate.ops.spotchecks import RuleFor, SampledStep


class _ListByDefault(TyperGroup):
    """``spot-checks`` alone (or with list's options) is ``spot-checks list``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click Context
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["list", *args]
        return super().parse_args(ctx, args)


spot_app = typer.Typer(
    cls=_ListByDefault,
    help="Human spot-checks of verified steps: the marked steps, verdicts, and the "
    "precision of verify. skillstate spot-checks alone lists the marked steps.",
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(spot_app, name="spot-checks")

AgentOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--agent",
        help="An agent (MODULE:ATTR) whose spot_checks rule applies to the tasks whose card "
        "names it (repeatable); other stored references go through the configured "
        "allow-list. Tasks without a usable agent use [tool.skillstate.spot_checks].",
        show_default=False,
    ),
]


def _rules(agents: list[str] | None) -> RuleFor:
    from skillstate.engine.agent import load_agent
    from skillstate.ops.spotchecks import config_rule, rule_resolver

    for ref in agents or []:
        load_agent(ref, search_cwd=True)  # a typo fails now, not silently as "no marks"
    return rule_resolver(agents or (), fallback=config_rule())


@spot_app.command("list")
def list_(
    store: StoreOpt = None,
    json_: JsonOpt = False,
    pending: Annotated[
        bool, typer.Option("--pending", help="Only the steps nobody has reviewed yet.")
    ] = False,
    agent: AgentOpt = None,
) -> None:
    """The marked verified steps: task, step, skill, params, and their verdicts."""
    from skillstate.ops.review import spot_check_queue

    rule_for = _rules(agent)
    db = _store(store, create=False)
    try:
        rows = spot_check_queue(db, rule_for, pending=pending)
    finally:
        db.close()
    if json_:
        typer.echo(json.dumps([_row_json(s, r) for s, r in rows], ensure_ascii=False, indent=2))
        return
    if not rows:
        which = "unreviewed " if pending else ""
        typer.echo(f"no {which}steps marked for a spot check in {db.url}")
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None)
    for name in ("task", "step", "v", "skill", "params", "verdicts"):
        # ids are folded, never cut: they are what `spot-checks review` is given
        table.add_column(name, overflow="fold" if name in ("task", "step") else "ellipsis")
    for step, reviews in rows:
        said = ", ".join(f"{r.verdict} by {r.by}" for r in reviews) or "pending"
        params = json.dumps(step.params, ensure_ascii=False, sort_keys=True)
        cells = (step.task_id, step.step_id, str(step.version), step.skill, params, said)
        table.add_row(*(escape(c) for c in cells))
    Console(soft_wrap=True).print(table)
    waiting = sum(1 for _, r in rows if not r)
    typer.echo(f"{len(rows)} marked step(s), {waiting} not reviewed, in {db.url}")


@spot_app.command("review")
def review(
    task_id: Annotated[str, typer.Argument(help="The task.", show_default=False)],
    step: Annotated[str, typer.Argument(help="The step's id (0003-refund).", show_default=False)],
    verdict: Annotated[
        str,
        typer.Option(
            "--verdict", help="correct, incorrect or unsure (required).", show_default=False
        ),
    ],
    note: Annotated[str, typer.Option("--note", help="What you saw (optional).")] = "",
    store: StoreOpt = None,
    actor: ActorOpt = None,
    agent: AgentOpt = None,
) -> None:
    """Record your verdict on a marked step: an audited event of the agent's review record."""
    from skillstate.control.approvals import default_actor
    from skillstate.ops.review import check_note, check_verdict, record_id, review_step

    check_verdict(verdict)  # bad input is refused before the store is opened
    check_note(note)
    rule_for = _rules(agent)
    db = _store(store, create=False)
    try:
        given = review_step(
            db, rule_for, task_id, step, verdict=verdict, note=note, by=actor or default_actor()
        )
        scope = _scope(db, task_id)
    finally:
        db.close()
    typer.echo(
        f"recorded {given.verdict} by {given.by} on {task_id} {step} "
        f"(#{given.seq} of {record_id(scope)})"
    )


def _scope(db: Any, task_id: str) -> str:
    from skillstate.ops.spotchecks import scope_of

    return scope_of(db.load(task_id, verify=False).state)


@spot_app.command("report")
def report(store: StoreOpt = None, json_: JsonOpt = False, agent: AgentOpt = None) -> None:
    """Sampled, reviewed, and the precision of verify (judged correct of judged) with its
    95% Wilson interval: overall, by skill, by agent."""
    from skillstate.ops.review import spot_check_queue
    from skillstate.ops.spot_report import spot_check_report

    rule_for = _rules(agent)
    db = _store(store, create=False)
    try:
        found = spot_check_report(spot_check_queue(db, rule_for))
    finally:
        db.close()
    if json_:
        typer.echo(json.dumps(found, ensure_ascii=False, indent=2))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(
        "group",
        "sampled",
        "reviewed",
        "correct",
        "incorrect",
        "unsure",
        "precision (95% CI)",
        box=None,
    )
    groups = [("all", found["overall"])]
    groups += [(f"skill {k}", g) for k, g in found["by_skill"].items()]
    groups += [(f"agent {k}", g) for k, g in found["by_agent"].items()]
    for name, group in groups:
        table.add_row(escape(name), *_counts(group), _rate(group["verify_precision"]))
    Console(soft_wrap=True).print(table)
    typer.echo(
        f"precision = correct / (correct + incorrect) of the latest verdict per step; "
        f"{found['overall']['disagreements']} step(s) with disagreeing reviewers; {db.url}"
    )


def _counts(group: SpotCheckGroup) -> list[str]:
    keys = ("sampled", "reviewed", "correct", "incorrect", "unsure")
    return [str(group[k]) for k in keys]  # type: ignore[literal-required]


def _rate(rate: Rate) -> str:
    if rate["rate"] is None:
        return "-"
    return f"{rate['rate']:.2f} [{rate['low']:.2f}, {rate['high']:.2f}] (n={rate['n']})"


def _row_json(step: SampledStep, reviews: list[Review]) -> dict[str, Any]:
    return {
        "task_id": step.task_id,
        "step": step.step_id,
        "version": step.version,
        "skill": step.skill,
        "scope": step.scope,
        "params": step.params,
        "verify": step.event.verdict.model_dump() if step.event.verdict else None,
        "evidence": step.evidence_refs,
        "reviews": [r.model_dump(mode="json") for r in reviews],
    }
