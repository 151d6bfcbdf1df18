"""Terminal rendering for the CLI (rich). Kept apart so commands stay short."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from skillstate.errors import SkillstateError

if TYPE_CHECKING:
    from skillstate.bench.tokens import Report as TokenReport
    from skillstate.engine.doctor import DoctorReport
    from skillstate.engine.replay import Attribution
    from skillstate.engine.replay import Step as TimelineStep
    from skillstate.engine.results import StepReport
    from skillstate.engine.transcript import DecisionTokens
    from skillstate.events import Event
    from skillstate.llm.base import Prices
    from skillstate.state.model import AgentState
    from skillstate.store.base import CheckpointInfo, Store

console = Console(highlight=False, soft_wrap=False)
errors = Console(stderr=True, highlight=False)

PIPED_MAX_WIDTH = 400
"""The widest a table is drawn when stdout is not a terminal (and COLUMNS is unset)."""


def print_table(table: Table) -> None:
    """``table`` on stdout: at the terminal's width, or piped, as wide as its content.

    Without a terminal rich assumes 80 columns, which squeezed ``log``'s diff column
    to about 18 characters (a line of ``skillstate log T > file`` held a few words).
    Piped, a table gets the width its content needs (up to :data:`PIPED_MAX_WIDTH`);
    ``COLUMNS`` still sets the width when given.
    """
    if console.is_terminal or os.environ.get("COLUMNS"):
        console.print(table)
        return
    options = console.options.update_width(PIPED_MAX_WIDTH)
    natural = Measurement.get(console, options, table).maximum
    width = max(console.width, min(natural, PIPED_MAX_WIDTH))
    Console(file=console.file, width=width, highlight=False, soft_wrap=False).print(table)


def patch_lines(patch: Sequence[dict[str, Any]], width: int = 100) -> list[str]:
    lines = []
    for op in patch:
        value = ""
        if "value" in op:
            value = " = " + json.dumps(op["value"], ensure_ascii=False, default=str)
            if len(value) > width:
                value = value[: width - 1] + "…"
        lines.append(f"{op['op']:<7} {op['path']}{value}")
    return lines


class StepPrinter:
    """Observer that prints each committed step; ``verbose`` adds the view and the diff."""

    def __init__(self, *, verbose: bool, store: Store | None = None) -> None:
        self.verbose = verbose
        self.store = store
        """Where tracebacks are read from (``SKILLSTATE_DEBUG=1`` prints them), and the
        decisions a resumed task made before this process."""
        self._decisions: dict[str, int] = {}

    def __call__(self, report: StepReport[Any]) -> None:
        event = report.event
        if self.verbose and report.view is not None:
            # Numbered as the token table (`run --compare`, the demos) numbers them:
            # the task's Nth decision, with the version that recorded it.
            title = f"v{event.version}"
            if event.actor == "policy":
                title = f"decision {self._decision_number(event)} · {title}"
            console.rule(title, style="cyan")
            console.print(
                Panel(
                    Text(report.view.text),
                    title=f"view · {report.view.tokens} tokens ({report.view.tokenizer})",
                    border_style="dim",
                )
            )
        verdict = ""
        if event.verdict is not None:
            verdict = " [green]verified[/]" if event.verdict.ok else " [red]refused[/]"
        action = json.dumps(event.action, ensure_ascii=False)
        # Anything that came from a user, a model or a tool is escaped: it is not markup.
        console.print(f"[bold]v{event.version}[/] {event.actor}: {escape(action)}{verdict}")
        if event.error:
            console.print(f"  [red]error:[/] {escape(event.error)}")
        if os.environ.get("SKILLSTATE_DEBUG") and self.store is not None:
            self._print_traces(report)
        if self.verbose:
            for line in patch_lines(event.patch):
                console.print(f"  [dim]{escape(line)}[/]")

    def _decision_number(self, event: Event) -> int:
        """1 for the task's first decision, and so on (earlier ones read from the store)."""
        task = event.task_id
        if task not in self._decisions:
            before = 0
            if self.store is not None:
                try:
                    events = self.store.events(task)
                except SkillstateError:  # numbering is cosmetic: never fail a run on it
                    events = []
                before = sum(e.actor == "policy" and e.version < event.version for e in events)
            self._decisions[task] = before
        self._decisions[task] += 1
        return self._decisions[task]

    def _print_traces(self, report: StepReport[Any]) -> None:
        from skillstate.store.sealing import read_artifact

        assert self.store is not None
        seen = set(report.before.errors)
        for entry in report.after.errors:
            if entry in seen or entry.trace is None:
                continue
            try:
                text = read_artifact(self.store, entry.trace).decode("utf-8", "replace")
            except SkillstateError as exc:
                text = f"(traceback {entry.trace} unreadable: {exc})"
            console.print(f"  [dim]traceback of {entry.kind} in {entry.skill}:[/]")
            console.print(text, markup=False, highlight=False)


