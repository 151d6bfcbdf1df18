"""The ``skillstate`` command.

Exit codes: 0 completed (or paused waiting for the user), 1 the task failed,
2 bad input, 3 conflict (another writer committed first, or another worker holds
the task), 4 stopped by --max-steps or a budget (resumable), 5 the stored state is
corrupted or newer than this code (nothing was written).

Only typer is imported at start-up; the runtime, stores and rich tables load in
the commands that use them, so ``skillstate --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.runtime import RunResult
    from skillstate.llm.base import Prices
    from skillstate.store.base import Store

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CONFLICT, EXIT_BUDGET, EXIT_CORRUPTED = 0, 1, 2, 3, 4, 5
DEMOS = ("ticket", "orders", "ledger")

app = typer.Typer(
    name="skillstate",
    help="Run and inspect agents driven by an explicit, persisted state.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL (sqlite:///path.db, file://DIR, postgresql://..., redis://..., "
        "memory://). "
        "Default: $SKILLSTATE_STORE or sqlite:///.skillstate/state.db",
        show_default=False,
    ),
]
TaskArg = Annotated[str, typer.Argument(help="Task id.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
InputOpt = Annotated[
    list[str] | None,
    typer.Option("--input", "-i", help="A user reply, used when the task asks (repeatable)."),
]
MaxStepsOpt = Annotated[
    int, typer.Option("--max-steps", min=1, help="Decisions to take before stopping.")
]
TaskIdOpt = Annotated[str | None, typer.Option("--task-id", help="Task id (default: generated).")]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="One line per step, without views and diffs.")
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Let a model decide: openai:NAME, local, local:PATH.gguf, replay:CASSETTE.json "
        "(default: the agent's own scripted policy).",
        show_default=False,
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option("--base-url", help="OpenAI-compatible server (vLLM, Ollama, llama.cpp, ...)."),
]
PolicyOpt = Annotated[
    str,
    typer.Option("--policy", help="What the model sees: state, history or window:N."),
]
RepairsOpt = Annotated[
    int, typer.Option("--max-repairs", min=0, help="Invalid replies sent back per decision.")
]
CallsOpt = Annotated[
    int | None, typer.Option("--max-calls", min=1, help="Budget: model calls per task.")
]
TokensOpt = Annotated[
    int | None, typer.Option("--max-tokens", min=1, help="Budget: prompt tokens per task.")
]
CostOpt = Annotated[
    float | None, typer.Option("--max-cost", min=0.0, help="Budget: cost per task.")
]
PriceInOpt = Annotated[
    float | None, typer.Option("--price-in", min=0.0, help="Price per million prompt tokens.")
]
PriceOutOpt = Annotated[
    float | None,
    typer.Option("--price-out", min=0.0, help="Price per million completion tokens."),
]


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

    def agent(self, agent: Agent) -> Agent:
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
        """What to record in a new task's card so later commands use the same model."""
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

    def continuing(self, recorded: object) -> _Decisions:
        """These options, or (without --model) the model the task was started with."""
        if self.model is not None or not isinstance(recorded, dict):
            return self
        from dataclasses import replace

        return replace(
            self,
            model=str(recorded["model"]),
            policy=str(recorded.get("policy") or "state"),
            max_repairs=int(recorded.get("max_repairs") or 0),
            base_url=self.base_url or recorded.get("base_url"),
        )

    def prices(self) -> Prices | None:
        from skillstate.errors import UsageError
        from skillstate.llm.base import Prices

        if self.price_in is None and self.price_out is None:
            if self.max_cost is not None:
                raise UsageError("--max-cost needs prices: give --price-in and --price-out")
            return None
        return Prices(input=self.price_in or 0.0, output=self.price_out or 0.0)


# ---------------------------------------------------------------- helpers


def _store(url: str | None) -> Store:
    from skillstate.store import open_store

    return open_store(url)


def _agent_for(store: Store, task_id: str) -> Agent:
    from skillstate.engine.agent import load_agent
    from skillstate.errors import AgentImportError

    ref = store.load(task_id).state.get("agent")
    if not ref:
        raise AgentImportError(f"task {task_id!r} does not record which agent drives it")
    return load_agent(str(ref))


