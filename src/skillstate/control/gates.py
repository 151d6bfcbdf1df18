"""Gated tools: one tool of a skill whose calls wait for a person's approval.

An agent declares the tool ``gated``::

    tools={"send_payment": gated(send_payment, approval=lambda state, args: args["amount"] > 100)}

``approval`` is ``True`` (every call) or a predicate on the state the skill runs
against and the call's keyword arguments. A tool cannot be paused half-way, and a
skill's run cannot be resumed in the middle, but a skill can be run again: that is
what its probe and idempotency key are for. So a call that needs approval stops the
skill's run (:class:`~skillstate.errors.ToolApprovalNeeded`), the attempt's outputs
are dropped, and the runtime commits the skill call *and* the tool call as the card's
pending approval (:mod:`skillstate.control.tool_approvals`). Once a person approves
it, the skill runs again from the start, and this time a call of the same tool with
the same arguments runs without asking (with a person's edits applied); a call with
other arguments asks again.

This module holds the declaration and the check each call goes through
(:class:`ToolGate`, consulted by :meth:`SkillContext.call
<skillstate.skills.context.SkillContext.call>`); it imports nothing from the engine.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, create_model

from skillstate.errors import ToolApprovalNeeded, UsageError
from skillstate.state.protect import open_params

if TYPE_CHECKING:
    from skillstate.engine.agent import PerTask
    from skillstate.state.model import AgentState, ToolApproval

__all__ = ["Gated", "ToolApprovalFn", "ToolGate", "as_json", "gated", "same_args"]

ToolApprovalFn = Callable[[Any, dict[str, Any]], bool]
"""``approval(state, args)``: does this call of the tool need a person's approval?"""


@dataclass(frozen=True)
class Gated:
    """A tool whose calls a person approves first (see :func:`gated`)."""

    tool: Callable[..., Any] | PerTask
    approval: bool | ToolApprovalFn = True
    params: type[BaseModel] | None = None
    """The schema a person's edits of the arguments are validated against (else the
    tool's signature, for a plain function; else edits are refused)."""

    def needs_approval(self, state: AgentState, args: dict[str, Any]) -> bool:
        """Whether this call waits for a person. A predicate that raises counts as
        "yes": when in doubt, a person looks."""
        if isinstance(self.approval, bool):
            return self.approval
        try:
            return bool(self.approval(state, dict(args)))
        except Exception:
            return True

    def schema(self) -> type[BaseModel] | None:
        """The arguments' schema: ``params``, else one made from a plain function's
        signature (names, annotations, defaults), else ``None``."""
        from skillstate.engine.agent import PerTask  # the engine imports this module

        if self.params is not None:
            return self.params
        if isinstance(self.tool, PerTask):
            return None  # its function exists only once a skill runs
        return _signature_model(self.tool)


def gated(
    tool: Callable[..., Any] | PerTask,
    *,
    approval: bool | ToolApprovalFn = True,
    params: type[BaseModel] | None = None,
) -> Gated:
    """Declare ``tool`` (a callable, or :func:`~skillstate.engine.agent.per_task`) gated:
    a call a skill makes waits for a person's approval when ``approval`` says so.

    ``params`` (a pydantic model of the keyword arguments) is what ``approve --edit``
    validates edits against; without it a plain function's signature is used, and a
    per-task tool refuses edits. Put the gated call before the skill's other
    side-effecting calls: an approved call re-runs the skill from the start.
    """
    from skillstate.engine.agent import PerTask  # the engine imports this module

    if isinstance(tool, Gated):
        raise UsageError("gated(): the tool is gated already")
    if not callable(tool) and not isinstance(tool, PerTask):
        raise UsageError(
            f"gated(): the tool must be a callable or per_task(...), not {type(tool).__name__}"
        )
    if not isinstance(approval, bool) and not callable(approval):
        raise UsageError(
            "gated(): approval must be True, False or a function (state, args) -> bool, "
            f"not {type(approval).__name__}"
        )
    if params is not None and not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise UsageError("gated(): params must be a pydantic model class")
    return Gated(tool, approval, params)


def as_json(args: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as JSON values: what is kept in the card, shown to a person and
    compared (a value JSON cannot hold is kept as its text)."""
    loaded: dict[str, Any] = json.loads(json.dumps(dict(args), default=str, ensure_ascii=False))
    return loaded


def same_args(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two calls' JSON arguments are the same (``1`` is not ``true``, nor ``1.0``)."""
    return _canonical(a) == _canonical(b)


def _canonical(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class ToolGate:
    """The gated tools of one attempt of a skill: which calls run, which stop the run."""

    def __init__(
        self,
        skill: str,
        state: AgentState,
        gates: Mapping[str, Gated],
        approved: Sequence[ToolApproval] = (),
    ) -> None:
        self._skill = skill
        self._state = state
        self._gates = dict(gates)
        self._approved = tuple(approved)
        self._opened: list[tuple[str, dict[str, Any], dict[str, Any]]] | None = None

    def args_for(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """The arguments ``tool`` runs with, or :class:`ToolApprovalNeeded`.

        A call matching an approved one (same tool, same arguments) runs, with the
        person's edits in place of the arguments they changed; any other call runs
        if the tool's ``approval`` does not ask for one, else the run stops here.
        """
        gate = self._gates.get(tool)
        if gate is None:
            return args
        asked = as_json(args)
        for name, approved, edits in self._approvals():
            if name == tool and same_args(approved, asked):
                return {**args, **edits}
        if not gate.needs_approval(self._state, args):
            return args
        raise ToolApprovalNeeded(self._skill, tool, asked)

    def _approvals(self) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        if self._opened is None:  # opened once per attempt, only if a gated tool is called
            self._opened = [
                (a.tool, open_params(a.args), open_params(a.edits)) for a in self._approved
            ]
        return self._opened


def _signature_model(fn: Callable[..., Any]) -> type[BaseModel] | None:
    """A pydantic model of ``fn``'s keyword arguments (``None`` if it has no signature)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        hints = inspect.get_annotations(fn, eval_str=True) if inspect.isfunction(fn) else {}
    except Exception:  # an annotation that does not evaluate: the names still count
        hints = {}
    fields: dict[str, Any] = {}
    extra = "forbid"
    for name, param in signature.parameters.items():
        if param.kind is param.VAR_KEYWORD:
            extra = "allow"
            continue
        if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
            continue  # ctx.call passes keywords only
        default = ... if param.default is param.empty else param.default
        fields[name] = (hints.get(name, Any), default)
    config = ConfigDict(extra=extra, arbitrary_types_allowed=True)  # type: ignore[typeddict-item]
    try:
        name = f"{getattr(fn, '__name__', 'tool')}_args"
        model: type[BaseModel] = create_model(name, __config__=config, **fields)
    except Exception:  # an annotation pydantic cannot validate
        return None
    return model
