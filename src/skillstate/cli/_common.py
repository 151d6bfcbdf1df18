"""Helpers the command groups share: who decides, opening stores and agents, driving a task."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from skillstate.cli._app import (
    EXIT_BUDGET,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STALLED,
)

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.guard import OnStall
    from skillstate.engine.results import StepReport
    from skillstate.engine.runtime import RunResult, Runtime
    from skillstate.llm.base import Prices
    from skillstate.store.base import Store


@dataclass(frozen=True)
class _Decisions:
    """Who decides, and within which budgets (the model options of run/demo/resume/reply)."""

    model: str | None = None
    base_url: str | None = None
    policy: str = "state"
    max_repairs: int = 2
    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    price_in: float | None = None
    price_out: float | None = None
    max_stalled: int = 10
    on_stall: str = "fail"

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """``agent`` with its policy replaced by the model policy asked for, if any."""
        from skillstate.errors import UsageError

        if self.model is None:
            if self.policy != "state":
                raise UsageError("--policy chooses what a model sees: it needs --model")
            if self.base_url is not None:
                raise UsageError("--base-url needs --model openai:NAME")
            return agent
        from dataclasses import replace

        from skillstate.engine.policy import policy_for
        from skillstate.llm import open_provider

        kind, _, path = self.model.partition(":")
        if kind in {"replay", "local"} and path and not os.path.isfile(path):
            raise UsageError(f"--model {self.model}: no such file {path!r}")
        provider = open_provider(self.model, base_url=self.base_url)
        return replace(
            agent, policy=policy_for(self.policy, provider, max_repairs=self.max_repairs)
        )

    def driver(self) -> dict[str, object] | None:
        """What to record in a new task's card: which model decides it (for display only)."""
        if self.model is None:
            return None
        base_url = self.base_url
        if base_url and "@" in base_url.split("//", 1)[-1].split("/", 1)[0]:
            base_url = None  # credentials in the URL never go into the store
        return {
            "model": self.model,
            "policy": self.policy,
            "max_repairs": self.max_repairs,
            "base_url": base_url,
        }

    def configured(self) -> _Decisions:
        """These options, with the operator's configured model where none was given."""
        from dataclasses import replace

        from skillstate.config import load_config

        if self.model is not None:
            return self
        config = load_config()
        if config.model is None:
            return self
        return replace(self, model=config.model, base_url=self.base_url or config.base_url)

    def continuing(self, task_id: str, recorded: object) -> _Decisions:
        """The model options for a task that already exists.

        The card's ``driver`` says which model decided the task so far; it is for
        display only. The model, its server and its key come from the operator
        (these options, the environment, the project file), never from the store:
        a base URL written into the card must not receive the operator's API key.
        """
        from dataclasses import replace

        from skillstate.errors import UsageError

        decisions = self.configured()
        if not isinstance(recorded, dict) or not recorded.get("model"):
            return decisions
        if decisions.model is None:
            model = str(recorded["model"])
            raise UsageError(
                f"task {task_id!r} was decided by model {model!r} (recorded for display only: "
                "the model, its server and key come from the operator); pass --model "
                f"{model} (and --base-url if it needs one), or set SKILLSTATE_MODEL"
            )
        if decisions.policy == "state" and recorded.get("policy"):
            decisions = replace(decisions, policy=str(recorded["policy"]))
        return decisions

    def stall_mode(self) -> OnStall:
        from skillstate.errors import UsageError

        if self.on_stall == "fail":
            return "fail"
        if self.on_stall == "park":
            return "park"
        raise UsageError(f"--on-stall must be fail or park, not {self.on_stall!r}")

    def prices(self) -> Prices | None:
        from skillstate.errors import UsageError
        from skillstate.llm.base import Prices

        if self.price_in is None and self.price_out is None:
            if self.max_cost is not None:
                raise UsageError("--max-cost needs prices: give --price-in and --price-out")
            return None
        return Prices(input=self.price_in or 0.0, output=self.price_out or 0.0)


# ---------------------------------------------------------------- helpers


def _store(url: str | None, *, create: bool = True) -> Store:
    """The store ``--store`` (or the configuration) names.

    ``create=False`` is for commands that only read: a store that does not exist
    yet is a one-line ``StoreNotFound`` (exit 2) and nothing is created.
    """
    from skillstate.cli._app import SESSION
    from skillstate.config import load_config
    from skillstate.store import open_store

    store = open_store(url or load_config().store, create=create)
    SESSION.store_url = store.url  # "no task" errors name it
    return store


