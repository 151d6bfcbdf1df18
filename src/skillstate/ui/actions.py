"""The inspector's writes: reply, rollback, fork and set, through the CLI's own code paths.

A write is accepted only when the inspector was started with ``--allow-edit`` and the
request carries its token (header ``X-Skillstate-Token``, ``Authorization: Bearer``,
or a form's ``token`` field), compared in constant time. Each write then does what
its command does, with the same functions and the same checks: ``reply`` commits the
answer with :meth:`Runtime.reply` and keeps running the task (in a thread, so the page
can follow it live) with the runtime ``skillstate reply`` builds; ``rollback``,
``fork`` and ``set`` call :mod:`skillstate.engine.rewind` and
:mod:`skillstate.engine.edits`, which record them as ``human`` events. A task's agent
is used only when the operator allowed it. Every error message is masked.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from skillstate.errors import AgentNotAllowed, Conflict, SkillstateError, UsageError
from skillstate.ui.config import TOKEN_HEADER
from skillstate.ui.masking import Masker

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.ui.app import UIState
    from skillstate.ui.views import Source

__all__ = ["ACTIONS", "api_routes", "form_routes", "perform"]

READ_ONLY = "the inspector is read-only: start it with skillstate ui --allow-edit to change tasks"
NO_TOKEN = (
    "this write needs the inspector's token (printed when skillstate ui --allow-edit "
    "started, or $SKILLSTATE_UI_TOKEN)"
)


def _text(fields: Mapping[str, Any], name: str) -> str:
    value = fields.get(name)
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{name} is required")
    return value


def _int(fields: Mapping[str, Any], name: str) -> int:
    value = fields.get(name)
    try:
        return int(str(value))
    except ValueError:
        raise UsageError(f"{name} must be a whole number, not {str(value)[:40]!r}") from None


def _agent(source: Source, task_id: str) -> Agent[Any]:
    acc = source.access(task_id)
    if acc.agent is None:
        raise AgentNotAllowed(acc.why_no_agent or f"task {task_id!r} has no usable agent")
    return acc.agent


def _effects(fields: Mapping[str, Any]) -> Any:
    from skillstate.cli.repair import _effect_choice

    choice = str(fields.get("effects") or "refuse")
    if choice not in {"refuse", "keep", "compensate"}:
        raise UsageError(f"effects must be refuse, keep or compensate, not {choice[:40]!r}")
    return _effect_choice(choice == "compensate", choice == "keep")


def reply(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate reply ID TEXT``: commit the answer, then keep running the task."""
    from skillstate.cli._common import _Decisions, _runtime

    text = _text(fields, "text")
    agent = _agent(source, task_id)
    with ui.lock:
        running = ui.driving.get(task_id)
        if running is not None and running.is_alive():
            raise Conflict(f"the inspector is still running task {task_id!r}; wait for it")
        decisions = _Decisions().continuing(task_id, source.store.load(task_id).state.get("driver"))
        runtime = _runtime(agent, source.store, decisions, max_steps=ui.config.max_steps)
        replied = runtime.reply(task_id, text)

        def drive() -> None:
            try:
                runtime.run(task_id)
            except SkillstateError as exc:  # shown on the task's page by its error log
                print(f"skillstate ui: task {task_id}: {exc}", file=sys.stderr)

        thread = threading.Thread(target=drive, name=f"skillstate-ui-{task_id}", daemon=True)
        ui.driving[task_id] = thread
        thread.start()
    return f"replied as version {replied.version}; the task continues"


