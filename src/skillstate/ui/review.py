"""The inspector's review form for ``skillstate extract`` proposals: paste, review, accept.

``GET /extract`` shows a form to paste (or load from a file) a proposal that
``skillstate extract -o`` wrote. ``POST /extract/review`` checks it as accepting
would and shows every item with the turns it cites and its quote, what the
extraction rejected, the change from the agent's blank card and the transcript's
turns, with the proposal editable; ``POST /extract/accept`` checks the (edited)
proposal again and starts the task (:func:`skillstate.extract.accept_proposal`: one
``human`` commit, recorded with the actor the form names, else ``inspector``), then
redirects to the task's page.

Both POSTs are writes in the sense of :mod:`skillstate.ui.actions` and pass the same
gate in the same order: ``--allow-edit`` (else 403); a token sent in a header is
checked before the body is read; the body is read within :data:`REVIEW_BODY` bytes
(a proposal carries its transcript, so the bound is larger than a reply's; over it,
413); it must be a URL-encoded form (415); its ``token`` field is compared before any
other field is used (401). The proposal's agent is used only when the operator
allowed it (``skillstate ui --agent``, or the configured allow-list; else 403). A
proposal that does not hold up is shown again with one line naming the field (400)
and nothing is written. Everything a page shows from a proposal is masked with the
agent's redaction policy, since a pasted proposal may not have been masked.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from skillstate.audit import Identity, acting, check_by
from skillstate.errors import AgentNotAllowed, UsageError
from skillstate.ui import body
from skillstate.ui.actions import INSPECTOR, READ_ONLY, authorize, header_token
from skillstate.ui.app import render
from skillstate.ui.body import Refused
from skillstate.ui.masking import without_paths
from skillstate.ui.notices import notice_query

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.extract.proposal import Proposal
    from skillstate.ui.app import UIState

__all__ = ["REVIEW_BODY", "routes"]

REVIEW_BODY = 1024 * 1024
"""The largest review or accept form read, in bytes (a proposal with its transcript)."""
FIELDS = {
    "review": frozenset({"proposal", "task_id", "actor"}),  # "check the edits" sends them
    "accept": frozenset({"proposal", "task_id", "actor"}),
}


def extract_page(request: Request) -> Response:
    """The empty form: paste a proposal."""
    return render(request, "extract.html", stage="paste", text="", error=None)


async def review(request: Request) -> Response:
    """Check a pasted proposal and show it for review (nothing is written)."""
    ui, fields = await _form(request)
    body.only(fields, FIELDS["review"], "review")
    text = body.text(fields, "proposal")
    return await run_in_threadpool(_review_page, request, ui, text, None)


async def accept(request: Request) -> Response:
    """Start the task from the (edited) proposal; back to the review with the error."""
    ui, fields = await _form(request)
    body.only(fields, FIELDS["accept"], "accept")
    text = body.text(fields, "proposal")
    task_id = (fields.get("task_id") or "").strip() or None
    # A named token acts under its own name (skillstate.ui.access), whatever the form says.
    actor = request.state.by or (fields.get("actor") or "").strip() or INSPECTOR
    try:
        task, message = await run_in_threadpool(_accept, ui, text, task_id, actor)
    except AgentNotAllowed:
        raise  # 403, as for any write with an agent the operator did not allow
    except UsageError as exc:
        return await run_in_threadpool(_review_page, request, ui, text, exc)
    query = notice_query(ui.notice_key, task, message)
    return RedirectResponse(f"/tasks/{quote(task)}?{query}", status_code=303)


async def _form(request: Request) -> tuple[UIState, dict[str, str]]:
    """The form's fields, once the write gate has let it through (see the module)."""
    ui: UIState = request.app.state.ui
    if not ui.config.allow_edit:
        raise Refused(403, READ_ONLY, "ReadOnly")
    sent = header_token(request)
    if sent is not None:
        request.state.by = authorize(ui, sent)
    if body.media_type(request) != "application/x-www-form-urlencoded":
        raise Refused(415, "a form is sent as application/x-www-form-urlencoded", "MediaType")
    limit = max(ui.config.max_body, REVIEW_BODY)
    fields = body.form_fields(await body.read_body(request, limit))
    token = fields.pop("token", None)
    if sent is None:
        request.state.by = authorize(ui, token)
    return ui, fields


