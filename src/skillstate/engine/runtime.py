"""The runtime: load the head, then one step in four phases, until the task stops.

A step is **decide** (render the view, ask the policy), **act** (validate and run
the action: :mod:`skillstate.engine.act`), **settle** (:mod:`skillstate.engine.settle`: an
effect's intent is committed first and settled after; the stall guard counts
progress; invariants are checked) and **commit** (one state construction, its
event and one atomic compare-and-set: :mod:`skillstate.engine.commit`). Anything
that goes wrong before the commit writes only an error-log entry: a skill's
outputs never reach the state unverified.

Every step starts from the stored head, so stopping the process at any point and
calling :meth:`Runtime.run` again resumes from the last commit. Work the head
says is unfinished is settled before anything new is decided: queued
compensations first, then an effect in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar, cast

from skillstate.control.approvals import Approvals
from skillstate.control.inbox import Inbox
from skillstate.control.waits import Waits
from skillstate.engine.act import Acting
from skillstate.engine.actions import Action
from skillstate.engine.agent import Agent
from skillstate.engine.commands import Commands
from skillstate.engine.commit import Committer
from skillstate.engine.draft import Draft
from skillstate.engine.driving import Steps, drive
from skillstate.engine.guard import Guard, OnStall
from skillstate.engine.lease import Holder, default_worker
from skillstate.engine.phases import Begun, Phases
from skillstate.engine.policy import Decided
from skillstate.engine.replies import check_numbering, unused
from skillstate.engine.results import (
    PARKED,
    RunResult,
    StepReport,
    StopReason,
    stopped_by_status,
)
from skillstate.engine.settle import Settling
from skillstate.engine.trace import NOOP, Tracer, traced_step, using
from skillstate.errors import (
    DecisionFailed,
    InvariantBroken,
    StaleState,
    TaskNotFound,
    UsageError,
)
from skillstate.fanout.inline import run_inline
from skillstate.fanout.join import Children
from skillstate.fanout.spec import ChildMode, check_mode
from skillstate.llm.base import Prices
from skillstate.ops.budgets import budget_stop, warn_budget
from skillstate.state.model import AgentState, ErrorEntry, TaskStatus
from skillstate.store.base import RESERVED, Store, is_reserved

__all__ = ["RunResult", "Runtime", "StepReport", "StopReason"]


S = TypeVar("S", bound=AgentState)


class Runtime(Commands[S], Generic[S]):
    """Runs an :class:`Agent` against a :class:`Store`; typed by the agent's state class
    (``Runtime(trip_agent, store).run("t").state`` is a ``TripState``).

    ``max_steps`` bounds the decisions of one :meth:`run` call; ``max_retries`` is
    the retry budget of a skill that does not set its own. ``max_stalled``,
    ``max_repeats`` and ``on_stall`` configure the stall guard
    (:mod:`skillstate.engine.guard`): a task whose decisions stop making progress
    is failed (or parked for a person) instead of running to the step budget.

    Every call that writes holds a lease on the task (``worker``, default
    ``host:pid``, renewed by a heartbeat) and fences its commits with the lease's
    generation, so two runtimes on one task, in one process or on two machines,
    never both run a step or settle an effect. ``lease=False`` turns this off, for
    an embedding where one process is the only writer (the store's compare-and-set
    still refuses a stale commit, but a second runtime could then probe or run an
    effect the first has in flight).
    """

    def __init__(
        self,
        agent: Agent[S],
        store: Store,
        *,
        max_steps: int = 50,
        max_retries: int = 2,
        observer: Callable[[StepReport[S]], None] | None = None,
        worker: str | None = None,
        lease_ttl: float = 60.0,
        max_calls: int | None = None,
        max_tokens: int | None = None,
        max_cost: float | None = None,
        prices: Prices | None = None,
        max_invalid: int | None = None,
        max_stalled: int | None = 10,
        max_repeats: int | None = 3,
        on_stall: OnStall = "fail",
        lease: bool = True,
        tracer: Tracer = NOOP,
        children: ChildMode = "inline",
    ) -> None:
        if max_steps < 1 or max_retries < 0:
            raise UsageError("max_steps must be >= 1 and max_retries >= 0")
        if max_invalid is not None and max_invalid < 1:
            raise UsageError("max_invalid must be >= 1")
        self.agent = agent
        self.store = store
        self.tracer = tracer
        """Spans and metrics of every run and step (:mod:`skillstate.engine.trace`;
        ``OTelTracer`` for OpenTelemetry). Off by default."""
        self.max_steps = max_steps
        self.max_retries = max_retries
        self.lease = lease
        self.worker = worker or default_worker()
        """The lease holder's name (``host:pid`` by default)."""
        self.lease_ttl = lease_ttl
        self._holders: dict[str, Holder] = {}
        # Budgets per task, checked against the card's usage totals (which survive
        # resumes) before every decision.
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.prices = prices
        self.max_invalid = max_invalid
        """Stop a run after this many decisions in a row that stayed invalid after
        their repairs: a model that cannot produce an action here would otherwise
        spend the whole step budget (resumable, like the other budgets)."""
        self.guard = Guard(max_stalled=max_stalled, max_repeats=max_repeats, on_stall=on_stall)
        self.children = check_mode(children)
        """Who runs a parent's children: this ``run`` (``inline``) or workers (``dispatch``)."""
        self._committer = Committer(agent, store, observer, fence=self._fence)
        self._acting = Acting(agent, store, max_retries, self._committer.redactor, self._fence)
        self._settling = Settling(
            agent, self._acting, self._committer, self.guard, check_lease=self._check_lease
        )
        self._approvals = Approvals(
            agent, self._acting, self._committer, self._settling, self._holding
        )
        self._waits = Waits(agent, store, self._committer.commit)
        self._inbox = Inbox(agent, store, self._committer.commit)
        self._children = Children(agent, store, self._committer.commit, spawner=self)
        self._steps = Phases(
            agent,
            store,
            committer=self._committer,
            acting=self._acting,
            settling=self._settling,
            approvals=self._approvals,
            prices=prices,
            tracer=lambda: self.tracer,
        )

    @property
    def observer(self) -> Callable[[StepReport[S]], None] | None:
        """Called with every committed step but the task's creation."""
        return self._committer.observer

    @observer.setter
    def observer(self, value: Callable[[StepReport[S]], None] | None) -> None:
        self._committer.observer = value

    # ------------------------------------------------------------------ public

    def start(self, task_id: str, **fields: Any) -> S:
        """Create the task (version 1) with ``fields`` set. Raises ``StaleState`` if it exists."""
        if is_reserved(task_id):
            raise UsageError(f"task ids starting with {RESERVED!r} are skillstate's own records")
        state = self.agent.new_state(task_id, **fields)
        broken = self.agent.broken_invariant(state)
        if broken is not None:
            raise InvariantBroken(f"task {task_id!r} would start broken: invariant {broken}")
        with self._holding(task_id):
            draft = Draft(after=state)
            created = self._committer.commit(None, draft, {"kind": "create"}, "runtime")[0]
            return cast(S, created)

    def load(self, task_id: str) -> S:
        """The head state of a task, validated (and migrated) into the agent's state class.

        Raises :class:`~skillstate.errors.StateCorrupted` when the stored record
        does not validate; nothing is written then.
        """
        # The committer parses every head into the agent's state class: an S.
        return cast(S, self._committer.load(task_id))

    def run(
        self,
        task_id: str,
        *,
        inputs: Sequence[str] = (),
        max_steps: int | None = None,
        inputs_from: int = 0,
        stop: Callable[[], bool] | None = None,
        create: bool = False,
        accept_definition: bool = False,
    ) -> RunResult[S]:
        """Decide and commit until the task ends, waits for a user, stalls or hits ``max_steps``.

        ``inputs`` are the task's replies by index: ``inputs[i]`` is reply number
        ``inputs_from + i``. When the task asks, the next reply it has not received
        yet is given; when they run out it pauses in ``waiting_user``. So calling
        ``run`` again with the same list (after a crash, say) never gives a reply
        twice; new replies under numbers the task has already received are refused
        (:mod:`skillstate.engine.replies`), and :attr:`RunResult.unused_inputs` lists
        the inputs it did not ask for.

        The task must exist (:meth:`start` it with its fields): an unknown ``task_id``
        is :class:`~skillstate.errors.TaskNotFound`, so a mistyped id never starts a new
        task from scratch. ``create=True`` creates it with the agent's defaults.

        ``stop`` is asked before every decision; ``True`` ends the run there, as a
        spent ``max_steps`` does (a worker shutting down finishes the step it is in).

        A task pinned to another definition of the agent is refused
        (:class:`~skillstate.errors.DefinitionChanged`, nothing written) unless the agent
        declares how to carry the change; ``accept_definition=True`` re-pins it first,
        whatever changed (:meth:`accept_definition`).
        """
        steps = self.loop(
            task_id,
            inputs=inputs,
            max_steps=max_steps,
            inputs_from=inputs_from,
            stop=stop,
            create=create,
            accept_definition=accept_definition,
        )
        with (
            using(self.tracer),
            self.tracer.span("skillstate.run", {"skillstate.task.id": task_id}) as span,
        ):
            result: RunResult[S] = drive(steps, self._step)
            span.set("skillstate.run.stopped", result.stopped)
            span.set("skillstate.run.steps", result.steps)
        again = {"inputs": inputs, "inputs_from": inputs_from, "max_steps": max_steps, "stop": stop}
        return run_inline(self, result, **again)  # a parent's children, then its join

    def loop(
        self,
        task_id: str,
        *,
        inputs: Sequence[str] = (),
        max_steps: int | None = None,
        inputs_from: int = 0,
        stop: Callable[[], bool] | None = None,
        create: bool = False,
        accept_definition: bool = False,
    ) -> Steps[RunResult[Any]]:
        """:meth:`run`'s arguments checked (before anything is written), and its loop
        (:meth:`steps`) ready to be driven."""
        budget = max_steps if max_steps is not None else self.max_steps
        if inputs_from < 0:
            raise UsageError("inputs_from must be >= 0")
        queue = list(inputs)
        for text in queue:  # all of them, before anything is written
            self._check_reply(text)
        return self.steps(
            task_id, queue, inputs_from, budget, stop, create=create, accept=accept_definition
        )

    def steps(
        self,
        task_id: str,
        queue: Sequence[str],
        inputs_from: int,
        budget: int,
        stop: Callable[[], bool] | None = None,
        *,
        create: bool = False,
        accept: bool = False,
    ) -> Steps[RunResult[Any]]:
        """The run loop of :meth:`run` as a generator: it yields each state a decision is
        to be taken in, is sent the step's report, and returns the :class:`RunResult`.

        Everything between two decisions (leases, loads, settling effects, replies,
        budgets) happens inside it; how the step itself is taken is the driver's: this
        class steps synchronously (:func:`drive`), :class:`~skillstate.engine.aruntime.AsyncRuntime`
        awaits the model. One loop, two drivers.
        """
        with self._holding(task_id):
            try:
                self.store.load(task_id)
                resumed = True
            except TaskNotFound:
                if not create:
                    hint = f"start it first (runtime.start({task_id!r}, ...)), or pass create=True"
                    raise TaskNotFound(task_id, self.store.url, hint=hint) from None
                self.start(task_id)
                resumed = False
            if resumed:
                if accept:
                    self.accept_definition(task_id)
                self.recheck(task_id)  # the head, checked against its pinned definition
                if queue:
                    state = self.load(task_id)
                    redactor = self._committer.redactor(state)
                    check_numbering(self.store, state, queue, inputs_from, redactor)
            holder = self._holders.get(task_id)
            replies = (list(queue), inputs_from)
            result = yield from self._loop(task_id, replies, budget, holder, stop)
            return replace(result, unused_inputs=unused(queue, inputs_from, result.state))

    def step(self, task_id: str, *, accept_definition: bool = False) -> StepReport[S]:
        """Take exactly one decision on a running task and commit it.

        Unfinished work comes first: a queued compensation, an effect in flight, or a
        message or cancel in the task's inbox (:mod:`skillstate.control.inbox`); that
        commit is then the step. ``accept_definition`` as in :meth:`run`.
        """
        with using(self.tracer):
            steps = self.one_step(task_id, accept_definition=accept_definition)
            report: StepReport[S] = drive(steps, self._step)
            return report

    def one_step(self, task_id: str, *, accept_definition: bool = False) -> Steps[StepReport[Any]]:
        """:meth:`step` as a generator: it yields the state if a decision is to be taken
        (and is sent its report); unfinished work is done inside it."""
        with self._holding(task_id):
            if accept_definition:
                self.accept_definition(task_id)
            state = self._committer.head(task_id)
            if state.compensations:
                return self._settling.compensate(state)
            if state.pending_effect is not None:
                return self._settling.settle_effect(state, resumed=True)
            taken = self._inbox.boundary(state)  # a message or cancel comes before a decision
            if taken is not None:
                return taken
            state = self._committer.memory.refresh(state)  # what other tasks remembered
            state = self._committer.shared.refresh(state)  # shared records that moved
            report: StepReport[Any] = yield state
            return report

    # ------------------------------------------------------------------ the loop

    def _loop(
        self,
        task_id: str,
        replies: tuple[list[str], int],
        budget: int,
        holder: Holder | None,
        stop: Callable[[], bool] | None = None,
    ) -> Steps[RunResult[Any]]:
        steps = invalid = 0
        fresh = True  # a run reads its first head from the store
        while True:
            # Under the lease, the head this runtime last wrote is the stored one: it is
            # trusted, not read and validated again. A writer without the lease (a
            # person's command) that moved it anyway makes a commit below stale: the
            # head is then read afresh and the step decided again (nothing was written).
            trusted, fresh = not fresh, holder is None
            state = self._reload(task_id, holder, trust=trusted)
            try:
                outcome = yield from self._iteration(
                    state, steps=steps, budget=budget, replies=replies, stop=stop
                )
            except StaleState:
                if not trusted:
                    raise
                fresh = True
                continue
            if isinstance(outcome, RunResult):
                return outcome
            if outcome is None:
                continue
            report = outcome
            steps += 1
            if report.stalled:
                return RunResult(report.after, "stalled", steps)
            invalid = invalid + 1 if report.event.action.get("kind") == "invalid" else 0
            if self.max_invalid is not None and invalid >= self.max_invalid:
                reason = f"{invalid} invalid decisions in a row (max_invalid {self.max_invalid})"
                return RunResult(self._stop_for_budget(report.after, reason), "budget", steps)

    def _iteration(
        self,
        state: AgentState,
        *,
        steps: int,
        budget: int,
        replies: tuple[list[str], int],
        stop: Callable[[], bool] | None,
    ) -> Generator[AgentState, StepReport[Any], RunResult[Any] | StepReport[Any] | None]:
        """One turn of the run loop from the head ``state``: the run's result when it
        ends here, the report of the decision taken, or ``None`` when something other
        than a decision was committed (the loop goes round again)."""
        queue, first = replies
        if state.compensations:
            self._settling.compensate(state)
            return None
        if state.pending_effect is not None:
            # A crash (or a kill) came between recording an effect and its outcome,
            # or a person approved the call (it runs now, from its intent).
            resumed = not self._approvals.approved_last(state)
            settled = self._settling.settle_effect(state, resumed=resumed)
            if settled.stalled:
                return RunResult(settled.after, "stalled", steps)
            return None
        if self._inbox.boundary(state) is not None:  # messages and cancels: control.inbox
            return None
        stopped = stopped_by_status(state)
        if stopped is not None:
            return RunResult(state, stopped, steps)
        parked = PARKED.get(state.status)
        if parked is not None:
            if not self._moved_on(state, queue, first):
                return RunResult(state, parked, steps)
            return None
        if steps >= budget or (stop is not None and stop()):
            return RunResult(state, "max_steps", steps)
        state = warn_budget(self, state)  # a budget came near: recorded once (a commit)
        spent = self._over_budget(state)
        if spent is not None:
            return RunResult(self._stop_for_budget(state, spent), "budget", steps)
        state = self._committer.memory.refresh(state)  # what other tasks remembered
        state = self._committer.shared.refresh(state)  # shared records that moved
        report: StepReport[Any] = yield state  # decide from this head: no read per step
        return report

    def _reload(self, task_id: str, holder: Holder | None, *, trust: bool) -> AgentState:
        """The head, after renewing the lease (a long run keeps it alive); the one this
        runtime last wrote when ``trust`` (see :meth:`Committer.head`)."""
        if holder is not None:
            holder.renew()
        return self._committer.head(task_id, trust=trust)  # checked against its pin

    def _moved_on(self, state: AgentState, queue: list[str], first: int) -> bool:
        """Whether a parked task was moved on (one commit): a reply at hand for one
        waiting for the user; its signal, or its deadline, for one waiting on the world
        (:mod:`skillstate.control.waits`)."""
        if state.status is TaskStatus.WAITING_USER:
            return self._answer(state, queue, first)
        if state.status is TaskStatus.WAITING_CHILDREN:  # skillstate.fanout
            return self._children.settle(state)
        return self._waits.settle(state)

    def _answer(self, state: AgentState, queue: list[str], first: int) -> bool:
        """Reply to a waiting task if a reply is at hand: the run's own ``inputs`` (reply
        number ``first + i`` is ``queue[i]``), else the card's first reply given ahead."""
        position = state.inputs_received - first
        if 0 <= position < len(queue):
            self.reply(state.task_id, queue[position])
        elif state.replies_ahead:
            self._reply(state.task_id, state.replies_ahead[0], ahead=True)
        else:
            return False
        return True

    def _over_budget(self, state: AgentState) -> str | None:
        return budget_stop(self, state)  # the runtime's --max-* and the agent's Budget

    def _stop_for_budget(self, state: AgentState, reason: str) -> AgentState:
        """Record why the task stopped (once); it stays running and resumable."""
        message = f"{reason}; resume with a higher limit to continue"
        if (
            state.errors
            and state.errors[-1].kind == "budget"
            and state.errors[-1].message == message
        ):
            return state
        draft = Draft(
            after=state.with_error(ErrorEntry(kind="budget", message=message)), error=message
        )
        action = {"kind": "budget", "reason": reason}
        return self._committer.commit(state, draft, action, "runtime")[0]

    # ------------------------------------------------------------------ one step

    def _step(self, state: AgentState) -> StepReport[Any]:
        attributes = {"skillstate.task.id": state.task_id, "skillstate.version": state.version}
        with self.tracer.span("skillstate.step", attributes) as span:
            report = self._phases(state)
            if self.tracer.enabled:
                traced_step(span, report.event)
            return report

    def _phases(self, state: AgentState) -> StepReport[Any]:
        return self._steps.take(state)

    def begin(self, state: AgentState) -> Begun:
        """The start of a step of ``state``: its view, id and start time (no I/O, unless
        the agent has a skill retriever: it may read the store and call an endpoint)."""
        return self._steps.begin(state)

    def conclude(
        self, state: AgentState, begun: Begun, decided: Action | Decided | DecisionFailed
    ) -> StepReport[Any]:
        """The rest of a step once the policy decided (or failed to): act, settle, commit."""
        return self._steps.conclude(state, begun, decided)
