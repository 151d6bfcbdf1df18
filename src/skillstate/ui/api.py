"""The JSON API under /api/: the same page models the HTML pages render.

=================================  ==================================================
``GET /api/tasks``                 the task list (``status``, ``agent``, ``q``, ``sort``,
                                   ``page``, ``size``: at most 200 rows a page;
                                   ``tree=1``: children under their parents)
``GET /api/tasks/{id}``            the head's card, a page of the timeline, first bad step
``GET /api/head/{id}``             version, status and step (what a live page polls)
``GET /api/steps/{v}/{id}``        one step: its row and its diff (patch, before/after)
``GET /api/versions/{v}/{id}``     the card at version ``v``
``GET /api/tokens/{id}``           the token curve (state view against full history)
``GET /api/artifacts/{ref}/{id}``  a tool's raw output
``GET /api/reports[/{n}]``         the evaluation reports, one report
``POST /api/actions/{name}/{id}``  reply, rollback, fork, set, approve, reject,
                                   signal: a JSON object of fields, the token in a
                                   header (see :mod:`.actions`)
=================================  ==================================================

Task routes also answer under ``/api/r/{n}/{run}/`` for the runs of report ``n``.
Everything is masked as the pages are. An error is ``{"error": ..., "kind": ...}``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from skillstate.ui.app import shown_path
from skillstate.ui.data import artifact_text, list_tasks, state_at, step_diff, step_rows
from skillstate.ui.params import WHOLE, page_param, size_param
from skillstate.ui.reports import load_report
from skillstate.ui.views import head_summary, task_view, token_chart

if TYPE_CHECKING:
    from skillstate.ui.app import UIState

__all__ = ["routes", "task_routes"]


def _ui(request: Request) -> UIState:
    ui: UIState = request.app.state.ui
    return ui


def tasks(request: Request) -> JSONResponse:
    ui = _ui(request)
    query = request.query_params
    found = list_tasks(
        ui.store,
        status=query.get("status") or None,
        agent=query.get("agent") or None,
        query=query.get("q") or None,
        page=page_param(request) or 1,
        size=size_param(request, ui.config.page_size),
        sort=query.get("sort") or "updated",
        tree=bool(query.get("tree")),
    )
    return JSONResponse({"store": shown_path(ui.store.url), **dataclasses.asdict(found)})


def task(request: Request) -> JSONResponse:
    ui = _ui(request)
    view = task_view(
        ui.source(request),
        str(request.path_params["task_id"]),
        page=page_param(request),
        size=ui.config.page_size,
        expect=ui.expect_file(request.query_params.get("expect")),
    )
    return JSONResponse(view.as_json())


def head(request: Request) -> JSONResponse:
    source = _ui(request).source(request)
    return JSONResponse(head_summary(source.store, str(request.path_params["task_id"])))


def step(request: Request) -> JSONResponse:
    source = _ui(request).source(request)
    task_id = str(request.path_params["task_id"])
    version = int(request.path_params["version"])
    masker = source.access(task_id).masker
    rows = [r for r in step_rows(source.store.events(task_id), masker) if r.version == version]
    if not rows:
        raise HTTPException(404, f"task {task_id!r} has no step at version {version}")
    diff = step_diff(source.store, task_id, version, masker)
    return JSONResponse({"step": rows[0].as_json(), "diff": diff.as_json()})


def version(request: Request) -> JSONResponse:
    source = _ui(request).source(request)
    task_id = str(request.path_params["task_id"])
    at = int(request.path_params["version"])
    state = state_at(source.store, task_id, at, source.access(task_id).masker)
    return JSONResponse({"task_id": task_id, "version": at, "state": state})


def tokens(request: Request) -> JSONResponse:
    source = _ui(request).source(request)
    _, data = token_chart(source, str(request.path_params["task_id"]))
    return JSONResponse(data)


def artifact(request: Request) -> JSONResponse:
    source = _ui(request).source(request)
    task_id = str(request.path_params["task_id"])
    ref = str(request.path_params["ref"])
    found = artifact_text(source.store, task_id, ref, source.access(task_id).masker)
    return JSONResponse(dataclasses.asdict(found))


def reports(request: Request) -> JSONResponse:
    return JSONResponse({"reports": _ui(request).reports()})


def report(request: Request) -> JSONResponse:
    ui = _ui(request)
    found = load_report(ui.report_dir(int(request.path_params["report"])))
    data: dict[str, Any] = found.as_json()
    return JSONResponse(data)


def routes() -> list[BaseRoute]:
    return [
        Route("/api/tasks", tasks),
        Route("/api/reports", reports),
        Route(f"/api/reports/{{report:{WHOLE}}}", report),
        *[Route(f"/api{r.path}", r.endpoint) for r in _task_routes()],
    ]


def _task_routes() -> list[Route]:
    return [
        Route("/tasks/{task_id:path}", task),
        Route("/head/{task_id:path}", head),
        Route(f"/steps/{{version:{WHOLE}}}/{{task_id:path}}", step),
        Route(f"/versions/{{version:{WHOLE}}}/{{task_id:path}}", version),
        Route("/tokens/{task_id:path}", tokens),
        Route("/artifacts/{ref}/{task_id:path}", artifact),
    ]


def task_routes() -> list[BaseRoute]:
    """The task routes of a report run (mounted under ``/api/r/{n}/{run}``)."""
    return list(_task_routes())
