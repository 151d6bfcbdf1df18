"""Alerts in the inspector: a badge per firing alert on the task list, and the
Prometheus text endpoint ``GET /metrics`` (:mod:`skillstate.ops`).

Both are reads: they follow the inspector's rules for reads like every page. The
rules come from the project file where the inspector was started (the same as
``skillstate alerts`` without flags); a bad setting is the one-line error page.
The task list evaluates only the rows of the page it shows (a page's cards, not
the store's); ``/metrics`` evaluates the whole store from one ``heads()`` read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Route

from skillstate.ops.alerts import evaluate
from skillstate.ops.rules import AlertRules, load_rules
from skillstate.ops.sinks import prometheus_text
from skillstate.store.base import HeadInfo, Store, is_reserved

if TYPE_CHECKING:
    from skillstate.ui.app import UIState

__all__ = ["CONTENT_TYPE", "routes", "with_alerts"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""What Prometheus expects of a text exposition."""


def _rules() -> AlertRules:
    return load_rules()  # read per request: editing the file needs no restart


def with_alerts(
    store: Store, rows: list[dict[str, Any]], heads: Mapping[str, HeadInfo]
) -> list[dict[str, Any]]:
    """``rows`` (the task list's) each with ``alerts``: ``[{"rule", "detail"}]``."""
    shown = [heads[row["task_id"]] for row in rows if row.get("task_id") in heads]
    found: dict[str, list[dict[str, str]]] = {}
    for alert in evaluate(store, _rules(), heads=shown):
        found.setdefault(alert.task_id, []).append({"rule": alert.rule, "detail": alert.detail})
    return [{**row, "alerts": found.get(row.get("task_id", ""), [])} for row in rows]


def metrics(request: Request) -> PlainTextResponse:
    ui: UIState = request.app.state.ui
    heads = ui.store.heads()
    firing = evaluate(ui.store, _rules(), heads=heads)
    by_status = Counter(h.status or "unreadable" for h in heads if not is_reserved(h.task_id))
    text = prometheus_text(firing, tasks_by_status=dict(by_status))
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


def routes() -> list[BaseRoute]:
    """``GET /metrics``."""
    return [Route("/metrics", metrics)]
