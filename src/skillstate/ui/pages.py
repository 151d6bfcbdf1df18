"""The HTML pages: the task list, a task, one step, the state at a version, an
artifact, the token chart, and the evaluation reports."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

from skillstate.ui.app import render
from skillstate.ui.data import artifact_text, list_tasks, state_at, step_diff, step_rows
from skillstate.ui.notices import notice_of
from skillstate.ui.params import WHOLE, page_param, size_param
from skillstate.ui.reports import PLOTS, load_report
from skillstate.ui.views import task_view, token_chart

if TYPE_CHECKING:
    from skillstate.ui.app import UIState

__all__ = ["routes", "task_routes"]


def _ui(request: Request) -> UIState:
    ui: UIState = request.app.state.ui
    return ui


def tasks_page(request: Request) -> Response:
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
    kept = {"status", "agent", "q", "sort", "size", "tree"}
    keep = {k: v for k, v in query.items() if k in kept and v}
    return render(request, "tasks.html", found=found, filters=keep)


def task_page(request: Request) -> Response:
    ui = _ui(request)
    source = ui.source(request)
    task_id = str(request.path_params["task_id"])
    view = task_view(
        source,
        task_id,
        page=page_param(request),
        size=ui.config.page_size,
        expect=ui.expect_file(request.query_params.get("expect")),
    )
    notice = notice_of(ui.notice_key, request, task_id)
    return render(request, "task.html", view=view, source=source, notice=notice)


def step_page(request: Request) -> Response:
    source = _ui(request).source(request)
    task_id = str(request.path_params["task_id"])
    version = int(request.path_params["version"])
    acc = source.access(task_id)
    events = source.store.events(task_id)
    rows = step_rows(events, acc.masker)
    index = next((i for i, r in enumerate(rows) if r.version == version), None)
    if index is None:
        raise HTTPException(404, f"task {task_id!r} has no step at version {version}")
    diff = step_diff(source.store, task_id, version, acc.masker)
    return render(
        request,
        "step.html",
        source=source,
        task_id=task_id,
        row=rows[index],
        diff=diff,
        patch=json.dumps(diff.patch, ensure_ascii=False, indent=2),
        previous=rows[index - 1].version if index > 0 else None,
        next=rows[index + 1].version if index + 1 < len(rows) else None,
        page=index // _ui(request).config.page_size + 1,
    )


def version_page(request: Request) -> Response:
    source = _ui(request).source(request)
    task_id = str(request.path_params["task_id"])
    version = int(request.path_params["version"])
    acc = source.access(task_id)
    head = source.store.load(task_id, verify=False).version
    state = state_at(source.store, task_id, version, acc.masker)
    return render(
        request,
        "version.html",
        source=source,
        task_id=task_id,
        version=version,
        head=head,
        state=json.dumps(state, ensure_ascii=False, indent=2),
    )


def chart_fragment(request: Request) -> Response:
    source = _ui(request).source(request)
    svg, data = token_chart(source, str(request.path_params["task_id"]))
    page = _ui(request).templates.get_template("_chart.html").render(svg=svg, data=data)
    return Response(page, media_type="text/html")


def artifact_page(request: Request) -> Response:
    source = _ui(request).source(request)
    task_id = str(request.path_params["task_id"])
    acc = source.access(task_id)
    ref = str(request.path_params["ref"])
    found = artifact_text(source.store, task_id, ref, acc.masker)
    return render(request, "artifact.html", source=source, task_id=task_id, artifact=found)


def reports_page(request: Request) -> Response:
    return render(request, "reports.html", listed=_ui(request).reports())


def report_page(request: Request) -> Response:
    ui = _ui(request)
    number = int(request.path_params["report"])
    report = load_report(ui.report_dir(number))
    return render(request, "report.html", report=report, number=number)


def report_plot(request: Request) -> Response:
    ui = _ui(request)
    name = str(request.path_params["name"])
    directory = ui.report_dir(int(request.path_params["report"]))
    if name not in PLOTS or not (directory / name).is_file():
        raise HTTPException(404, f"no plot {name[:80]!r} in this report")
    return FileResponse(directory / name, media_type="image/png")


def routes() -> list[BaseRoute]:
    """The pages of the served store and of the reports."""
    return [
        Route("/", tasks_page),
        Route("/reports", reports_page),
        Route(f"/reports/{{report:{WHOLE}}}", report_page),
        Route(f"/reports/{{report:{WHOLE}}}/plots/{{name}}", report_plot),
    ]


def task_routes() -> list[BaseRoute]:
    """The pages of one task (mounted for the served store and for each report run)."""
    return [
        Route("/tasks/{task_id:path}", task_page),
        Route(f"/steps/{{version:{WHOLE}}}/{{task_id:path}}", step_page),
        Route(f"/versions/{{version:{WHOLE}}}/{{task_id:path}}", version_page),
        Route("/chart/{task_id:path}", chart_fragment),
        Route("/artifacts/{ref}/{task_id:path}", artifact_page),
    ]