def _review_page(request: Request, ui: UIState, text: str, error: Exception | None) -> Response:
    from skillstate.extract import load_proposal, preview, review_rows

    context: dict[str, Any] = {"stage": "review", "text": text, "error": None}
    status = 200
    try:
        proposal = load_proposal(text, what="the proposal")
        agent = _agent(ui, proposal)
        mask = agent.redaction.redactor().text
        context["rows"] = [(f, mask(v), t) for f, v, t in review_rows(proposal)]
        context["quotes"] = [mask(q) for q in _quotes(proposal)]
        context["notes"] = [mask(n) for n in proposal.notes]
        context["turns"] = [
            (t.turn, t.role, t.name, mask(t.text)) for t in proposal.transcript.turns
        ]
        context["agent"] = proposal.agent
        context["text"] = mask(text)
        if error is None:
            shown = preview(agent, proposal, "(new task)", what="the proposal")
            context["changes"] = [_change(op, mask) for op in shown.changes]
    except AgentNotAllowed:
        raise
    except UsageError as exc:
        error = exc
    if error is not None:
        context["error"] = " ".join(without_paths(str(error)).split())
        status = 400
    return render(request, "extract.html", status_code=status, **context)


def _accept(ui: UIState, text: str, task_id: str | None, actor: str) -> tuple[str, str]:
    from skillstate.cli._common import _new_task_id
    from skillstate.extract import accept_proposal, load_proposal

    proposal = load_proposal(text, what="the proposal")
    agent = _agent(ui, proposal)
    task = _new_task_id(agent, task_id)
    with acting(Identity(by=check_by(actor, what="actor"))):
        state = accept_proposal(
            ui.store, agent, proposal, task_id=task, actor=actor, what="the proposal"
        )
    return task, f"started from the reviewed proposal as version {state.version} by {actor}"


def _agent(ui: UIState, proposal: Proposal) -> Agent[Any]:
    """The proposal's agent, if the operator allowed it (the reference is data)."""
    from skillstate.config import allowed_agents, load_config
    from skillstate.engine.agent import load_agent

    ref = proposal.agent
    if ref is None:
        raise UsageError(
            "the proposal is for a new agent: accept it with skillstate extract --accept "
            "--agent MODULE:ATTR once the agent exists"
        )
    if ref not in ui.config.agents and ref not in allowed_agents(load_config()):
        raise AgentNotAllowed(
            f"the proposal names agent {ref!r}, which this inspector does not run: start it "
            "with skillstate ui --agent MODULE:ATTR, or allow it in the configuration"
        )
    return load_agent(ref, search_cwd=True)


def _quotes(proposal: Proposal) -> list[str]:
    """Each review row's quote, in :func:`~skillstate.extract.review_rows`'s order."""
    items: list[Any] = [proposal.goal] if proposal.goal is not None else []
    for group in ("constraints", "facts", "completed_steps", "pending_steps", "evidence"):
        items.extend(getattr(proposal, group))
    return [item.quote for item in items]


def _change(op: dict[str, Any], mask: Any) -> tuple[str, str, str]:
    from skillstate.extract.accept import PLACEHOLDER

    value = json.dumps(op.get("value"), ensure_ascii=False) if "value" in op else ""
    value = value.replace(PLACEHOLDER, "(the turn, stored on accept)")
    return op["op"], op["path"], mask(value)


def routes() -> list[BaseRoute]:
    return [
        Route("/extract", extract_page),
        Route("/extract/review", review, methods=["POST"]),
        Route("/extract/accept", accept, methods=["POST"]),
    ]