def print_state(state: AgentState) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    data = state.to_view_json()  # sensitive fields show as ***

    def row(key: str, value: str) -> None:
        table.add_row(Text(key), Text(value))  # Text: card values are data, never markup

    for key in ("task_id", "status", "goal", "current_step", "version", "agent"):
        row(key, str(data[key]))
    if state.definition:  # the definition it is pinned to (skillstate.definitions)
        carried = f" (carried across {', '.join(state.carried_patches)})"
        row("definition", state.definition[:19] + (carried if state.carried_patches else ""))
    if state.question:
        row("question", state.question)
    if state.pending_approval is not None:
        from skillstate.state.protect import masked_params

        call = state.pending_approval
        shown = json.dumps(masked_params(call.params), ensure_ascii=False)
        row("pending approval", f"{call.skill} {shown} {call.reason}".strip())
        if call.tool is not None:  # the approval is for one tool call of the skill
            args = json.dumps(masked_params(call.tool.args), ensure_ascii=False)
            row("tool call", f"{call.tool.tool} {args}")
    for c in state.constraints:
        row("constraint", c)
    row("completed", ", ".join(s.id for s in state.completed_steps) or "-")
    row("pending", ", ".join(state.pending_steps) or "-")
    for name in state.custom_fields():
        row(name, json.dumps(data[name], ensure_ascii=False))
    for key, value in state.facts.items():
        row(f"facts.{key}", json.dumps(value, ensure_ascii=False))
    for e in state.evidence:
        row("evidence", f"[{e.source}] {e.summary} {e.ref or ''}")
    for err in state.errors[-5:]:
        row("error", f"{err.kind}: {err.message}")
    if state.last_decision:
        d = state.last_decision
        row("last_decision", f"{d.action} {d.target or ''} {d.reason}".strip())
    console.print(Panel(table, title=escape(f"state card · {state.task_id}")))


def print_events(events: Sequence[Event]) -> None:
    table = Table(title="events")
    # Who and why (skillstate.audit): a column only when some event records them.
    audited = any(e.by or e.reason for e in events)
    for col in ("v", "actor", "by / why" if audited else "", "action", "verdict", "tokens in/out"):
        if col:
            table.add_column(col)
    table.add_column("diff")
    for e in events:
        verdict = (
            "-" if e.verdict is None else ("ok" if e.verdict.ok else f"failed: {e.verdict.reason}")
        )
        who = [(e.by or "-") + (f"\n{e.reason}" if e.reason else "")] if audited else []
        cells = (
            str(e.version),
            e.actor,
            *who,
            _label(e),
            verdict,
            _tokens_cell(e),
            "\n".join(patch_lines(e.patch, width=60)),
        )
        table.add_row(*(Text(c) for c in cells))
    print_table(table)