def rollback(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate rollback ID --to V [--compensate | --keep-effects]``."""
    from skillstate.engine.rewind import rollback_task
    from skillstate.engine.runtime import Runtime

    to = _int(fields, "to")
    choice = _effects(fields)
    agent = _agent(source, task_id) if choice == "compensate" else None
    version = rollback_task(source.store, task_id, to, effects=choice, agent=agent)
    note = ""
    if agent is not None:
        undone = Runtime(agent, source.store).compensate(task_id)
        note = f"; {undone} effect(s) undone" if undone else ""
    return f"rolled back to version {to} as version {version}{note}"


def fork(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate fork ID --at V --new-id NEW [--keep-effects]``."""
    from skillstate.cli._common import _new_task_id
    from skillstate.engine.rewind import fork_task

    at = _int(fields, "at")
    agent = _agent(source, task_id)
    new_id = _new_task_id(agent, _text(fields, "new_id").strip())
    fork_task(source.store, agent, task_id, at, new_id, effects=_effects(fields))
    return f"task {new_id} starts from version {at}"


def set_(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate set ID PATH=VALUE... [--force]`` (one assignment per line)."""
    from skillstate.cli._common import _parse_assignments
    from skillstate.engine.edits import set_agent_reference, set_fields

    lines = [line for line in _text(fields, "assignments").splitlines() if line.strip()]
    writes = _parse_assignments(lines)
    acc = source.access(task_id)
    if acc.agent is None:
        if set(writes) != {"agent"}:
            raise AgentNotAllowed(acc.why_no_agent or f"task {task_id!r} has no usable agent")
        # The repair of a bad agent reference never imports it (or any other).
        version = set_agent_reference(source.store, task_id, writes["agent"])
        return f"set agent as version {version}"
    force = str(fields.get("force", "")).lower() in {"1", "true", "on", "yes"}
    state = set_fields(source.store, acc.agent, task_id, writes, force=force)
    return f"set {', '.join(writes)} as version {state.version}"


ACTIONS: dict[str, Callable[[UIState, Source, str, Mapping[str, Any]], str]] = {
    "reply": reply,
    "rollback": rollback,
    "fork": fork,
    "set": set_,
}


def perform(ui: UIState, request: Request, name: str, fields: Mapping[str, Any]) -> str:
    """Check the token, run action ``name``; a refusal or failure is raised, masked."""
    if not ui.config.allow_edit:
        raise HTTPException(403, READ_ONLY)
    given = request.headers.get(TOKEN_HEADER) or fields.get("token")
    bearer = request.headers.get("authorization", "")
    if bearer.lower().startswith("bearer "):
        given = given or bearer[7:].strip()
    if not ui.config.token_ok(str(given) if given else None):
        raise HTTPException(401, NO_TOKEN)
    action = ACTIONS.get(name)
    if action is None:
        raise HTTPException(404, f"no action {name[:40]!r} (reply, rollback, fork, set)")
    source = ui.source(request)
    task_id = str(request.path_params["task_id"])
    try:
        return action(ui, source, task_id, fields)
    except SkillstateError as exc:
        from skillstate.ui.app import status_of

        raise HTTPException(status_of(exc), _masked(source, task_id, fields, str(exc))) from None


def _masked(source: Source, task_id: str, fields: Mapping[str, Any], text: str) -> str:
    """``text`` with the task's secrets masked, and any value submitted for a sensitive field."""
    try:
        masker = source.access(task_id).masker
    except SkillstateError:
        masker = Masker()
    extra = []
    for line in str(fields.get("assignments") or "").splitlines():
        path, _, value = line.partition("=")
        if masker.sensitive_path("/" + path.strip().split(".")[0]) and value.strip():
            extra.append(value.strip())
    return Masker.of(masker.hidden, [*masker.secrets, *extra]).text(text)


async def _fields(request: Request) -> dict[str, Any]:
    body = (await request.body()).decode("utf-8", errors="replace")
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            data = json.loads(body or "{}")
        except ValueError as exc:
            raise UsageError(f"the body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise UsageError("the body must be a JSON object")
        return data
    return dict(parse_qsl(body, keep_blank_values=True))


async def api_action(request: Request) -> Response:
    ui: UIState = request.app.state.ui
    fields = await _fields(request)
    name = str(request.path_params["name"])
    message = await run_in_threadpool(perform, ui, request, name, fields)
    head = ui.store.load(str(request.path_params["task_id"]), verify=False).version
    return JSONResponse({"ok": True, "message": message, "version": head})


async def form_action(request: Request) -> Response:
    ui: UIState = request.app.state.ui
    fields = await _fields(request)
    name = str(request.path_params["name"])
    message = await run_in_threadpool(perform, ui, request, name, fields)
    task_id = str(request.path_params["task_id"])
    target = f"/tasks/{quote(task_id)}?notice={quote(message)}"
    return RedirectResponse(target, status_code=303)


def api_routes() -> list[BaseRoute]:
    return [Route("/api/actions/{name}/{task_id:path}", api_action, methods=["POST"])]


def form_routes() -> list[BaseRoute]:
    return [Route("/actions/{name}/{task_id:path}", form_action, methods=["POST"])]