def _agent_for(store: Store, task_id: str, explicit: str | None = None) -> Agent[Any]:
    """The agent of a task: ``--agent`` if given, else its stored reference if allowed.

    The stored reference is data: it is checked against the operator's allow-list
    before anything is imported (see :mod:`skillstate.config`).
    """
    from skillstate.config import allowed_agents, load_config
    from skillstate.engine.agent import load_agent
    from skillstate.errors import AgentImportError, AgentNotAllowed
    from skillstate.fanout.spec import CHILD_REF

    if explicit is not None:
        return load_agent(explicit, search_cwd=True)
    ref = store.load(task_id, verify=False).state.get("agent")
    if not ref or not isinstance(ref, str):
        raise AgentImportError(
            f"task {task_id!r} does not record which agent drives it; pass --agent MODULE:ATTR"
        )
    # A child kind with no reference of its own is imported through its parent's
    # (``parent#children.kind``, skillstate.fanout): the parent's is what is allowed.
    if ref.partition(CHILD_REF)[0] not in allowed_agents(load_config()):
        raise AgentNotAllowed(
            f"task {task_id!r} names agent {ref!r}, which is not an allowed agent; pass "
            "--agent MODULE:ATTR, or allow it in [tool.skillstate] agents (pyproject.toml or "
            ".skillstate.toml) or SKILLSTATE_AGENTS"
        )
    return load_agent(ref, search_cwd=True)


def _drive(
    agent: Agent[Any],
    store: Store,
    task_id: str,
    *,
    inputs: list[str],
    max_steps: int,
    verbose: bool,
    compare: bool = False,
    reply: str | None = None,
    reply_into: str | None = None,
    fields: dict[str, object] | None = None,
    decisions: _Decisions | None = None,
    prelude: Callable[[Runtime[Any]], object] | None = None,
    accept_definition: bool = False,
) -> NoReturn:
    """Run ``task_id`` here to its next stop and exit with its code. ``prelude`` is a
    person's write committed with the same runtime first (``approve``, ``reject``),
    once the model options are known to be usable."""
    from skillstate._render import StepPrinter, console, print_comparison
    from skillstate.cli._app import driving

    driving(task_id)  # Ctrl-C from here on names the task in its resume hint
    decisions = decisions or _Decisions()
    if fields is None:
        decisions = decisions.continuing(task_id, store.load(task_id).state.get("driver"))
    else:
        decisions = decisions.configured()
        driver = decisions.driver()
        if driver is not None:
            fields = {**fields, "driver": driver}
    runtime = _runtime(
        agent,
        store,
        decisions,
        max_steps=max_steps,
        observer=StepPrinter(verbose=verbose, store=store),
    )
    ahead: tuple[str, ...] = ()
    if fields is not None:
        if inputs:
            # A new task keeps its --input replies on its card (``replies_ahead``), as
            # ``submit --input`` does: a kill -9 then ``resume`` loses none of them.
            fields = {**fields, **_queued_inputs(agent, inputs, fields)}
            ahead, inputs = tuple(inputs), []
        runtime.start(task_id, **fields)
    if reply is not None:
        runtime.reply(task_id, reply, into=reply_into)
    if prelude is not None:
        prelude(runtime)
    # --input values are the replies after the ones the task already has.
    first = runtime.load(task_id).inputs_received if inputs else 0
    result = runtime.run(
        task_id, inputs=inputs, inputs_from=first, accept_definition=accept_definition
    )
    given = len(ahead) + len(inputs)
    unused = len(result.unused_inputs) + min(len(ahead), len(result.state.replies_ahead))
    if unused > 0:
        console.print(
            f"[yellow]{unused} of {given} --input value(s) not used[/]: the task did "
            "not ask for them"
        )
    if compare:
        from skillstate.engine.transcript import compare_prompts
        from skillstate.llm.tokens import tokenizer_name

        print_comparison(compare_prompts(store, task_id, agent), tokenizer_name())
    console.print(_summary(result, store))
    raise typer.Exit(_exit_code(result))