def _label(e: Event) -> str:
    """The event's label; a person's decision on an approval also says who and why; a
    decision made with a skill retriever, the best candidates it was offered."""
    if e.candidates:
        best = ", ".join(f"{c.skill} {c.score:.2f}" for c in e.candidates[:3])
        more = " …" if len(e.candidates) > 3 else ""
        return f"{e.label}\n(of {len(e.candidates)}: {best}{more})"
    if e.action.get("children"):  # fan-out: a join, a cascade, detached children
        from skillstate.cli.tree import family_lines

        return "\n".join([e.label, *family_lines(e.action)])
    if e.action.get("kind") not in ("approve", "reject"):
        return e.label
    why = e.action.get("reason")
    return f"{e.label} by {e.action.get('actor') or '?'}" + (f": {why}" if why else "")


def _tokens_cell(e: Event) -> str:
    if e.usage is None:
        return str(e.view_tokens) if e.view_tokens is not None else "-"
    u = e.usage
    mark = "~" if u.estimated else ""
    extra = f" ({u.repairs} repairs)" if u.repairs else ""
    return f"{u.prompt}{mark}/{u.completion}{mark}{extra}"


def print_checkpoints(items: Sequence[CheckpointInfo], labels: dict[int, str]) -> None:
    table = Table(title="checkpoints")
    for col in ("version", "committed at", "by", "stored as", "bytes"):
        table.add_column(col)
    for c in items:
        table.add_row(
            str(c.version),
            c.created_at.isoformat(timespec="seconds"),
            escape(labels.get(c.version, "-")),
            "snapshot" if c.snapshot else "delta",
            str(c.size),
        )
    print_table(table)


def print_comparison(rows: Sequence[DecisionTokens], tokenizer: str) -> None:
    if not rows:
        return
    table = Table(title=f"prompt tokens per decision ({tokenizer})")
    for col in ("decision", "v", "state view", "full history", "view / history"):
        table.add_column(col, justify="right")
    for i, r in enumerate(rows, 1):
        ratio = f"{r.state_view / r.history:.2f}"
        table.add_row(str(i), str(r.version), str(r.state_view), str(r.history), ratio)
    total_view = sum(r.state_view for r in rows)
    total_hist = sum(r.history for r in rows)
    total_ratio = f"{total_view / total_hist:.2f}"
    table.add_row("total", "", str(total_view), str(total_hist), total_ratio)
    print_table(table)


def print_doctor(report: DoctorReport) -> None:
    head = report.head if report.head is not None else "unreadable"
    schema = "validated against the agent's schema" if report.schema_checked else "JSON only"
    console.print(
        f"task {escape(report.task_id)}: head {head}, {report.checked} kept checkpoints "
        f"({report.snapshots} snapshots) rebuilt and replayed; {schema}"
    )
    sealed = report.sealed
    if sealed:
        versions = ", ".join(str(f.version) for f in sealed[:10])
        more = " ..." if len(sealed) > 10 else ""
        console.print(
            f"[yellow]sealed, key needed[/]: {len(sealed)} version(s) hold sealed values and "
            f"could not be validated without SKILLSTATE_KEY ({versions}{more})"
        )
    if report.healthy:
        console.print(
            "[green]healthy[/]: every kept checkpoint loads; deltas replay to the head; "
            "the audit log has every version"
        )
        return
    table = Table(title="problems")
    table.add_column("version")
    table.add_column("problem")
    for finding in report.damage:
        version = "-" if finding.version is None else str(finding.version)
        table.add_row(version, escape(finding.message))
    print_table(table)
    console.print(f"[red]corrupted[/]: {len(report.damage)} problem(s); nothing was changed")


