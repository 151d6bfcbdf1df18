"""Approval of one tool call of a skill (a ``gated`` tool): ask, approve, reject.

A skill's run that calls a gated tool with arguments nobody approved stops there
(:class:`~skillstate.errors.ToolApprovalNeeded`, :mod:`skillstate.control.gates`).
The runtime drops the attempt (nothing is written back, nothing verified) and
:func:`park` commits the *skill call* as the card's ``pending_approval`` (an
:class:`~skillstate.state.model.Intent`: skill, params sealed, target step, reason,
the idempotency key of the step) with the *tool call* in its ``tool`` (the tool's
name and arguments, sealed where the redaction policy would mask them), and the
status ``waiting_approval``. Two paths reach it, one commit each:

* a skill without effects, stopped in the act phase: the decision's event (actor
  ``policy``) is the call, marked ``"approval": "requested"`` with the tool call;
* a skill with effects, stopped while its intent was settled (its first run right
  after the intent's commit, or a re-run): the intent leaves ``pending_effect`` for
  ``pending_approval`` with the *same key*, in an ``approval`` event of the runtime.

Approving (:func:`approved`) appends the tool call, with a person's edits of its
arguments (validated against the tool's schema), to the intent's ``approved_tools``
and makes the intent the card's ``pending_effect`` again, under the same key: the
next run settles it like any intent in flight (probe first, so a ``kill -9``
anywhere, or two approvers racing, still runs the effect once). The skill runs from
the start; the call that matches the approved one (same tool, same arguments) runs
with the edits in place; any other gated call asks again.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.control.gates import Gated
from skillstate.engine.draft import Draft
from skillstate.engine.results import StepReport
from skillstate.errors import SecretKeyMissing, ToolApprovalNeeded, UsageError
from skillstate.events import Actor, TokenUsage, ToolCall
from skillstate.state.model import AgentState, Decision, Intent, TaskStatus, ToolApproval
from skillstate.state.protect import masked_params, open_params, seal_params, secret_texts
from skillstate.state.secrets import ENV_KEY

if TYPE_CHECKING:
    from skillstate.engine.act import Acting
    from skillstate.engine.commit import Committer
    from skillstate.state.redact import Redactor
    from skillstate.state.view import View

__all__ = ["approved", "park", "rejected_tool"]


def park(
    committer: Committer,
    acting: Acting,
    state: AgentState,
    intent: Intent,
    paused: ToolApprovalNeeded,
    *,
    note: dict[str, Any],
    actor: Actor,
    last_decision: Decision | None = None,
    view: View[Any] | None = None,
    started: datetime | None = None,
    usage: TokenUsage | None = None,
) -> StepReport[Any]:
    """Commit ``intent`` with the tool call ``paused`` stopped at as the pending approval."""
    redactor = acting.redactor(state)
    args, plain = _sealed(paused.arguments, redactor, intent.skill, paused.tool)
    pending = intent.model_copy(update={"tool": ToolApproval(tool=paused.tool, args=args)})
    changes: dict[str, Any] = {
        "status": TaskStatus.WAITING_APPROVAL,
        "pending_approval": pending,
        "pending_effect": None,  # the effect did not run: the approval brings it back
    }
    if last_decision is not None:
        changes["last_decision"] = last_decision
    draft = Draft(
        after=state.replace(**changes),
        step_id=intent.step_id,
        skill=acting.agent.skills.get(intent.skill),
        tool_calls=cast(tuple[ToolCall, ...], paused.calls),  # the calls before it ran
        usage=usage,
    )
    draft.secrets = (*secret_texts(open_params(intent.params), redactor), *plain)
    action = {**note, "approval": "requested", "tool": paused.tool, "args": masked_params(args)}
    final, event = committer.commit(state, draft, action, actor, view=view, started=started)
    return StepReport(before=state, after=final, event=event, view=view)


def approved(
    acting: Acting,
    state: AgentState,
    pending: Intent,
    *,
    changes: dict[str, Any],
    who: str,
    why: str,
) -> tuple[Draft, dict[str, Any]]:
    """The commit that approves ``pending``'s tool call (with ``changes`` of its
    arguments): the intent, with the call among its approved ones, in flight again."""
    request = pending.tool
    assert request is not None
    agent = acting.agent
    gate = agent.tools.get(request.tool)
    skill = agent.skills.get(pending.skill)
    if not isinstance(gate, Gated) or skill is None:
        raise UsageError(
            f"the pending call's tool {request.tool!r} (skill {pending.skill!r}) is not a "
            f"gated tool of agent {agent.name!r}; reject it instead"
        )
    redactor = acting.redactor(state)
    hidden = secret_texts(changes, redactor)
    edits = _edits(gate, request, changes, acting.redactor(state, extra=hidden))
    sealed, _ = _sealed(edits, redactor, pending.skill, request.tool)
    call = request.model_copy(update={"edits": sealed})
    intent = pending.model_copy(
        update={"tool": None, "approved_tools": (*pending.approved_tools, call)}
    )
    after = state.replace(status=TaskStatus.RUNNING, pending_approval=None, pending_effect=intent)
    draft = Draft(after=after, step_id=intent.step_id, skill=skill)
    draft.secrets = (
        *secret_texts(open_params(intent.params), redactor),
        *secret_texts(open_params(request.args), redactor),
        *hidden,
    )
    action: dict[str, Any] = {
        "kind": "approve",
        "actor": who,
        "reason": why,
        "skill": pending.skill,
        "params": masked_params(pending.params),
        "key": pending.key,
        "tool": request.tool,
        "args": masked_params(request.args),
    }
    if changes:
        shown = masked_params(sealed)
        action["edited"] = {name: shown.get(name) for name in changes}
    return draft, action


def rejected_tool(pending: Intent, who: str, why: str) -> tuple[str, str, dict[str, Any]]:
    """The error-log message, the "already tried" reason and the event's extra fields of
    a rejected tool call."""
    request = pending.tool
    assert request is not None
    message = f"{pending.skill}: its call of tool {request.tool} was rejected by {who}: {why}"
    failed = f"tool {request.tool} rejected by {who}: {why}"
    return message, failed, {"tool": request.tool, "args": masked_params(request.args)}


def _edits(
    gate: Gated, request: ToolApproval, changes: dict[str, Any], redactor: Redactor
) -> dict[str, Any]:
    """``changes`` checked against the tool's schema, as the JSON values the tool gets."""
    if not changes:
        return {}
    tool = request.tool
    schema = gate.schema()
    if schema is None:
        raise UsageError(
            f"edit refused: tool {tool!r} declares no argument schema "
            "(gated(..., params=Model)); approve the call as asked, or reject it; "
            "nothing was written"
        )
    if schema.model_config.get("extra") != "allow":
        unknown = [name for name in changes if name not in schema.model_fields]
        if unknown:
            known = ", ".join(schema.model_fields) or "none"
            raise UsageError(
                f"edit refused: tool {tool!r} has no argument {unknown[0]!r} (its "
                f"arguments: {known}); nothing was written"
            )
    try:
        checked = schema.model_validate({**open_params(request.args), **changes})
    except ValidationError as exc:
        message = redactor.text(first_error(exc, "args"))
        raise UsageError(
            f"edit refused: invalid arguments for tool {tool!r}: {message}; nothing was written"
        ) from None
    try:
        dumped = checked.model_dump(mode="json")
    except Exception:  # a type with no JSON form: the edits as given (they validated)
        dumped = {}
    return {name: dumped.get(name, value) for name, value in changes.items()}


def _sealed(
    args: dict[str, Any], redactor: Redactor, skill: str, tool: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``args`` with what the redaction policy masks sealed (the call needs the values)."""
    try:
        return seal_params(args, redactor, skill=f"{skill}.{tool}")
    except SecretKeyMissing:
        raise SecretKeyMissing(
            f"tool {tool!r} of skill {skill!r} waits for approval and an argument holds a "
            f"value the agent's redaction policy masks: it is kept sealed so the approved "
            f"call gets the real value. Set {ENV_KEY} (skillstate keygen), or exempt the "
            "name in the agent's RedactionPolicy(exempt_names=...)"
        ) from None