def _runtime(
    agent: Agent[Any],
    store: Store,
    decisions: _Decisions,
    *,
    max_steps: int,
    observer: Callable[[StepReport[Any]], None] | None = None,
) -> Runtime[Any]:
    """The runtime that continues a task with ``decisions`` (``run``, ``reply``, the UI)."""
    from skillstate.engine.lease import default_worker
    from skillstate.engine.runtime import Runtime
    from skillstate.integrations.otel import tracer_from_env

    return Runtime(
        decisions.agent(agent),
        store,
        max_steps=max_steps,
        observer=observer,
        worker=default_worker(),
        max_calls=decisions.max_calls,
        max_tokens=decisions.max_tokens,
        max_cost=decisions.max_cost,
        prices=decisions.prices(),
        max_stalled=decisions.max_stalled or None,
        on_stall=decisions.stall_mode(),
        tracer=tracer_from_env(),  # OpenTelemetry when OTEL_EXPORTER_OTLP_ENDPOINT is set
    )


def _after_a_stall(state: Any, store: Store | None) -> str:
    """What a person can do about a task the stall guard failed: the commands, with the
    last version before the stall when the event log says which it is."""
    from rich.markup import escape

    task = escape(state.task_id)
    before = _before_stall(state, store) if store is not None else None
    to = f"--to {before}" if before is not None else "--to VERSION"
    where = " (the last version before the stall)" if before is not None else ""
    return (
        f"the task failed. To go on: roll it back, skillstate rollback {task} {to}{where}, "
        f"or fix what blocks it and set it running again, skillstate edit {task}; then "
        f"skillstate resume {task}. What it tried: skillstate log {task}"
    )


def _before_stall(state: Any, store: Store) -> int | None:
    """The version before the stalled run of decisions (``no_progress`` of them)."""
    count = int(getattr(state, "no_progress", 0) or 0)
    if count < 1:
        return None
    try:
        events = store.events(state.task_id, since=max(0, state.version - 4 * count - 4))
    except Exception:  # a hint is not worth failing the command for
        return None
    decisions = [e for e in events if e.actor == "policy"]
    if len(decisions) < count:
        return None
    first = decisions[-count].version
    return first - 1 if first > 1 else None


def _summary(result: RunResult[Any], store: Store | None = None) -> str:
    from rich.markup import escape

    state = result.state
    task = escape(state.task_id)
    if result.stopped == "waiting_user":
        return (
            f"[yellow]waiting for the user[/] · task {task}\n"
            f"question: {escape(state.question or '')}\n"
            f'answer with: skillstate reply {task} "..."'
        )
    if result.stopped == "waiting_approval" and state.pending_approval is not None:
        from skillstate.state.protect import masked_params

        call = state.pending_approval
        params = escape(json.dumps(masked_params(call.params), ensure_ascii=False))
        tool = ""
        edit = "PARAM=VALUE"
        if call.tool is not None:  # one tool call of the skill waits, not the whole call
            args = escape(json.dumps(masked_params(call.tool.args), ensure_ascii=False))
            tool = f"\ntool call: {escape(call.tool.tool)} {args}"
            edit = "ARG=VALUE"
        return (
            f"[yellow]waiting for approval[/] · task {task}\n"
            f"call: {escape(call.skill)} {params}"
            + (f" ({escape(call.reason)})" if call.reason else "")
            + tool
            + f"\napprove with: skillstate approve {task} [--edit {edit}] [--reason ...]"
            f'; or: skillstate reject {task} --reason "..."'
        )
    if result.stopped == "waiting" and state.wait is not None:
        from skillstate.control.waits import waiting_summary

        return waiting_summary(state.task_id, state.wait)
    if result.stopped == "waiting_children":
        left = sum(r.status == "pending" for r in state.children)
        return (
            f"[yellow]waiting for {left} child task(s)[/] · task {task}\n"
            f"workers run them, or: skillstate resume {task} (see skillstate tasks --tree)"
        )
    if result.stopped == "cancelled":
        from skillstate.control.inbox import cancelled_line

        return cancelled_line(state, store)
    if result.stopped == "max_steps":
        return (
            f"[yellow]stopped after {result.steps} steps (--max-steps)[/] · task {task}; "
            f"continue with: skillstate resume {task}"
        )
    stalled = bool(state.errors) and state.errors[-1].kind == "stalled"
    if result.stopped == "stalled" or (result.stopped == "failed" and stalled):
        parked = state.status.value == "waiting_user"
        if parked:
            then = f'reply with: skillstate reply {task} "..."; see skillstate log {task}'
        else:
            then = _after_a_stall(state, store)
        return f"[red]stalled[/] · task {task}: {escape(state.errors[-1].message)}\n{then}"
    if result.stopped == "budget":
        return (
            f"[yellow]stopped: {escape(state.errors[-1].message)}[/] · task {task}; "
            f"continue with: skillstate resume {task} and a higher limit"
        )
    style = "green" if result.stopped == "completed" else "red"
    failed = result.stopped == "failed" and state.errors
    reason = f" · {escape(state.errors[-1].message)}" if failed else ""
    return f"[{style}]{result.stopped}[/] · task {task} · version {state.version}{reason}"