def _drive(
    agent: Agent,
    store: Store,
    task_id: str,
    *,
    inputs: list[str],
    max_steps: int,
    verbose: bool,
    compare: bool = False,
    reply: str | None = None,
    fields: dict[str, object] | None = None,
    decisions: _Decisions | None = None,
) -> NoReturn:
    from skillstate._render import StepPrinter, console, print_comparison
    from skillstate.engine.lease import default_worker
    from skillstate.engine.runtime import Runtime

    decisions = decisions or _Decisions()
    if fields is None:
        decisions = decisions.continuing(store.load(task_id).state.get("driver"))
    else:
        driver = decisions.driver()
        if driver is not None:
            fields = {**fields, "driver": driver}
    runtime = Runtime(
        decisions.agent(agent),
        store,
        max_steps=max_steps,
        observer=StepPrinter(verbose=verbose),
        worker=default_worker(),
        max_calls=decisions.max_calls,
        max_tokens=decisions.max_tokens,
        max_cost=decisions.max_cost,
        prices=decisions.prices(),
    )
    if fields is not None:
        runtime.start(task_id, **fields)
    if reply is not None:
        runtime.reply(task_id, reply)
    result = runtime.run(task_id, inputs=inputs)
    if compare:
        from skillstate.engine.transcript import compare_prompts
        from skillstate.llm.tokens import tokenizer_name

        print_comparison(compare_prompts(store, task_id, agent), tokenizer_name())
    console.print(_summary(result))
    raise typer.Exit(_exit_code(result))


def _summary(result: RunResult) -> str:
    from rich.markup import escape

    state = result.state
    task = escape(state.task_id)
    if result.stopped == "waiting_user":
        return (
            f"[yellow]waiting for the user[/] · task {task}\n"
            f"question: {escape(state.question or '')}\n"
            f'answer with: skillstate reply {task} "..."'
        )
    if result.stopped == "max_steps":
        return (
            f"[yellow]stopped after {result.steps} steps (--max-steps)[/] · task {task}; "
            f"continue with: skillstate resume {task}"
        )
    if result.stopped == "budget":
        return (
            f"[yellow]stopped: {escape(state.errors[-1].message)}[/] · task {task}; "
            f"continue with: skillstate resume {task} and a higher limit"
        )
    style = "green" if result.stopped == "completed" else "red"
    failed = result.stopped == "failed" and state.errors
    reason = f" · {escape(state.errors[-1].message)}" if failed else ""
    return f"[{style}]{result.stopped}[/] · task {task} · version {state.version}{reason}"


def _exit_code(result: RunResult) -> int:
    return {
        "completed": EXIT_OK,
        "waiting_user": EXIT_OK,
        "failed": EXIT_FAILED,
        "max_steps": EXIT_BUDGET,
        "budget": EXIT_BUDGET,
    }[result.stopped]


def _exists(store: Store, task_id: str) -> bool:
    from skillstate.errors import TaskNotFound

    try:
        store.load(task_id)
    except TaskNotFound:
        return False
    return True


def _new_task_id(agent: Agent, task_id: str | None) -> str:
    from skillstate.errors import UsageError

    if task_id is None:
        return f"{agent.name}-{uuid.uuid4().hex[:8]}"
    if not task_id.strip() or any(c.isspace() or not c.isprintable() for c in task_id):
        raise UsageError(f"invalid --task-id {task_id!r}: use printable characters, no spaces")
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

    agent = load_agent(ref)
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


