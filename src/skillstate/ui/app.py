"""The inspector's web app: Starlette, server-rendered Jinja2 pages, a JSON API.

:func:`create_app` wires the pages (:mod:`skillstate.ui.pages`), the API
(:mod:`skillstate.ui.api`) and the writes (:mod:`skillstate.ui.actions`) to one
:class:`UIState`. Handlers are plain functions (Starlette runs them in its thread
pool): the stores are synchronous. Every error becomes a page or a JSON object
whose message went through the task's masker and lost the server's directories;
an unexpected one is a one-line 500 (its traceback goes to the server's log only).
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from skillstate.errors import (
    AgentImportError,
    ArtifactNotFound,
    Conflict,
    SkillstateError,
    StateCorrupted,
    StoreError,
    TaskNotFound,
    UsageError,
)
from skillstate.store.base import Store
from skillstate.ui.config import UIConfig
from skillstate.ui.masking import without_paths
from skillstate.ui.reports import load_report, run_paths
from skillstate.ui.views import Source

__all__ = ["UIState", "create_app", "masked_error", "render", "status_of"]

HERE = Path(__file__).parent
_SEALED = re.compile(r"enc:v1:[A-Za-z0-9_=:.-]+")
INTERNAL = "internal error: the inspector's log has the details"
_LOG = logging.getLogger("skillstate.ui")


@dataclass
class UIState:
    """What every handler reads: the configuration, the store, the templates."""

    config: UIConfig
    store: Store
    templates: Environment
    runs: dict[tuple[int, str], Store] = field(default_factory=dict)
    """Evaluation runs' stores, opened read-only on first use."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    driving: dict[str, threading.Thread] = field(default_factory=dict)
    """Tasks the inspector is running after a reply (one thread each)."""
    closing: threading.Event = field(default_factory=threading.Event)
    notice_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    """Signs the notices a form's write redirects with (:mod:`skillstate.ui.notices`)."""

    def source(self, request: Request) -> Source:
        """The served store, or the evaluation run the URL names (``/r/N/RUN/...``)."""
        params = request.path_params
        if "report" not in params:
            return Source(
                self.store,
                "",
                self.store.url,
                allowed=self.config.agents,
                editable=self.config.allow_edit,
            )
        number, run = int(params["report"]), str(params["run"])
        directory = self.report_dir(number)
        db, expected = run_paths(directory, run)
        with self.lock:
            store = self.runs.get((number, run))
            if store is None:
                from skillstate.store import open_store

                if not db.is_file():
                    raise TaskNotFound(f"report {number} has no stored run {run!r}")
                store = open_store(f"sqlite:///{db}", create=False)
                self.runs[(number, run)] = store
        return Source(store, f"/r/{number}/{run}", f"run {run}", expect=expected)

    def expect_file(self, given: str | None) -> str | None:
        """An ``?expect=`` expectations file, if it lies where the operator keeps files.

        The path comes from whoever can open a page, so the server reads only JSON
        files under its working directory or a ``--report`` directory: a page must
        not become a way to read any file the server's user can.
        """
        if not given:
            return None
        refused = UsageError(
            "expect must be a .json file under the inspector's working directory "
            "or a --report directory"
        )
        try:
            path = Path(given).resolve()
        except (OSError, ValueError):  # a NUL byte, a name too long
            raise refused from None
        roots = [Path.cwd().resolve(), *(root.resolve() for root in self.config.reports)]
        if path.suffix != ".json" or not any(path.is_relative_to(root) for root in roots):
            raise refused
        return str(path)

    def report_dir(self, number: int) -> Path:
        reports = self.config.reports
        if not 1 <= number <= len(reports):
            raise HTTPException(404, f"no report {number} (the inspector has {len(reports)})")
        return reports[number - 1]

    def reports(self) -> list[dict[str, Any]]:
        out = []
        for number, directory in enumerate(self.config.reports, 1):
            try:
                report = load_report(directory)
                out.append({"number": number, "path": shown_path(directory), "meta": report.meta})
            except UsageError as exc:
                message = without_paths(str(exc))
                out.append({"number": number, "path": shown_path(directory), "error": message})
        return out

    def close(self) -> None:
        # A task the inspector drives after a reply gets a moment to finish its step:
        # closing the store under it would fail that step.
        self.closing.set()
        for thread in list(self.driving.values()):
            thread.join(timeout=10)
        for store in [self.store, *self.runs.values()]:
            store.close()