def _exit_code(result: RunResult[Any]) -> int:
    return {
        "completed": EXIT_OK,
        "waiting_user": EXIT_OK,
        "waiting_approval": EXIT_OK,
        "waiting": EXIT_OK,
        "waiting_children": EXIT_OK,
        "failed": EXIT_FAILED,
        "cancelled": EXIT_OK,
        "max_steps": EXIT_BUDGET,
        "budget": EXIT_BUDGET,
        "stalled": EXIT_STALLED,
    }[result.stopped]


def _exists(store: Store, task_id: str) -> bool:
    from skillstate.errors import TaskNotFound

    try:
        store.load(task_id)
    except TaskNotFound:
        return False
    return True


def _new_task_id(agent: Agent[Any], task_id: str | None) -> str:
    from skillstate.errors import UsageError
    from skillstate.store.base import RESERVED, is_reserved

    if task_id is None:
        return f"{agent.name}-{uuid.uuid4().hex[:8]}"
    if not task_id.strip() or any(c.isspace() or not c.isprintable() for c in task_id):
        raise UsageError(f"invalid --task-id {task_id!r}: use printable characters, no spaces")
    if is_reserved(task_id):
        raise UsageError(f"task ids starting with {RESERVED!r} are skillstate's own records")
    return task_id


def _start(
    ref: str,
    *,
    task_id: str | None,
    store_url: str | None,
    inputs: list[str],
    max_steps: int,
    verbose: bool,
    compare: bool,
    fields: dict[str, object] | None = None,
    decisions: _Decisions | None = None,
) -> NoReturn:
    from skillstate.engine.agent import load_agent
    from skillstate.errors import UsageError

    agent = load_agent(ref, search_cwd=True)
    store = _store(store_url)
    task = _new_task_id(agent, task_id)
    if _exists(store, task):
        raise UsageError(
            f"task {task!r} already exists; continue it with: skillstate resume {task}"
        )
    _drive(
        agent,
        store,
        task,
        inputs=inputs,
        max_steps=max_steps,
        verbose=verbose,
        compare=compare,
        fields=fields or {},  # a new task: created with these fields (and the driver)
        decisions=decisions,
    )


# ---------------------------------------------------------------- commands


def _queued_inputs(agent: Any, texts: list[str], fields: dict[str, object]) -> dict[str, object]:
    """The card field that gives ``texts`` to the task's questions, checked as replies."""
    from skillstate.errors import UsageError
    from skillstate.limits import problem

    if {"inputs", "inputs_received", "replies_ahead"} & fields.keys():
        raise UsageError("give the replies with --input, not --set")
    limits = agent.limits
    for text in texts:
        found = problem(text, chars=limits.reply_chars, depth=limits.depth)
        if found is not None:
            raise UsageError(f"--input refused: {found}; nothing was written")
    return {"replies_ahead": tuple(texts)}


def _card_fields(items: list[str]) -> dict[str, object]:
    """``--set FIELD=VALUE`` of a new task (``run``, ``submit``): top-level fields only,
    each value checked as a person's edit is (no control characters, bounded)."""
    from skillstate.engine.edits import check_edit
    from skillstate.errors import UsageError

    fields = _parse_assignments(items)
    if any("." in name for name in fields):
        raise UsageError("--set takes top-level fields of the card (FIELD=VALUE)")
    for name, value in fields.items():
        check_edit(name, value)
    return fields


def _parse_assignments(items: list[str]) -> dict[str, object]:
    from skillstate._yaml import load_yaml
    from skillstate.errors import UsageError

    writes: dict[str, object] = {}
    for item in items:
        path, sep, text = item.partition("=")
        if not sep or not path.strip():
            raise UsageError(f"expected PATH=VALUE, got {item!r}")
        what = f"value of {path.strip()!r}"
        writes[path.strip()] = load_yaml(text, what=what) if text.strip() else ""
    return writes