@app.command()
def run(
    agent: Annotated[str, typer.Argument(help="The agent, as MODULE:ATTR.", show_default=False)],
    task_id: TaskIdOpt = None,
    store: StoreOpt = None,
    input: InputOpt = None,
    max_steps: MaxStepsOpt = 50,
    quiet: QuietOpt = False,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    policy: PolicyOpt = "state",
    max_repairs: RepairsOpt = 2,
    max_calls: CallsOpt = None,
    max_tokens: TokensOpt = None,
    max_cost: CostOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
) -> None:
    """Start a new task with an agent and run it until it ends or asks the user."""
    _start(
        agent,
        task_id=task_id,
        store_url=store,
        inputs=input or [],
        max_steps=max_steps,
        verbose=not quiet,
        compare=False,
        decisions=_Decisions(
            model,
            base_url,
            policy,
            max_repairs,
            max_calls,
            max_tokens,
            max_cost,
            price_in,
            price_out,
        ),
    )


@app.command()
def demo(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(DEMOS)}.", show_default=False)],
    task_id: TaskIdOpt = None,
    store: StoreOpt = None,
    input: InputOpt = None,
    max_steps: MaxStepsOpt = 50,
    quiet: QuietOpt = False,
    sample: Annotated[
        bool, typer.Option(help="Use the demo's canned replies when no --input is given.")
    ] = True,
    steps: Annotated[
        int | None, typer.Option("--steps", min=0, help="ledger: entries to append (10).")
    ] = None,
    step_delay: Annotated[
        float | None,
        typer.Option("--step-delay", min=0.0, help="ledger: seconds each append takes (0)."),
    ] = None,
    ledger: Annotated[
        str | None,
        typer.Option("--ledger", help="ledger: the file to append to (.skillstate/ledger.txt)."),
    ] = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    policy: PolicyOpt = "state",
    max_repairs: RepairsOpt = 2,
    max_calls: CallsOpt = None,
    max_tokens: TokensOpt = None,
    max_cost: CostOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
) -> None:
    """Run a bundled example offline, printing views, decisions and diffs."""
    from skillstate.errors import UsageError

    if name not in DEMOS:
        raise UsageError(f"unknown demo {name!r}; choose one of: {', '.join(DEMOS)}")
    fields: dict[str, object] | None = None
    if name == "ledger":
        path = os.path.abspath(ledger or os.path.join(".skillstate", "ledger.txt"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fields = {"ledger": path, "target": 10 if steps is None else steps}
        fields["step_delay"] = step_delay or 0.0
    elif steps is not None or step_delay is not None or ledger is not None:
        raise UsageError("--steps, --step-delay and --ledger belong to the ledger demo")
    ref = f"skillstate.examples.{name}:agent"
    inputs = input or []
    if not inputs and sample:
        from skillstate.engine.agent import load_agent

        inputs = list(load_agent(ref).sample_inputs)
    _start(
        ref,
        task_id=task_id,
        store_url=store,
        inputs=inputs,
        max_steps=max_steps,
        verbose=not quiet,
        compare=name != "ledger",
        fields=fields,
        decisions=_Decisions(
            model,
            base_url,
            policy,
            max_repairs,
            max_calls,
            max_tokens,
            max_cost,
            price_in,
            price_out,
        ),
    )


@app.command()
def resume(
    task_id: TaskArg,
    store: StoreOpt = None,
    input: InputOpt = None,
    max_steps: MaxStepsOpt = 50,
    quiet: QuietOpt = False,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    policy: PolicyOpt = "state",
    max_repairs: RepairsOpt = 2,
    max_calls: CallsOpt = None,
    max_tokens: TokensOpt = None,
    max_cost: CostOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
) -> None:
    """Continue a task from its stored state (after a stop, a crash or a budget)."""
    db = _store(store)
    agent = _agent_for(db, task_id)
    _drive(
        agent,
        db,
        task_id,
        inputs=input or [],
        max_steps=max_steps,
        verbose=not quiet,
        decisions=_Decisions(
            model,
            base_url,
            policy,
            max_repairs,
            max_calls,
            max_tokens,
            max_cost,
            price_in,
            price_out,
        ),
    )


@app.command()
def reply(
    task_id: TaskArg,
    text: Annotated[str, typer.Argument(help="The answer to the task's question.")],
    store: StoreOpt = None,
    max_steps: MaxStepsOpt = 50,
    quiet: QuietOpt = False,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    policy: PolicyOpt = "state",
    max_repairs: RepairsOpt = 2,
    max_calls: CallsOpt = None,
    max_tokens: TokensOpt = None,
    max_cost: CostOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
) -> None:
    """Answer a task waiting for the user, then keep running it."""
    db = _store(store)
    agent = _agent_for(db, task_id)
    _drive(
        agent,
        db,
        task_id,
        inputs=[],
        max_steps=max_steps,
        verbose=not quiet,
        reply=text,
        decisions=_Decisions(
            model,
            base_url,
            policy,
            max_repairs,
            max_calls,
            max_tokens,
            max_cost,
            price_in,
            price_out,
        ),
    )


@app.command()
def show(task_id: TaskArg, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Print the state card of a task (--json: the whole state as one JSON object)."""
    db = _store(store)
    head = db.load(task_id)
    if as_json:
        typer.echo(json.dumps(head.state, ensure_ascii=False, indent=2))
        return
    from skillstate._render import print_state

    try:
        state = _agent_for(db, task_id).parse_state(head.state)
    except Exception:
        # Without its agent the card is still readable as the base class.
        from skillstate.state.model import AgentState

        fields = {k: v for k, v in head.state.items() if k in AgentState.model_fields}
        state = AgentState.model_validate(fields)
    print_state(state)


@app.command()
def log(task_id: TaskArg, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """One event per committed step: version, action or skill, verdict, JSON Patch diff."""
    events = _store(store).events(task_id)
    if as_json:
        rows = [e.model_dump(mode="json") | {"diff": e.patch} for e in events]
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    from skillstate._render import print_events

    print_events(events)


@app.command()
def view(task_id: TaskArg, store: StoreOpt = None) -> None:
    """The exact view the next decision would see, with its token count."""
    from skillstate._render import console

    db = _store(store)
    agent = _agent_for(db, task_id)
    rendered = agent.view(agent.parse_state(db.load(task_id).state))
    console.print(rendered.text, markup=False)
    console.print(f"[dim]{rendered.tokens} tokens ({rendered.tokenizer})[/]")


@app.command(name="replay")
def replay_(
    task_id: TaskArg,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    expect: Annotated[
        Path | None,
        typer.Option(
            "--expect",
            help="Expectations JSON (facts per decision, reference effects) written by "
            "`skillstate eval` beside each run: also name the first step that diverged.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """The timeline of a task: each step with the state before and after it, and the
    first step that went wrong (an error, a failed verify, or with --expect a result
    that diverged from the task's expected facts or effects)."""
    from skillstate.engine.replay import Expectations, timeline

    expected = Expectations.load(expect) if expect is not None else None
    steps, found = timeline(_store(store), task_id, expected)
    if as_json:
        rows = [step.as_json() for step in steps]
        payload = {
            "steps": rows,
            "first_bad_step": found.version if found else None,
            "first_bad": found.as_json() if found else None,
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    from skillstate._render import print_timeline

    print_timeline(steps, found)


@app.command()
def checkpoints(task_id: TaskArg, store: StoreOpt = None) -> None:
    """Every committed version of a task."""
    from skillstate._render import print_checkpoints

    db = _store(store)
    labels = {e.version: f"{e.actor}: {e.label}" for e in db.events(task_id)}
    print_checkpoints(db.checkpoints(task_id), labels)


@app.command()
def rollback(
    task_id: TaskArg,
    to: Annotated[int, typer.Option("--to", help="Version to restore.", show_default=False)],
    store: StoreOpt = None,
) -> None:
    """Restore an earlier version as a new commit (history is kept)."""
    from skillstate._render import console
    from skillstate.engine.edits import rollback_task

    new_version = rollback_task(_store(store), task_id, to)
    console.print(f"task {task_id} rolled back to version {to} as version {new_version}")


@app.command()
def prune(
    task_id: TaskArg,
    keep_last: Annotated[
        int, typer.Option("--keep-last", min=1, help="Keep the newest N versions.")
    ] = 10,
    keep_every: Annotated[
        int | None, typer.Option("--keep-every", min=1, help="Also keep every K-th version.")
    ] = None,
    store: StoreOpt = None,
) -> None:
    """Delete old checkpoints; the head and every chain a kept version needs stay."""
    from skillstate._render import console

    result = _store(store).prune(task_id, keep_last=keep_last, keep_every=keep_every)
    console.print(
        f"task {task_id}: kept {len(result.kept)} checkpoints, deleted {len(result.deleted)} "
        "(events are kept)"
    )


@app.command()
def doctor(task_id: TaskArg, store: StoreOpt = None) -> None:
    """Check a task's chain: every kept checkpoint loads and validates; deltas reach the head."""
    from skillstate._render import print_doctor
    from skillstate.engine.doctor import diagnose
    from skillstate.errors import AgentImportError, StateCorrupted

    db = _store(store)
    agent: Agent | None
    try:
        agent = _agent_for(db, task_id)
    except (AgentImportError, StateCorrupted):
        agent = None  # still check the chain; schema checks need the agent
    report = diagnose(db, task_id, agent)
    print_doctor(report)
    raise typer.Exit(EXIT_OK if report.healthy else EXIT_CORRUPTED)


@app.command(name="set")
def set_(
    task_id: TaskArg,
    assignments: Annotated[
        list[str], typer.Argument(help="PATH=VALUE pairs; VALUE is YAML (3, true, [a, b]).")
    ],
    store: StoreOpt = None,
) -> None:
    """Change fields of a task's state by hand (validated; logged as actor human)."""
    from skillstate._render import console
    from skillstate.engine.edits import set_fields

    writes = _parse_assignments(assignments)
    db = _store(store)
    state = set_fields(db, _agent_for(db, task_id), task_id, writes)
    console.print(f"task {task_id}: set {', '.join(writes)} as version {state.version}")


@app.command()
def edit(task_id: TaskArg, store: StoreOpt = None) -> None:
    """Edit a task's state as YAML in $EDITOR (validated; logged as actor human)."""
    from skillstate._render import console
    from skillstate.engine.edits import edit_in_editor

    db = _store(store)
    state = edit_in_editor(db, _agent_for(db, task_id), task_id)
    if state is None:
        console.print(f"task {task_id}: no changes")
    else:
        console.print(f"task {task_id}: edited as version {state.version}")


@app.command()
def fork(
    task_id: TaskArg,
    at: Annotated[int, typer.Option("--at", help="Version to start from.", show_default=False)],
    new_id: Annotated[
        str, typer.Option("--new-id", help="Id of the new task.", show_default=False)
    ],
    store: StoreOpt = None,
) -> None:
    """Start a new task from any kept checkpoint of another."""
    from skillstate._render import console
    from skillstate.engine.edits import fork_task

    db = _store(store)
    agent = _agent_for(db, task_id)
    _new_task_id(agent, new_id)
    fork_task(db, agent, task_id, at, new_id)
    console.print(
        f"task {new_id} starts from {task_id} version {at}; run it with: skillstate resume {new_id}"
    )


@app.command()
def tokens(
    task_id: TaskArg,
    store: StoreOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tokens (and cost, given prices) of every decision of a task, and the totals."""
    from skillstate._render import print_tokens
    from skillstate.llm.base import Prices

    events = [e for e in _store(store).events(task_id) if e.usage is not None]
    prices = None
    if price_in is not None or price_out is not None:
        prices = Prices(input=price_in or 0.0, output=price_out or 0.0)
    if as_json:
        rows = [
            {"version": e.version, **e.usage.model_dump(mode="json")} for e in events if e.usage
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    print_tokens(events, prices)


bench = typer.Typer(help="Benchmarks that ship with skillstate.", no_args_is_help=True)
app.add_typer(bench, name="bench")


@bench.command("tokens")
def bench_tokens(
    steps: Annotated[int, typer.Option("--steps", min=1, help="Records the task reviews.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Prompt tokens per decision: the state policy against the history baseline."""
    from skillstate.bench.tokens import compare

    report = compare(steps)
    if as_json:
        typer.echo(json.dumps(report.as_json()))
        return
    from skillstate._render import print_token_bench

    print_token_bench(report)


@app.command(name="eval")
def eval_(
    suite: Annotated[
        str,
        typer.Option(
            "--suite", help="Task suite: seeds, long, or a path to a suite directory/YAML file."
        ),
    ] = "long",
    variants: Annotated[
        str, typer.Option("--variants", help="Comma-separated: history,state,skills,skillstate.")
    ] = "history,state,skills,skillstate",
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Runs per task and variant.")] = 1,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="oracle (follows each task's reference plan), or a provider spec: "
            "openai:NAME, local, local:PATH.gguf.",
        ),
    ] = "oracle",
    base_url: BaseUrlOpt = None,
    out: Annotated[str, typer.Option("--out", help="Directory for report.md/json and plots.")] = (
        "eval-out"
    ),
    tasks: Annotated[
        int | None, typer.Option("--tasks", min=1, help="Only the first N tasks of the suite.")
    ] = None,
    groups: Annotated[
        str | None,
        typer.Option("--groups", help="Only tasks of these length groups: short,medium,long."),
    ] = None,
    context_window: Annotated[
        int | None,
        typer.Option("--context-window", min=256, help="The model's context, in tokens."),
    ] = None,
    max_repairs: RepairsOpt = 2,
    max_invalid: Annotated[
        int,
        typer.Option(
            "--max-invalid",
            min=1,
            help="Stop a task (a recorded failure) after this many decisions in a row that "
            "stayed invalid after their repairs.",
        ),
    ] = 3,
    recovery: Annotated[
        bool, typer.Option(help="Also interrupt each task at 25/50/75% and resume it.")
    ] = True,
) -> None:
    """Run a task suite under the four variants and write a report."""
    from skillstate.eval.cli import run_eval

    raise typer.Exit(
        run_eval(
            suite=suite,
            variants=variants,
            seeds=seeds,
            model=model,
            base_url=base_url,
            out=out,
            tasks=tasks,
            groups=groups,
            context_window=context_window,
            max_repairs=max_repairs,
            max_invalid=max_invalid,
            recovery=recovery,
            command="skillstate " + " ".join(sys.argv[1:]),
        )
    )


@app.command()
def keygen() -> None:
    """Print a new key for SKILLSTATE_KEY (encrypts Sensitive[...] fields)."""
    from skillstate.state.secrets import generate_key

    typer.echo(generate_key())


def _parse_assignments(items: list[str]) -> dict[str, object]:
    import yaml

    from skillstate.errors import UsageError

    writes: dict[str, object] = {}
    for item in items:
        path, sep, text = item.partition("=")
        if not sep or not path.strip():
            raise UsageError(f"expected PATH=VALUE, got {item!r}")
        try:
            writes[path.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0]
            raise UsageError(f"value of {path!r} is not valid YAML: {first}") from exc
    return writes


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: every failure becomes one line on stderr and an exit code."""
    sys.exit(_main(argv))


def _main(argv: list[str] | None) -> int:
    from skillstate.errors import (
        Conflict,
        SchemaTooNew,
        SkillstateError,
        StateCorrupted,
        UsageError,
    )

    try:
        result = app(args=argv, prog_name="skillstate", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        _error("aborted")
        return 130
    except typer.TyperException as exc:  # bad options and arguments (click's UsageError)
        _error(exc.format_message().replace("\n", " "))
        return EXIT_USAGE
    except Conflict as exc:
        _error(str(exc))
        return EXIT_CONFLICT
    except (StateCorrupted, SchemaTooNew) as exc:
        _error(f"{exc}; nothing was written")
        return EXIT_CORRUPTED
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except SkillstateError as exc:
        _error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted; the last committed step is kept (skillstate resume continues)")
        return 130
    except Exception as exc:
        # A bug (ours or in an agent's code): still one line, unless asked for the trace.
        if os.environ.get("SKILLSTATE_DEBUG"):
            raise
        _error(f"unexpected {type(exc).__name__}: {exc} (SKILLSTATE_DEBUG=1 shows the traceback)")
        return EXIT_FAILED
    return result if isinstance(result, int) else EXIT_OK


def _error(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
