"""skillstate: LLM agents driven by an explicit, persisted execution state.

A task is a *state card* (:class:`AgentState`) moved forward by verified *skills*.
Each decision sees a compact *view* of the card, never the transcript; every step
is an atomic commit with an auditable JSON Patch, so any step can be inspected,
rolled back and resumed.
"""

from __future__ import annotations

from skillstate.engine.actions import Action, AskUser, CallSkill, Fail, Finish, parse_action
from skillstate.engine.agent import Agent, load_agent
from skillstate.engine.policy import Policy, ScriptedPolicy
from skillstate.engine.runtime import RunResult, Runtime, StepReport, rollback_task
from skillstate.errors import (
    ActionRejected,
    AgentImportError,
    ArtifactNotFound,
    IllegalTransition,
    InvalidStoreURL,
    MissingExtra,
    OutputNotDeclared,
    SkillstateError,
    StaleState,
    StateError,
    StoreError,
    TaskNotFound,
    ToolNotAllowed,
    UsageError,
)
from skillstate.events import Event, SkillTransition, ToolCall, Verdict
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, Skill, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import (
    AgentState,
    Decision,
    ErrorEntry,
    Evidence,
    StepRecord,
    TaskStatus,
)
from skillstate.state.view import View, render_view
from skillstate.store import Checkpoint, Store, open_store

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ActionRejected",
    "Agent",
    "AgentImportError",
    "AgentState",
    "ArtifactNotFound",
    "AskUser",
    "CallSkill",
    "Checkpoint",
    "Decision",
    "ErrorEntry",
    "Event",
    "Evidence",
    "Fail",
    "Finish",
    "IllegalTransition",
    "InvalidStoreURL",
    "MissingExtra",
    "NoParams",
    "Outcome",
    "OutputNotDeclared",
    "Policy",
    "RunResult",
    "Runtime",
    "ScriptedPolicy",
    "Skill",
    "SkillContext",
    "SkillRegistry",
    "SkillTransition",
    "SkillstateError",
    "StaleState",
    "StateError",
    "StateMachine",
    "StepRecord",
    "StepReport",
    "Store",
    "StoreError",
    "TaskNotFound",
    "TaskStatus",
    "ToolCall",
    "ToolNotAllowed",
    "UsageError",
    "Verdict",
    "View",
    "__version__",
    "load_agent",
    "open_store",
    "parse_action",
    "render_view",
    "rollback_task",
]