def shown_path(path: Path | str) -> str:
    """A server path as pages show it: relative to the working directory, else ``…/NAME``."""
    return without_paths(str(path))


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    """A page: ``template`` with ``context`` plus what every page shows."""
    ui: UIState = request.app.state.ui
    page = ui.templates.get_template(template).render(
        request=request,
        config=ui.config,
        store_url=shown_path(ui.store.url),
        reports=ui.config.reports,
        **context,
    )
    return HTMLResponse(page, status_code=status_code)


def status_of(exc: Exception) -> int:
    if isinstance(exc, HTTPException):
        return exc.status_code
    if isinstance(exc, TaskNotFound | ArtifactNotFound):
        return 404
    if isinstance(exc, Conflict | StateCorrupted):
        return 409
    if isinstance(exc, AgentImportError):
        return 403
    if isinstance(exc, StoreError):
        return 503
    return 400


def masked_error(request: Request, exc: Exception) -> str:
    """The error's message, masked as the task it is about masks (and sealed values),
    without the server's directories, on one line."""
    text = exc.detail if isinstance(exc, HTTPException) else str(exc)
    text = _SEALED.sub("***", str(text))
    task_id = request.path_params.get("task_id")
    if isinstance(task_id, str):
        try:
            masker = request.app.state.ui.source(request).access(task_id).masker
            text = masker.text(text)
        except Exception:
            pass
    # Secrets first: a secret that holds a path or a line break is masked whole.
    return " ".join(without_paths(text).split())


async def _on_error(request: Request, exc: Exception) -> Response:
    status = status_of(exc)
    message = masked_error(request, exc)
    kind = getattr(exc, "kind", None) or type(exc).__name__
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message, "kind": kind}, status_code=status)
    return render(request, "error.html", status_code=status, message=message, status=status)


async def _on_crash(request: Request, exc: Exception) -> Response:
    """A bug: one line to the client; the traceback to the server's log, not the page."""
    _LOG.error("skillstate ui: %s %s failed", request.method, request.url.path, exc_info=exc)
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": INTERNAL, "kind": "InternalError"}, status_code=500)
    try:
        return render(request, "error.html", status_code=500, message=INTERNAL, status=500)
    except Exception:  # the page itself may be what fails
        return PlainTextResponse(INTERNAL, status_code=500)


def create_app(config: UIConfig, store: Store | None = None) -> Starlette:
    """The inspector for ``config`` (``store`` instead of opening ``config.store_url``)."""
    from skillstate.store import open_store
    from skillstate.ui import actions, api, pages, review, spotchecks
    from skillstate.ui.alerts import routes as alert_routes
    from skillstate.ui.params import WHOLE

    db = store if store is not None else open_store(config.store_url, create=False)
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html", "svg"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False, "sort_keys": True}
    env.filters["short"] = lambda text, n=80: (
        text if len(str(text)) <= n else f"{str(text)[: n - 1]}…"
    )
    env.filters["shown"] = shown_path
    ui = UIState(config, db, env)
    task_routes = [*pages.task_routes(), *actions.form_routes()]
    routes: list[BaseRoute] = [
        *pages.routes(),
        *review.routes(),
        *spotchecks.routes(),
        *task_routes,
        Mount(f"/r/{{report:{WHOLE}}}/{{run}}", routes=pages.task_routes()),
        Mount(f"/api/r/{{report:{WHOLE}}}/{{run}}", routes=api.task_routes()),
        *api.routes(),
        *actions.api_routes(),
        *alert_routes(),  # GET /metrics (Prometheus)
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = []
    if config.hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(config.hosts)))
    if config.tokens:  # named tokens: every read needs one too (skillstate.ui.access)
        from skillstate.ui.access import ReadGate
        from skillstate.ui.access import routes as login_routes

        middleware.append(Middleware(ReadGate, tokens=config.tokens))
        routes.insert(0, *login_routes())
    handlers: dict[Any, Any] = {
        SkillstateError: _on_error,
        HTTPException: _on_error,
        Exception: _on_crash,
    }

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        ui.close()

    app = Starlette(
        routes=routes, middleware=middleware, exception_handlers=handlers, lifespan=lifespan
    )
    app.state.ui = ui
    return app
