"""The inspector's spot-check queue: marked verified steps, and a person's verdict on each.

``GET /spot-checks`` lists the steps the spot-check rule marked
(:mod:`skillstate.ops.spotchecks`) that nobody has reviewed yet (``?all=1``: every
marked step, with its verdicts): the task, the step, its skill and params, what verify
said, links to its evidence and the step's page, and the state diff it committed, all
masked as the task's pages mask them. ``GET /api/spot-checks`` is the same as JSON.

``POST /spot-checks/review`` (a form) and ``POST /api/spot-checks/review`` (JSON,
token in a header) record a verdict (:func:`skillstate.ops.review.review_step`). They
are writes in the sense of :mod:`skillstate.ui.actions` and pass its gate in its order:
``--allow-edit`` (403), a header token before the body (401), the body's size (413),
its media type (415), a form's ``token`` field before any other field (401), then the
fields (400). The reviewer is the name of the named token the request carried
(:mod:`skillstate.ui.access`; an ``actor`` field naming someone else is refused); with
the single token, the request's ``actor`` field, else ``inspector``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from skillstate.errors import SkillstateError, UsageError
from skillstate.ui import body
from skillstate.ui.actions import INSPECTOR, READ_ONLY, authorize, header_token
from skillstate.ui.app import render, status_of
from skillstate.ui.body import Refused
from skillstate.ui.masking import Masker
from skillstate.ui.notices import notice_of, notice_query

if TYPE_CHECKING:
    from skillstate.ops.review import Review
    from skillstate.ops.spotchecks import RuleFor, SampledStep
    from skillstate.ui.app import UIState
    from skillstate.ui.views import Source

__all__ = ["FIELDS", "routes"]

FIELDS = frozenset({"task_id", "step", "verdict", "note", "actor"})
_NOTICE_KEY = "skillstate:review"
"""What the page's notice is signed for (a form's write redirects to the queue)."""


class _Tasks:
    """Each task's agent and masker, read once per request (:meth:`Source.access`)."""

    def __init__(self, source: Source) -> None:
        from skillstate.ops.spotchecks import config_rule

        self.source = source
        self.fallback = config_rule()
        self.maskers: dict[str, Masker] = {}

    def rule_for(self, task_id: str, card: dict[str, Any]) -> Any:
        acc = self.source.access(task_id)
        self.maskers[task_id] = acc.masker
        rule = acc.agent.spot_checks if acc.agent is not None else None
        return rule if rule is not None else self.fallback

    def row(self, step: SampledStep, reviews: list[Review]) -> dict[str, Any]:
        masker = self.maskers.get(step.task_id, Masker())
        verdict = step.event.verdict
        return {
            "task_id": step.task_id,
            "step": step.step_id,
            "version": step.version,
            "skill": step.skill,
            "scope": step.scope,
            "params": masker.value(step.params),
            "verify": {"ok": verdict.ok, "reason": masker.text(verdict.reason)}
            if verdict
            else None,
            "evidence": step.evidence_refs,
            "patch": masker.patch(step.event.patch),
            "reviews": [
                {**r.model_dump(mode="json"), "note": masker.text(r.note)} for r in reviews
            ],
        }


def _queue(request: Request, *, pending: bool) -> list[dict[str, Any]]:
    from skillstate.ops.review import spot_check_queue

    ui: UIState = request.app.state.ui
    tasks = _Tasks(ui.source(request))
    rule_for: RuleFor = tasks.rule_for
    return [tasks.row(s, r) for s, r in spot_check_queue(ui.store, rule_for, pending=pending)]


def queue_page(request: Request) -> Response:
    ui: UIState = request.app.state.ui
    show_all = bool(request.query_params.get("all"))
    rows = _queue(request, pending=not show_all)
    notice = notice_of(ui.notice_key, request, _NOTICE_KEY)
    return render(request, "spotchecks.html", rows=rows, show_all=show_all, notice=notice)


def queue_api(request: Request) -> Response:
    return JSONResponse(_queue(request, pending=not request.query_params.get("all")))


def _reviewer(named: str | None, fields: Mapping[str, Any]) -> str:
    """The named token's name (an ``actor`` field naming someone else is refused, as the
    other writes refuse it); with the single token, the ``actor`` field, else
    ``inspector``."""
    given = fields.get("actor")
    actor = body.text(fields, "actor").strip() if isinstance(given, str) and given.strip() else None
    if named is not None:
        if actor is not None and actor != named:
            raise UsageError(f"this token acts as {named!r}; leave actor out or give that")
        return named
    return actor or INSPECTOR


def _record(ui: UIState, request: Request, named: str | None, fields: Mapping[str, Any]) -> str:
    from skillstate.ops.review import review_step

    body.only(fields, FIELDS, "spot-check review")
    task_id = body.text(fields, "task_id").strip()
    step = body.text(fields, "step").strip()
    verdict = body.text(fields, "verdict").strip()
    note = fields.get("note") or ""
    tasks = _Tasks(ui.source(request))
    try:
        by = _reviewer(named, fields)
        given = review_step(
            ui.store, tasks.rule_for, task_id, step, verdict=verdict, note=note, by=by
        )
    except SkillstateError as exc:
        masker = tasks.maskers.get(task_id, Masker())
        raise Refused(status_of(exc), masker.text(str(exc)), type(exc).__name__) from None
    return f"recorded {given.verdict} by {given.by} on {task_id} {step} (#{given.seq})"


async def review_form(request: Request) -> Response:
    """The queue's form: its token is a field, compared before any other field is used."""
    ui: UIState = request.app.state.ui
    if not ui.config.allow_edit:
        raise Refused(403, READ_ONLY, "ReadOnly")
    sent = header_token(request)
    named = authorize(ui, sent) if sent is not None else None
    if body.media_type(request) != "application/x-www-form-urlencoded":
        raise Refused(415, "a form is sent as application/x-www-form-urlencoded", "MediaType")
    fields: dict[str, Any] = body.form_fields(await body.read_body(request, ui.config.max_body))
    token = fields.pop("token", None)
    if sent is None:
        named = authorize(ui, token)
    message = await run_in_threadpool(_record, ui, request, named, fields)
    return RedirectResponse(
        f"/spot-checks?{notice_query(ui.notice_key, _NOTICE_KEY, message)}", status_code=303
    )


async def review_api(request: Request) -> Response:
    """``POST /api/spot-checks/review`` with a JSON object: the token first, then the body."""
    ui: UIState = request.app.state.ui
    named = authorize(ui, header_token(request))
    if body.media_type(request) != "application/json":
        raise Refused(
            415, "send the fields as a JSON object, Content-Type: application/json", "MediaType"
        )
    fields = body.json_object(await body.read_body(request, ui.config.max_body))
    message = await run_in_threadpool(_record, ui, request, named, fields)
    return JSONResponse({"ok": True, "message": message})


def routes() -> list[BaseRoute]:
    return [
        Route("/spot-checks", queue_page),
        Route("/spot-checks/review", review_form, methods=["POST"]),
        Route("/api/spot-checks", queue_api),
        Route("/api/spot-checks/review", review_api, methods=["POST"]),
    ]
