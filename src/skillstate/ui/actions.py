"""The inspector's writes: reply, rollback, fork, set, approve, reject and signal, through
the CLI's own code paths.

A write is accepted only when the inspector was started with ``--allow-edit`` and the
request carries its token, compared in constant time. The checks run in this order,
each refusing with a one-line error before the next is tried:

1. ``--allow-edit`` (else 403);
2. the token, from the ``X-Skillstate-Token`` header or ``Authorization: Bearer``
   (else 401), before a byte of the body is read. The JSON API takes the token from
   those headers only. A page's form carries it as its ``token`` field instead, so
   a form's body is read first, within the bound below and parsed as a plain
   URL-encoded form, and the token is compared before any other field is used;
3. the body's size: over :data:`~skillstate.ui.body.MAX_BODY` bytes (``Content-Length``,
   or counted as it arrives) is a 413;
4. its media type (the API reads ``application/json``, a form
   ``application/x-www-form-urlencoded``; else 415) and its syntax and fields
   (:mod:`skillstate.ui.body`; else 400).

Each write then does what its command does, with the same functions and the same
checks: ``reply`` commits the answer with :meth:`Runtime.reply` (``approve`` and
``reject``: :meth:`Runtime.approve`, :meth:`Runtime.reject`, recorded with the actor
the request names, else ``inspector``; ``signal``: :meth:`Runtime.signal`, its payload
checked against the agent's schema before anything is posted) and keeps running the
task (in a thread, so the page can follow it live) with the runtime ``skillstate
reply`` builds; ``rollback``, ``fork`` and ``set`` call :mod:`skillstate.engine.rewind`
and :mod:`skillstate.engine.edits`, which record them as ``human`` events and refuse
what the command refuses (a control character in an edit among it:
:func:`skillstate.engine.edits.check_edit`). A task's agent is used only when the
operator allowed it. Every error message is masked.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from skillstate.audit import Identity, acting, check_reason, current
from skillstate.errors import AgentNotAllowed, Conflict, SkillstateError, UsageError
from skillstate.ui import body
from skillstate.ui.access import match
from skillstate.ui.body import Refused
from skillstate.ui.config import TOKEN_HEADER
from skillstate.ui.masking import Masker
from skillstate.ui.notices import notice_query

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.runtime import Runtime
    from skillstate.state.model import AgentState
    from skillstate.ui.app import UIState
    from skillstate.ui.views import Source

__all__ = ["ACTIONS", "FIELDS", "api_routes", "form_routes", "perform"]

INSPECTOR = "inspector"
"""Who approves or rejects through the inspector when the request names nobody."""

READ_ONLY = "the inspector is read-only: start it with skillstate ui --allow-edit to change tasks"
NO_TOKEN = (
    "this write needs the inspector's token (printed when skillstate ui --allow-edit "
    "started, or $SKILLSTATE_UI_TOKEN)"
)
NO_NAMED_TOKEN = "this write needs a write token of the inspector (X-Skillstate-Token)"
READ_TOKEN = 'this token may read, not write: writes need a token with rights = "write"'
FIELDS: dict[str, frozenset[str]] = {
    "reply": frozenset({"text", "into", "reason"}),
    "rollback": frozenset({"to", "effects", "children", "reason"}),
    "fork": frozenset({"at", "new_id", "effects", "reason"}),
    "set": frozenset({"assignments", "force", "reason"}),
    "approve": frozenset({"edits", "reason", "actor"}),
    "reject": frozenset({"reason", "actor"}),
    "signal": frozenset({"name", "data", "reason"}),
}
"""The fields each action takes (a form adds ``token``)."""


def _agent(source: Source, task_id: str) -> Agent[Any]:
    acc = source.access(task_id)
    if acc.agent is None:
        raise AgentNotAllowed(acc.why_no_agent or f"task {task_id!r} has no usable agent")
    return acc.agent


def _effects(fields: Mapping[str, Any]) -> Any:
    from skillstate.cli.repair import _effect_choice

    choice = body.choice(fields, "effects", ("refuse", "keep", "compensate"), "refuse")
    return _effect_choice(choice == "compensate", choice == "keep")


def reply(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate reply ID TEXT``: commit the answer, then keep running the task."""
    text = body.text(fields, "text")
    into = fields.get("into") or None  # a form's empty field: an ordinary reply
    if into is not None and not isinstance(into, str):
        raise UsageError("into must be the name of a Sensitive field (a string)")
    replied = _write_then_run(
        ui, source, task_id, lambda runtime: runtime.reply(task_id, text, into=into)
    )
    return f"replied as version {replied.version}; the task continues"


