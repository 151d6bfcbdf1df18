"""An :class:`Agent` bundles what drives a task: state class, machine, skills, tools, policy.

It is a plain definition with no I/O: the :class:`~skillstate.engine.runtime.Runtime`
runs it against a store. ``skillstate run module:attr`` imports one by name, and the
name is kept in the state card so ``resume`` can find it again in a new process.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from skillstate._validation import first_error
from skillstate.control.gates import Gated
from skillstate.control.signals import Signal, signal_specs
from skillstate.control.strategy import MESSAGE_STRATEGIES, MessageStrategy
from skillstate.definitions.manifest import Definition, definition_of
from skillstate.definitions.patches import Patch, alias_patches, patch_problems
from skillstate.engine.agent_checks import definition_problems, library_problems
from skillstate.engine.pertask import PerTask, per_task
from skillstate.engine.policy import ModelPolicy, Policy
from skillstate.errors import AgentImportError, UsageError
from skillstate.fanout import spec as fanout
from skillstate.limits import DEFAULT_LIMITS, Limits, problem
from skillstate.ops.budgets import Budget
from skillstate.ops.spotchecks import SpotChecks
from skillstate.shared.declare import Shared
from skillstate.skills.registry import SkillRegistry
from skillstate.state.budget import DEFAULT_VIEW_BUDGET
from skillstate.state.machine import StateMachine
from skillstate.state.migrate import validate_state
from skillstate.state.model import AgentState, TaskStatus
from skillstate.state.redact import RedactionPolicy
from skillstate.state.view import VALUE_CHARS, View, render_view

if TYPE_CHECKING:
    from skillstate.library.retrieval import Retriever
    from skillstate.library.stats import SuccessRates
    from skillstate.skills.skill import Skill

__all__ = ["Agent", "Invariant", "PerTask", "agent_factory", "load_agent", "per_task"]

Invariant = Callable[[Any], "bool | str | None"]


DEFAULT_POLICY = RedactionPolicy()
"""``fn(state) -> True | None`` (holds) or ``False | "what is wrong"`` (broken)."""


S = TypeVar("S", bound=AgentState)


@dataclass
class Agent(Generic[S]):
    """The definition of an agent. Validated when built.

    ``goal``, ``constraints`` and ``plan`` seed every new task's card;
    ``sample_inputs`` are the canned user replies ``skillstate demo`` uses.
    """

    name: str
    state_type: type[S]
    machine: StateMachine
    skills: SkillRegistry
    policy: Policy[S]
    tools: Mapping[str, Callable[..., Any] | PerTask | Gated] = field(default_factory=dict)
    """Tools by name: a callable, or :func:`per_task` to build one from each task's state;
    either wrapped in :func:`~skillstate.control.gates.gated` when a person approves its
    calls first."""
    goal: str = ""
    constraints: Sequence[str] = ()
    plan: Sequence[str] = ()
    description: str = ""
    sample_inputs: Sequence[str] = ()
    ref: str | None = None
    """``module:attr`` this agent is importable as: set by :func:`load_agent`, else found
    in the module that built it the first time a task is created (see :meth:`reference`)."""
    budget: Budget | None = None
    """Model calls, prompt tokens and cost per task (:mod:`skillstate.ops.budgets`): a
    warning at ``warn_at``, a stop at the limit; the runtime's ``max_*`` still apply."""
    view_budget: int | Literal["auto"] | None = "auto"
    """Token budget of the prompt view (:mod:`skillstate.state.budget`): what does not
    fit is hidden by priority, an overrun is recorded. ``"auto"`` (the default) is
    :data:`~skillstate.state.budget.DEFAULT_VIEW_BUDGET` tokens when the policy is a
    model's (:class:`~skillstate.engine.policy.ModelPolicy`) and the whole view for any
    other; ``None`` renders it whole whatever the policy."""
    view_value_chars: int = VALUE_CHARS
    """How much of each field's value the view shows. The default keeps the card
    compact; an agent whose state holds raw tool output (the harness's ``state``
    variant) raises it so the model can read what its last call returned."""
    bind_params: bool = True
    """Whether params declared :class:`~skillstate.skills.binding.FromState` or
    :class:`~skillstate.skills.binding.OneOf` are bound (filled by the runtime, offered
    as choices). Off, every param is the model's to decide (an ablation)."""
    can_ask: bool = True
    """Whether the policy may ask the user. Off for unattended runs (an evaluation,
    a batch job): the action is then not offered at all, so a model cannot stall
    the task on a question nobody will answer."""
    can_wait: bool = False
    """Whether ``wait_until`` is offered to a model (a scripted policy may always
    return ``WaitUntil``). Off by default: a model offered a pause uses it."""
    signals: Mapping[str, type[BaseModel] | Signal] = field(default_factory=dict)
    """The signals a task may wait for (``WaitFor``), by name: each payload's pydantic
    model, or a :class:`~skillstate.control.signals.Signal` with a default timeout and
    the step a timeout goes to. ``wait_for`` is offered to a model for these."""
    messages: MessageStrategy = "enqueue"
    """What a message sent to a running task (``skillstate send``) does: ``enqueue``
    (the next decision sees it), ``interrupt`` (the next decision sees it first, marked
    urgent; it also ends a wait for a reply) or ``reject`` (``send`` refuses it). See
    :mod:`skillstate.control.inbox`."""
    finish_with_pending: bool = False
    """Whether ``Finish`` may end a task while ``pending_steps`` remain. Off by
    default: a plan step that never ran is a task that is not done."""
    redaction: RedactionPolicy = DEFAULT_POLICY
    """What is masked wherever text leaves the process (the stored card, events,
    tool outputs, views, transcripts): key names such as ``access_token`` or
    ``user_phone`` and values shaped like tokens, card, phone or ID numbers.
    ``RedactionPolicy.OFF`` masks only the plaintext of ``Sensitive`` fields."""
    limits: Limits = DEFAULT_LIMITS
    """Sizes and nesting of what may enter the card (params, written values,
    replies); see :mod:`skillstate.limits`."""
    invariants: list[tuple[str, Invariant]] = field(default_factory=list)
    """Rules every committed state must satisfy, checked before every commit, the
    runtime's and a person's alike (add them with :meth:`invariant`)."""
    # -- Skill library at scale (issue 26; skillstate.library) --------------------------
    retriever: Retriever | None = None
    """Offers each decision only the :attr:`top_k` applicable skills most relevant to it,
    ranked by their success rate in the store (:mod:`skillstate.library.select`): the
    view, the decision's schema and the system prompt list only those. ``None`` (the
    default): every applicable skill is offered, as without a library."""
    top_k: int = 8
    """How many skills a decision is offered when there is a :attr:`retriever`."""
    patches: Sequence[Patch] = ()
    """How tasks started under an earlier definition of this agent are carried across
    its changes: :func:`~skillstate.definitions.patched` markers (a skill renamed,
    removed or changed, a step renamed, the machine's removals). See
    :mod:`skillstate.definitions`. A skill's ``aliases`` add one rename marker each."""
    # -- Cross-task memory (issue 27; skillstate.memory) ------------------------------
    memory: Sequence[str] = ()
    """The cross-task memory scopes each decision's view shows facts of ("Memory (from
    other tasks)", with their provenance): ``agent:NAME``, ``team:NAME``, ``user:NAME``,
    a ``{field}`` of the card standing for the name (``user:{user}``: each task reads
    its own user's; a task whose field is empty reads none). Skills write with
    ``ctx.remember`` (declared in their ``remembers``). See :mod:`skillstate.memory`."""
    memory_facts: int = 12
    """How many facts of :attr:`memory` a view shows at most, the most recently written
    first (the view budget hides them before the task's own facts)."""
    shared: Mapping[str, Shared] = field(default_factory=dict)
    """Records shared across tasks, by name (:mod:`skillstate.shared`)."""
    # -- Fan-out (issue 28; skillstate.fanout: checked by fanout.spec.check_children) --
    children: Mapping[str, fanout.Child | Agent[Any] | Skill[Any, Any] | str] = field(
        default_factory=dict
    )
    """Kinds of child task this agent may spawn (``Spawn``/``Map``), by name."""
    max_children: int = fanout.MAX_WIDTH
    """The most children one ``Spawn``/``Map`` makes (a task: 4 times this in all)."""
    max_depth: int = fanout.MAX_DEPTH
    """How deep a tree of tasks may grow below a root task."""
    spot_checks: SpotChecks | None = None
    """Which verified steps people review (:mod:`skillstate.ops.spotchecks`; ``None``: the
    project's ``[tool.skillstate.spot_checks]``, if any). Marks cost the steps nothing."""

    @property
    def definition(self) -> Definition:
        """This agent's definition (manifest and ``sha256:`` ref) each new task is pinned
        to; computed once (:func:`~skillstate.definitions.definition_of`)."""
        return definition_of(self)

    def invariant(self, fn: Invariant) -> Invariant:
        """Register ``fn(state)`` as an invariant (usable as a decorator).

        It returns ``True`` or ``None`` when the state is acceptable, and ``False``
        or a message saying what is wrong when it is not. A step that would break
        an invariant is refused like a failing verify; a hand edit is refused with
        the message.
        """
        name = getattr(fn, "__name__", "invariant")
        self.invariants.append((name, fn))
        return fn

    def broken_invariant(self, state: AgentState) -> str | None:
        """The first invariant ``state`` breaks, as ``name: message``; ``None`` if none."""
        for name, fn in self.invariants:
            try:
                verdict = fn(state)
            except Exception as exc:
                return f"{name}: raised {type(exc).__name__}: {exc}"
            if verdict is None or verdict is True:
                continue
            message = verdict if isinstance(verdict, str) and verdict else "does not hold"
            return f"{name}: {message}"
        return None

    def can_continue_from(self, step: str, *, pending: Sequence[str] = ()) -> bool:
        """Whether some action could still apply once the task is in ``step``.

        True when a skill may run from there (its step is reachable, or it keeps the
        current step) or the task may finish there. ``when`` is not asked: the next
        input can change it.
        """
        machine = self.machine
        if any(s.step is None or machine.can(step, s.step) for s in self.skills):
            return True
        can_finish = step in machine.final or machine.finish_step(step) is not None
        return can_finish and (not pending or self.finish_with_pending)

    def __post_init__(self) -> None:
        # Where the agent was built (the first caller outside the dataclass machinery),
        # to find its own `module:attr` later: a new task records it for `resume`.
        self._module: str | None = _builder_module()
        problems = definition_problems(self)
        # A skill's `aliases` are rename markers too: one patch per old name.
        self.patches = (*self.patches, *alias_patches(self.skills))
        problems += patch_problems(self.patches, self.skills.names, self.machine.steps)
        if self.retriever is not None:
            problems += library_problems(self.retriever, self.top_k)
        if self.messages not in MESSAGE_STRATEGIES:
            problems.append(
                f"messages must be one of {', '.join(MESSAGE_STRATEGIES)}, not {self.messages!r}"
            )
        if problems:
            raise UsageError(f"agent {self.name!r} is invalid: " + "; ".join(problems))

    def reference(self) -> str | None:
        """``module:attr`` of this agent, if it is a global of an importable module."""
        if self.ref is None and self._module not in (None, "__main__"):
            module = sys.modules.get(str(self._module))
            for name, value in vars(module).items() if module else ():
                if value is self and not name.startswith("_"):
                    self.ref = f"{self._module}:{name}"
                    break
        return self.ref

    def new_state(self, task_id: str, **fields: Any) -> S:
        """Version 0 of a task's card (the runtime commits it as version 1)."""
        base: dict[str, Any] = {
            "task_id": task_id,
            "status": TaskStatus.CREATED,
            "goal": self.goal,
            "constraints": tuple(self.constraints),
            "pending_steps": tuple(self.plan),
            "current_step": self.machine.initial,
            "agent": self.reference(),
            "definition": self.definition.ref,
        }
        for name, value in fields.items():
            # What a skill may not write, a caller may not start with either (a NaN
            # would be stored as null: JSON has no NaN).
            unfit = problem(value, chars=self.limits.value_chars, depth=self.limits.depth)
            if unfit is not None:
                raise UsageError(f"invalid initial state for task {task_id!r}: {name}: {unfit}")
        base.update(fields)
        try:
            return self.state_type.model_validate(base)
        except ValidationError as exc:
            raise UsageError(
                f"invalid initial state for task {task_id!r}: {first_error(exc, 'state')}"
            ) from exc

    def parse_state(self, data: Mapping[str, Any], *, task_id: str | None = None) -> S:
        """A stored document as the agent's state class: migrated, then validated.

        A broken record is :class:`~skillstate.errors.StateCorrupted` naming the
        field, so the task stops before anything is written over it; one from a
        newer schema is :class:`~skillstate.errors.SchemaTooNew`. ``task_id`` names
        the task in errors when the record's own id is unusable.
        """
        return validate_state(self.state_type, data, task_id=task_id)  # type: ignore[return-value]

    @property
    def effective_view_budget(self) -> int | None:
        """The token budget views are rendered under (:attr:`view_budget` resolved)."""
        if self.view_budget != "auto":
            return self.view_budget
        return DEFAULT_VIEW_BUDGET if isinstance(self.policy, ModelPolicy) else None

    def view(self, state: S, *, rates: SuccessRates | None = None) -> View[S]:
        """The view a decision in ``state`` is made from. With a :attr:`retriever`, it
        offers the top candidates, ranked with ``rates`` (the store's success rates;
        ``None``: every skill weighs the same)."""
        choose = None
        if self.retriever is not None:
            from skillstate.library.select import chooser

            choose = chooser(self, state, rates)
        return render_view(
            state,
            machine=self.machine,
            skills=list(self.skills),
            budget=self.effective_view_budget,
            agent_name=self.name,
            agent_description=self.description,
            can_ask=self.can_ask,
            value_chars=self.view_value_chars,
            bind=self.bind_params,
            can_wait=self.can_wait,
            signals={name: spec.schema for name, spec in self.signal_specs.items()},
            choose=choose,
            child_kinds=tuple(self.children),
        )

    @property
    def signal_specs(self) -> dict[str, Signal]:
        """:attr:`signals` with every value a :class:`~skillstate.control.signals.Signal`."""
        return signal_specs(self.signals)


