"""``skillstate alerts``: the alert rules evaluated over a store (:mod:`skillstate.ops`).

Lists what fires now (rule, task, since, detail), as a table or ``--json``; with
``--watch SECONDS`` evaluates again every period (Ctrl-C stops it), and with
``--webhook URL`` posts each change (alerts that started or stopped firing). When
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set the counts also leave as the OpenTelemetry gauge
``skillstate.alerts.firing`` (attribute ``rule``).
Exit code: 0 nothing fires, 10 some alert fires (the last evaluation's, with
``--watch``), 2 bad settings.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated

import typer

from skillstate.cli._app import JsonOpt, StoreOpt, app
from skillstate.cli._common import _store

if TYPE_CHECKING:
    from skillstate.integrations.otel import OTelTracer
    from skillstate.ops.alerts import Alert
    from skillstate.ops.sinks import OTelAlerts

FIRING_EXIT = 10
"""The exit code when some alert fires (README's list of exit codes)."""


@app.command("alerts")
def alerts(
    store: StoreOpt = None,
    json_: JsonOpt = False,
    watch: Annotated[
        float | None,
        typer.Option("--watch", help="Evaluate again every SECONDS until Ctrl-C.", min=0.1),
    ] = None,
    webhook: Annotated[
        str | None,
        typer.Option("--webhook", help="POST each change of the firing alerts here (JSON)."),
    ] = None,
    stale_after: Annotated[
        str | None, typer.Option(help="A running task with no commit for this long (15m).")
    ] = None,
    waiting_after: Annotated[
        str | None, typer.Option(help="A task waiting on a person for this long (1d).")
    ] = None,
    max_retries: Annotated[
        int | None, typer.Option(help="Failed attempts of one step above which it alerts (3).")
    ] = None,
    budget_warn_at: Annotated[
        float | None, typer.Option(help="The share of a budget that alerts (0.8).")
    ] = None,
    budget_tokens: Annotated[int | None, typer.Option(help="Prompt tokens per task.")] = None,
    budget_calls: Annotated[int | None, typer.Option(help="Model calls per task.")] = None,
    budget_cost: Annotated[float | None, typer.Option(help="Cost per task.")] = None,
) -> None:
    """List the alerts firing now: stale, waiting, retries, compensation, dead_letter, budget."""
    from skillstate.ops.alerts import evaluate
    from skillstate.ops.rules import load_rules
    from skillstate.ops.sinks import Webhook

    rules = load_rules(
        stale_after=stale_after,
        waiting_after=waiting_after,
        max_retries=max_retries,
        budget_warn_at=budget_warn_at,
        budget_tokens=budget_tokens,
        budget_calls=budget_calls,
        budget_cost=budget_cost,
    )
    sink = Webhook(webhook) if webhook else None
    gauges = _gauges()
    db = _store(store, create=False)
    try:
        while True:
            firing = evaluate(db, rules)
            if gauges is not None:
                gauges[0].update(firing)
            if sink is not None:
                sent = sink.send(firing)
                if sent is not None and not sent.delivered:
                    typer.echo(
                        f"webhook not delivered after {sent.attempts} attempts: {sent.error}",
                        err=True,
                    )
            _show(firing, json_=json_)
            if watch is None:
                break
            time.sleep(watch)
    finally:
        db.close()
        if gauges is not None:
            gauges[1].force_flush()
    if firing:
        raise typer.Exit(FIRING_EXIT)


def _gauges() -> tuple[OTelAlerts, OTelTracer] | None:
    """The ``skillstate.alerts.firing`` gauge when the environment exports OpenTelemetry
    metrics (``OTEL_EXPORTER_OTLP_ENDPOINT``, as for runs: :func:`tracer_from_env`)."""
    from skillstate.integrations.otel import OTelTracer, tracer_from_env
    from skillstate.ops.sinks import OTelAlerts

    tracer = tracer_from_env()
    if not isinstance(tracer, OTelTracer) or tracer.meter_provider is None:
        return None
    return OTelAlerts(tracer.meter_provider), tracer


def _show(firing: list[Alert], *, json_: bool) -> None:
    if json_:
        typer.echo(json.dumps([a.as_json() for a in firing], ensure_ascii=False))
        return
    if not firing:
        typer.echo("no alerts firing")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("rule", "task", "since", "detail", box=None)
    for alert in firing:
        since = alert.since.strftime("%Y-%m-%d %H:%M:%S") if alert.since else "-"
        table.add_row(alert.rule, alert.task_id, since, alert.detail)
    Console(soft_wrap=True).print(table)