def approve(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate approve ID [--edit P=V] [--reason R] [--actor A]``: commit the approval,
    then keep running the task (its approved call runs once). ``edits`` is a JSON object
    of params, or ``PARAM=VALUE`` lines (a form's textarea, VALUE read as YAML)."""
    edits = _param_edits(fields.get("edits"))
    reason = _optional(fields, "reason")
    actor = _actor(ui, fields)

    def write(runtime: Runtime[Any]) -> AgentState:
        approved: AgentState = runtime.approve(task_id, edits=edits, actor=actor, reason=reason)
        return approved

    approved = _write_then_run(ui, source, task_id, write)
    return f"approved as version {approved.version} by {actor}; the call runs, the task continues"


def reject(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate reject ID --reason R [--actor A]``: commit the rejection, then keep
    running the task (its next decision sees the reason)."""
    reason = body.text(fields, "reason")
    actor = _actor(ui, fields)

    def write(runtime: Runtime[Any]) -> AgentState:
        rejected: AgentState = runtime.reject(task_id, reason=reason, actor=actor)
        return rejected

    rejected = _write_then_run(ui, source, task_id, write)
    return f"rejected as version {rejected.version} by {actor}; the task continues"


def signal(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate signal ID NAME --data JSON``: check the payload against the agent's
    schema and post it to the task's inbox; a task idle here that waits for this very
    signal then runs on (in a thread, as after a reply). ``data`` is a JSON object, or
    its text (a form's textarea)."""
    from skillstate.cli._common import _Decisions, _runtime
    from skillstate.cli.signals import _payload

    name = body.text(fields, "name").strip()
    data = fields.get("data", {})
    payload = data if isinstance(data, dict) else _payload(body.text(fields, "data"))
    agent = _agent(source, task_id)
    decisions = _Decisions().continuing(task_id, source.store.load(task_id).state.get("driver"))
    seq = _runtime(agent, source.store, decisions, max_steps=1).signal(task_id, name, payload)
    state = source.store.load(task_id, verify=False).state
    found = state.get("wait")
    wait = found if isinstance(found, dict) else {}
    lease = source.store.lease(task_id)
    held = lease is not None and lease.live()
    if state.get("status") != "waiting" or wait.get("signal") != name or held:
        return f"delivered signal {name} (inbox #{seq}); the task consumes it when it waits for it"
    _write_then_run(ui, source, task_id, lambda runtime: runtime.load(task_id))
    return f"delivered signal {name} (inbox #{seq}); the task continues"


def _actor(ui: UIState, fields: Mapping[str, Any]) -> str:
    """Who approves or rejects: a named token's name (a request naming someone else is
    refused); with the single token, the actor the request names, else ``inspector``."""
    named = _optional(fields, "actor")
    stated = current()
    if ui.config.tokens and stated is not None:
        if named is not None and named != stated.by:
            raise UsageError(f"this token acts as {stated.by!r}; leave actor out or give that")
        return stated.by
    return named or INSPECTOR


def _optional(fields: Mapping[str, Any], name: str) -> str | None:
    """An optional text field (absent or blank: None), checked as ``body.text`` checks."""
    value = fields.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return body.text(fields, name).strip()


def _param_edits(value: Any) -> dict[str, Any] | None:
    """The edits of ``approve``: a JSON object, or ``PARAM=VALUE`` lines; None when none."""
    import yaml

    from skillstate.cli._common import _parse_assignments

    if value is None or value in ("", {}):
        return None
    if isinstance(value, dict):
        return value  # each value is checked by the runtime, as a person's edit
    try:
        return _parse_assignments(body.lines({"edits": value}, "edits"))
    except yaml.YAMLError as exc:
        raise UsageError(f"an edit is not valid YAML: {str(exc).splitlines()[0]}") from None


def _write_then_run(
    ui: UIState, source: Source, task_id: str, write: Callable[[Runtime[Any]], AgentState]
) -> AgentState:
    """Commit ``write`` with the runtime the command builds, then keep running the task
    in a thread (the page follows it live); one such thread per task at a time."""
    from skillstate.cli._common import _Decisions, _runtime

    agent = _agent(source, task_id)
    with ui.lock:
        running = ui.driving.get(task_id)
        if running is not None and running.is_alive():
            raise Conflict(f"the inspector is still running task {task_id!r}; wait for it")
        decisions = _Decisions().continuing(task_id, source.store.load(task_id).state.get("driver"))
        runtime = _runtime(agent, source.store, decisions, max_steps=ui.config.max_steps)
        written = write(runtime)

        def drive() -> None:
            try:
                runtime.run(task_id)
            except SkillstateError as exc:  # shown on the task's page by its error log
                print(f"skillstate ui: task {task_id}: {exc}", file=sys.stderr)
            except Exception as exc:
                if not ui.closing.is_set():
                    raise
                # The inspector closed the store under the step: it stopped, uncommitted.
                print(f"skillstate ui: task {task_id} stopped: {exc}", file=sys.stderr)

        thread = threading.Thread(target=drive, name=f"skillstate-ui-{task_id}", daemon=True)
        ui.driving[task_id] = thread
        thread.start()
    return written


def rollback(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate rollback ID --to V [--compensate | --keep-effects] [--children C]``."""
    from skillstate.cli.repair import children_choice
    from skillstate.engine.family import CHILDREN_CHOICES
    from skillstate.engine.rewind import rollback_task
    from skillstate.engine.runtime import Runtime

    to = body.whole(fields, "to")
    choice = _effects(fields)
    children = children_choice(body.choice(fields, "children", CHILDREN_CHOICES, "refuse"))
    agent = _agent(source, task_id) if choice == "compensate" else None
    version = rollback_task(
        source.store, task_id, to, effects=choice, agent=agent, children=children
    )
    note = ""
    if agent is not None:
        undone = Runtime(agent, source.store).compensate(task_id)
        note = f"; {undone} effect(s) undone" if undone else ""
    note += _children_said(source, task_id, version)
    return f"rolled back to version {to} as version {version}{note}"


def _children_said(source: Source, task_id: str, version: int) -> str:
    """What a rollback or fork did to child tasks, as its event records it."""
    from skillstate.cli.tree import family_lines

    events = source.store.events(task_id, since=version - 1)
    said = family_lines(events[0].action) if events else []
    return "".join(f"; {line}" for line in said)


def fork(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate fork ID --at V --new-id NEW [--keep-effects]``."""
    from skillstate.cli._common import _new_task_id
    from skillstate.engine.rewind import fork_task

    at = body.whole(fields, "at")
    agent = _agent(source, task_id)
    new_id = _new_task_id(agent, body.text(fields, "new_id").strip())
    fork_task(source.store, agent, task_id, at, new_id, effects=_effects(fields))
    return f"task {new_id} starts from version {at}{_children_said(source, new_id, 1)}"


def set_(ui: UIState, source: Source, task_id: str, fields: Mapping[str, Any]) -> str:
    """``skillstate set ID PATH=VALUE... [--force]``: ``assignments`` is one string of
    lines (a form's textarea) or a list of strings, each ``PATH=VALUE`` with VALUE read
    as YAML as the command reads it; ``force`` is a boolean."""
    import yaml

    from skillstate.cli._common import _parse_assignments
    from skillstate.engine.edits import set_agent_reference, set_fields

    lines = body.lines(fields, "assignments")
    force = body.flag(fields, "force")
    try:
        writes = _parse_assignments(lines)
    except yaml.YAMLError as exc:  # what the YAML reader refuses before parsing
        raise UsageError(f"an assignment is not valid YAML: {str(exc).splitlines()[0]}") from None
    acc = source.access(task_id)
    if acc.agent is None:
        if set(writes) != {"agent"}:
            raise AgentNotAllowed(acc.why_no_agent or f"task {task_id!r} has no usable agent")
        # The repair of a bad agent reference never imports it (or any other).
        version = set_agent_reference(source.store, task_id, writes["agent"])
        return f"set agent as version {version}"
    state = set_fields(source.store, acc.agent, task_id, writes, force=force)
    return f"set {', '.join(writes)} as version {state.version}"


ACTIONS: dict[str, Callable[[UIState, Source, str, Mapping[str, Any]], str]] = {
    "reply": reply,
    "rollback": rollback,
    "fork": fork,
    "set": set_,
    "approve": approve,
    "reject": reject,
    "signal": signal,
}


def authorize(ui: UIState, given: str | None) -> str | None:
    """Refuse a write unless edits are on (403) and ``given`` is the token (401); with
    named tokens, a write token (a read token: 403). Returns the named token's name
    (``None``: the single token)."""
    if not ui.config.allow_edit:
        raise Refused(403, READ_ONLY, "ReadOnly")
    if ui.config.tokens:
        found = match(ui.config.tokens, given)
        if found is None:
            raise Refused(401, NO_NAMED_TOKEN, "TokenRequired")
        if not found.can_write:
            raise Refused(403, READ_TOKEN, "ReadToken")
        return found.name
    if not ui.config.token_ok(given):
        raise Refused(401, NO_TOKEN, "TokenRequired")
    return None


def header_token(request: Request) -> str | None:
    """The token of ``X-Skillstate-Token`` or ``Authorization: Bearer``, if either is sent."""
    given = request.headers.get(TOKEN_HEADER)
    bearer = request.headers.get("authorization", "")
    if not given and bearer[:7].lower() == "bearer ":
        given = bearer[7:].strip()
    return given or None


def perform(
    ui: UIState, request: Request, name: str, fields: Mapping[str, Any], by: str | None = None
) -> str:
    """Run action ``name`` (the caller checked the token) as ``by`` (the named token's
    name, else ``inspector``), recording its ``reason``; a failure is raised, masked."""
    action = ACTIONS[name]
    body.only(fields, FIELDS[name], name)
    source = ui.source(request)
    task_id = str(request.path_params["task_id"])
    try:
        why = _optional(fields, "reason") if name not in ("approve", "reject") else None
        with acting(Identity(by=by or INSPECTOR, reason=check_reason(why))):
            return action(ui, source, task_id, fields)
    except SkillstateError as exc:
        from skillstate.ui.app import status_of

        message = _masked(source, task_id, fields, str(exc))
        raise Refused(status_of(exc), message, type(exc).__name__) from None


def _masked(source: Source, task_id: str, fields: Mapping[str, Any], text: str) -> str:
    """``text`` with the task's secrets masked, and any value submitted for a sensitive field."""
    try:
        masker = source.access(task_id).masker
    except SkillstateError:
        masker = Masker()
    given = fields.get("assignments")
    items = given.splitlines() if isinstance(given, str) else given
    extra = []
    for line in items if isinstance(items, list) else []:
        path, _, value = str(line).partition("=")
        if masker.sensitive_path("/" + path.strip().split(".")[0]) and value.strip():
            extra.append(value.strip())
    return Masker.of(masker.hidden, [*masker.secrets, *extra]).text(text)


def _action(request: Request) -> str:
    name = str(request.path_params["name"])
    if name not in ACTIONS:
        raise Refused(404, f"no action {name[:40]!r} ({', '.join(ACTIONS)})", "NoAction")
    return name


async def api_action(request: Request) -> Response:
    """``POST /api/actions/NAME/ID`` with a JSON object: the token first, then the body."""
    ui: UIState = request.app.state.ui
    by = authorize(ui, header_token(request))
    name = _action(request)
    if body.media_type(request) != "application/json":
        raise Refused(
            415, "send the fields as a JSON object, Content-Type: application/json", "MediaType"
        )
    fields = body.json_object(await body.read_body(request, ui.config.max_body))
    message = await run_in_threadpool(perform, ui, request, name, fields, by)
    head = ui.store.load(str(request.path_params["task_id"]), verify=False).version
    return JSONResponse({"ok": True, "message": message, "version": head})


async def form_action(request: Request) -> Response:
    """A page's form: its token is a field, compared before any other field is used."""
    ui: UIState = request.app.state.ui
    if not ui.config.allow_edit:
        raise Refused(403, READ_ONLY, "ReadOnly")
    sent = header_token(request)
    if sent is not None:
        by = authorize(ui, sent)  # before the body, as the API does
    if body.media_type(request) != "application/x-www-form-urlencoded":
        raise Refused(415, "a form is sent as application/x-www-form-urlencoded", "MediaType")
    fields = body.form_fields(await body.read_body(request, ui.config.max_body))
    token = fields.pop("token", None)
    if sent is None:
        by = authorize(ui, token)
    name = _action(request)
    message = await run_in_threadpool(perform, ui, request, name, fields, by)
    task_id = str(request.path_params["task_id"])
    query = notice_query(ui.notice_key, task_id, message)
    return RedirectResponse(f"/tasks/{quote(task_id)}?{query}", status_code=303)


def api_routes() -> list[BaseRoute]:
    return [Route("/api/actions/{name}/{task_id:path}", api_action, methods=["POST"])]


def form_routes() -> list[BaseRoute]:
    return [Route("/actions/{name}/{task_id:path}", form_action, methods=["POST"])]
