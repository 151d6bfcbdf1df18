"""skillstate: LLM agents driven by an explicit, persisted execution state.

A task is a *state card* (:class:`AgentState`) moved forward by verified *skills*.
Each decision sees a compact *view* of the card, never the transcript; every step
is an atomic commit with an auditable JSON Patch, so any step can be inspected,
rolled back and resumed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names are imported on first use, so `import skillstate.cli` (and `skillstate --help`)
# does not pay for pydantic models it will not touch.
_EXPORTS: dict[str, str] = {
    "Action": "skillstate.engine.actions",
    "AskUser": "skillstate.engine.actions",
    "CallSkill": "skillstate.engine.actions",
    "Fail": "skillstate.engine.actions",
    "Finish": "skillstate.engine.actions",
    "Revise": "skillstate.engine.actions",
    "LoadEvidence": "skillstate.engine.actions",
    "WaitFor": "skillstate.engine.actions",
    "WaitUntil": "skillstate.engine.actions",
    "Spawn": "skillstate.engine.actions",
    "Map": "skillstate.engine.actions",
    "Child": "skillstate.fanout",
    "Signal": "skillstate.control.signals",
    "gated": "skillstate.control.gates",
    "parse_action": "skillstate.engine.actions",
    "Agent": "skillstate.engine.agent",
    "Patch": "skillstate.definitions",
    "is_patched": "skillstate.definitions",
    "patched": "skillstate.definitions",
    "DefinitionChanged": "skillstate.errors",
    "agent_factory": "skillstate.engine.agent",
    "load_agent": "skillstate.engine.agent",
    "per_task": "skillstate.engine.agent",
    "Policy": "skillstate.engine.policy",
    "ScriptedPolicy": "skillstate.engine.policy",
    "RunResult": "skillstate.engine.runtime",
    "Runtime": "skillstate.engine.runtime",
    "StepReport": "skillstate.engine.runtime",
    "rollback_task": "skillstate.engine.rewind",
    "fork_task": "skillstate.engine.rewind",
    "ActionRejected": "skillstate.errors",
    "ApprovalNotPending": "skillstate.errors",
    "AgentImportError": "skillstate.errors",
    "ArtifactNotFound": "skillstate.errors",
    "IllegalTransition": "skillstate.errors",
    "InvalidStoreURL": "skillstate.errors",
    "MissingExtra": "skillstate.errors",
    "OutputNotDeclared": "skillstate.errors",
    "SkillstateError": "skillstate.errors",
    "StaleState": "skillstate.errors",
    "StateError": "skillstate.errors",
    "StoreError": "skillstate.errors",
    "TaskNotFound": "skillstate.errors",
    "StoreNotFound": "skillstate.errors",
    "ToolApprovalNeeded": "skillstate.errors",
    "ToolNotAllowed": "skillstate.errors",
    "UsageError": "skillstate.errors",
    "CompensationFailed": "skillstate.errors",
    "EffectsCrossed": "skillstate.errors",
    "InvariantBroken": "skillstate.errors",
    "MessageRefused": "skillstate.errors",
    "Event": "skillstate.events",
    "SkillTransition": "skillstate.events",
    "ToolCall": "skillstate.events",
    "Verdict": "skillstate.events",
    "FromState": "skillstate.skills.binding",
    "OneOf": "skillstate.skills.binding",
    "SkillRegistry": "skillstate.skills.registry",
    "NoParams": "skillstate.skills.skill",
    "Outcome": "skillstate.skills.skill",
    "Skill": "skillstate.skills.skill",
    "SkillContext": "skillstate.skills.context",
    "ToolError": "skillstate.skills.context",
    "VerifyContext": "skillstate.skills.skill",
    "StateMachine": "skillstate.state.machine",
    "Sensitive": "skillstate.state.secrets",
    "ViewPriority": "skillstate.state.budget",
    "migration": "skillstate.state.migrate",
    "AgentState": "skillstate.state.model",
    "Decision": "skillstate.state.model",
    "ErrorEntry": "skillstate.state.model",
    "Evidence": "skillstate.state.model",
    "Compensation": "skillstate.state.model",
    "FailedAttempt": "skillstate.state.model",
    "StepRecord": "skillstate.state.model",
    "TaskStatus": "skillstate.state.model",
    "View": "skillstate.state.view",
    "render_view": "skillstate.state.view",
    "Checkpoint": "skillstate.store",
    "Store": "skillstate.store",
    "HeadInfo": "skillstate.store.base",
    "open_store": "skillstate.store",
}

if TYPE_CHECKING:
    from skillstate.control.gates import gated
    from skillstate.control.signals import Signal
    from skillstate.definitions import Patch, is_patched, patched
    from skillstate.engine.actions import (
        Action,
        AskUser,
        CallSkill,
        Fail,
        Finish,
        LoadEvidence,
        Map,
        Revise,
        Spawn,
        WaitFor,
        WaitUntil,
        parse_action,
    )
    from skillstate.engine.agent import Agent, agent_factory, load_agent, per_task
    from skillstate.engine.policy import Policy, ScriptedPolicy
    from skillstate.engine.rewind import fork_task, rollback_task
    from skillstate.engine.runtime import RunResult, Runtime, StepReport
    from skillstate.errors import (
        ActionRejected,
        AgentImportError,
        ApprovalNotPending,
        ArtifactNotFound,
        CompensationFailed,
        DefinitionChanged,
        EffectsCrossed,
        IllegalTransition,
        InvalidStoreURL,
        InvariantBroken,
        MessageRefused,
        MissingExtra,
        OutputNotDeclared,
        SkillstateError,
        StaleState,
        StateError,
        StoreError,
        StoreNotFound,
        TaskNotFound,
        ToolApprovalNeeded,
        ToolNotAllowed,
        UsageError,
    )
    from skillstate.events import Event, SkillTransition, ToolCall, Verdict
    from skillstate.fanout import Child
    from skillstate.skills.binding import FromState, OneOf
    from skillstate.skills.context import SkillContext, ToolError
    from skillstate.skills.registry import SkillRegistry
    from skillstate.skills.skill import NoParams, Outcome, Skill, VerifyContext
    from skillstate.state.budget import ViewPriority
    from skillstate.state.machine import StateMachine
    from skillstate.state.migrate import migration
    from skillstate.state.model import (
        AgentState,
        Compensation,
        Decision,
        ErrorEntry,
        Evidence,
        FailedAttempt,
        StepRecord,
        TaskStatus,
    )
    from skillstate.state.secrets import Sensitive
    from skillstate.state.view import View, render_view
    from skillstate.store import Checkpoint, Store, open_store
    from skillstate.store.base import HeadInfo


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'skillstate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "Action",
    "ActionRejected",
    "Agent",
    "AgentImportError",
    "AgentState",
    "ApprovalNotPending",
    "ArtifactNotFound",
    "AskUser",
    "CallSkill",
    "Checkpoint",
    "Child",
    "Compensation",
    "CompensationFailed",
    "Decision",
    "DefinitionChanged",
    "EffectsCrossed",
    "ErrorEntry",
    "Event",
    "Evidence",
    "Fail",
    "FailedAttempt",
    "Finish",
    "FromState",
    "HeadInfo",
    "IllegalTransition",
    "InvalidStoreURL",
    "InvariantBroken",
    "LoadEvidence",
    "Map",
    "MessageRefused",
    "MissingExtra",
    "NoParams",
    "OneOf",
    "Outcome",
    "OutputNotDeclared",
    "Patch",
    "Policy",
    "Revise",
    "RunResult",
    "Runtime",
    "ScriptedPolicy",
    "Sensitive",
    "Signal",
    "Skill",
    "SkillContext",
    "SkillRegistry",
    "SkillTransition",
    "SkillstateError",
    "Spawn",
    "StaleState",
    "StateError",
    "StateMachine",
    "StepRecord",
    "StepReport",
    "Store",
    "StoreError",
    "StoreNotFound",
    "TaskNotFound",
    "TaskStatus",
    "ToolApprovalNeeded",
    "ToolCall",
    "ToolError",
    "ToolNotAllowed",
    "UsageError",
    "Verdict",
    "VerifyContext",
    "View",
    "ViewPriority",
    "WaitFor",
    "WaitUntil",
    "__version__",
    "agent_factory",
    "fork_task",
    "gated",
    "is_patched",
    "load_agent",
    "migration",
    "open_store",
    "parse_action",
    "patched",
    "per_task",
    "render_view",
    "rollback_task",
]