def _builder_module() -> str | None:
    frame = sys._getframe(2)  # the caller of the generated __init__
    while frame is not None and frame.f_globals.get("__name__") in {"dataclasses", __name__}:
        frame = frame.f_back  # type: ignore[assignment]
    return frame.f_globals.get("__name__") if frame is not None else None


_FACTORY = "__skillstate_agent_factory__"

F = TypeVar("F", bound=Callable[[], "Agent[Any]"])


def agent_factory(build: F) -> F:
    """Declare ``build`` (no arguments, returns an :class:`Agent`) a factory that
    :func:`load_agent` may call, so ``skillstate run my_pkg.agents:build`` builds the
    agent when it is run rather than when the module is imported::

        @agent_factory
        def build() -> Agent[TripState]:
            return Agent(name="trip", ...)

    Only declared factories are ever called: a reference to any other callable
    (``os:abort``, a class, a helper function) is refused, never called.
    """
    setattr(build, _FACTORY, True)
    return build


def load_agent(ref: str, *, search_cwd: bool = False) -> Agent[Any]:
    """Import ``module:attr`` and return the :class:`Agent` it names.

    ``attr`` is an :class:`Agent`, or a function declared with :func:`agent_factory`,
    which is called (with no arguments) to build one. Anything else is refused with
    :class:`~skillstate.errors.AgentImportError` and never called. Only call this
    with a reference the operator chose (a command-line argument, an allow-listed
    name), never with one read from a store: importing runs the module's code.
    ``search_cwd`` also looks for the module in the current directory, as
    ``python -m`` would (the CLI's entry point does not put it on ``sys.path``).
    """
    if fanout.CHILD_REF in ref:  # a child kind with no reference of its own
        return fanout.resolve_child_ref(ref, search_cwd=search_cwd)
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise AgentImportError(f"expected MODULE:ATTR, got {ref!r}")
    if search_cwd and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentImportError(f"cannot import {module_name!r}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AgentImportError(f"{module_name!r} has no attribute {attr!r}") from None
    if not isinstance(target, Agent) and getattr(target, _FACTORY, None) is True:
        built = _built(ref, target)
        # A factory may hand out an agent other code shares (a module's own): one that
        # already knows where it lives keeps its reference.
        if built.reference() is None:
            built.ref = ref
        return built
    if not isinstance(target, Agent):
        hint = " (a function that builds one must be declared @agent_factory)"
        raise AgentImportError(
            f"{ref!r} is a {type(target).__name__}, not a skillstate Agent"
            + (hint if callable(target) else "")
        )
    target.ref = ref
    return target


def _built(ref: str, factory: Callable[[], Any]) -> Agent[Any]:
    """What a declared factory returns (an Agent, checked by the caller)."""
    try:
        built = factory()
    except Exception as exc:
        raise AgentImportError(
            f"agent factory {ref!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(built, Agent):
        raise AgentImportError(
            f"agent factory {ref!r} returned {type(built).__name__}, not a skillstate Agent"
        )
    return built