def print_tokens(events: Sequence[Event], prices: Prices | None) -> None:
    table = Table(title="tokens per decision")
    columns = ("v", "decision", "model", "prompt", "completion", "cached", "calls", "repairs")
    for col in (*columns, "view / budget"):
        table.add_column(col, justify="right" if col not in {"decision", "model"} else "left")
    if prices is not None:
        table.add_column("cost", justify="right")
    totals = [0, 0, 0, 0, 0]
    cost_total = 0.0
    for e in events:
        u = e.usage
        if u is None:
            continue
        row = [
            str(e.version),
            escape(e.label),
            escape(u.model or ("scripted" if not u.calls else "-")),
            f"{u.prompt:,}" + ("~" if u.estimated else ""),
            f"{u.completion:,}",
            f"{u.cached:,}",
            str(u.calls),
            str(u.repairs),
            view_cell(e),
        ]
        for i, value in enumerate((u.prompt, u.completion, u.cached, u.calls, u.repairs)):
            totals[i] += value
        if prices is not None:
            cost = prices.cost(u.prompt, u.completion, u.cached)
            cost_total += cost
            row.append(f"{cost:.6f}")
        table.add_row(*row)
    total_row = ["", "total", "", *(f"{t:,}" for t in totals), ""]
    if prices is not None:
        total_row.append(f"{cost_total:.6f}")
    table.add_row(*total_row, style="bold")
    print_table(table)
    console.print("[dim]~ = counted offline (no provider usage)[/]")
    over = [e for e in events if e.view_overrun]
    if over:
        worst = max(over, key=lambda e: e.view_overrun or 0)
        console.print(
            f"[yellow]{len(over)} decision(s) saw a view over its budget[/] even with "
            f"everything hideable hidden (worst: v{worst.version}, {worst.view_overrun:,} "
            "tokens over): raise Agent(view_budget=...), or keep less in the card"
        )


def view_cell(e: Event) -> str:
    """``1,980 / 2,000``; ``2,310 / 2,000 (+310 over)`` for an overrun; ``-`` if unknown."""
    if e.view_tokens is None:
        return "-"
    if e.view_budget is None:
        return f"{e.view_tokens:,}"
    over = f" (+{e.view_overrun:,} over)" if e.view_overrun else ""
    return f"{e.view_tokens:,} / {e.view_budget:,}{over}"


def print_token_bench(report: TokenReport) -> None:
    table = Table(
        title=f"prompt tokens per decision, {report.steps}-step task ({report.tokenizer})"
    )
    for col in ("", "state policy", "history policy", "state / history"):
        table.add_column(col, justify="right")
    for label, state, history, ratio in report.rows():
        table.add_row(label, f"{state:,}", f"{history:,}", f"{ratio:.1%}")
    print_table(table)
    if report.steps >= 10:
        state_drift = (report.state.at(report.steps) or 0) / (report.state.at(10) or 1) - 1
        history_growth = (report.history.at(report.steps) or 0) / (report.history.at(10) or 1)
        console.print(
            f"step {report.steps} vs step 10: state prompt {state_drift:+.1%}, "
            f"history prompt x{history_growth:.1f}"
        )


def print_timeline(steps: Sequence[TimelineStep], first_bad: Attribution | None) -> None:
    table = Table(title="timeline")
    for col in ("v", "#", "by", "step", "verdict", "state before → after"):
        table.add_column(col)
    bad_version = first_bad.version if first_bad else None
    for step in steps:
        lines = [
            f"{key}: {_brief(before)} → {_brief(after)}"
            for key, (before, after) in step.changes.items()
        ]
        marker = "[red]✗[/] " if step.version == bad_version else ""
        table.add_row(
            marker + str(step.version),
            str(step.decision) if step.decision is not None else "",
            step.actor,
            escape(step.label),
            escape(step.verdict or ("error: " + step.error if step.error else "-")),
            escape("\n".join(lines)) or "-",
        )
    print_table(table)
    if first_bad is None:
        console.print("[green]no step failed its verify, logged an error or diverged[/]")
        return
    where = f"v{first_bad.version}" if first_bad.version is not None else "(not committed)"
    label = next((s.label for s in steps if s.version == first_bad.version), "")
    decision = f" (decision {first_bad.decision})" if first_bad.decision else ""
    console.print(
        f"[red]first bad step[/]: {where}{decision} {escape(label)}: {escape(first_bad.reason)}"
    )


def _brief(value: Any, width: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"
