"""Commands that change a task by hand: rollback, set, edit, fork, prune, keygen."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from skillstate.audit import acting_as
from skillstate.cli._app import ActorOpt, AgentOpt, ReasonOpt, StoreOpt, TaskArg, app
from skillstate.cli._common import _agent_for, _new_task_id, _parse_assignments, _store

if TYPE_CHECKING:
    from skillstate.engine.family import ChildrenChoice
    from skillstate.engine.rewind import EffectChoice
    from skillstate.store.base import Store

CompensateOpt = Annotated[
    bool,
    typer.Option(
        "--compensate",
        help="Undo the effects that reached the world after that version, newest first, with "
        "each skill's rollback hook (each recorded as an event).",
    ),
]
KeepEffectsOpt = Annotated[
    bool,
    typer.Option(
        "--keep-effects",
        help="Go back anyway and leave those effects in the world (a re-done step finds its "
        "effect by its key instead of repeating it).",
    ),
]
ChildrenOpt = Annotated[
    str,
    typer.Option(
        "--children",
        help="When going back before a spawn whose child tasks exist: refuse (the default), "
        "detach (the parent forgets them; they keep running or keep their results) or "
        "cascade (cancel the unfinished ones, then detach).",
    ),
]
ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Also change fields the runtime owns (status, step lists, errors, usage) and jump "
        "steps without a declared transition. Invariants and consistency still apply.",
    ),
]


def _effect_choice(compensate: bool, keep_effects: bool) -> EffectChoice:
    from skillstate.errors import UsageError

    if compensate and keep_effects:
        raise UsageError("choose one of --compensate and --keep-effects")
    return "compensate" if compensate else "keep" if keep_effects else "refuse"


@app.command()
def rollback(
    task_id: TaskArg,
    to: Annotated[int, typer.Option("--to", help="Version to restore.", show_default=False)],
    store: StoreOpt = None,
    agent_ref: AgentOpt = None,
    compensate: CompensateOpt = False,
    keep_effects: KeepEffectsOpt = False,
    children: ChildrenOpt = "refuse",
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Restore an earlier version as a new commit (history is kept).

    When effects reached the world after that version (a ledger line, a sent
    message), it is refused unless you choose --compensate or --keep-effects; when
    child tasks were spawned after it, unless you choose --children detach or cascade.
    """
    from skillstate._render import console
    from skillstate.engine.rewind import rollback_task
    from skillstate.engine.runtime import Runtime

    choice = _effect_choice(compensate, keep_effects)
    family = children_choice(children)
    with acting_as(actor, reason):
        db = _store(store)
        agent = _agent_for(db, task_id, agent_ref) if choice == "compensate" else None
        new_version = rollback_task(db, task_id, to, effects=choice, agent=agent, children=family)
    console.print(f"task {task_id} rolled back to version {to} as version {new_version}")
    _say_children(db, task_id, new_version)
    if agent is not None:
        undone = Runtime(agent, db).compensate(task_id)
        if undone:
            console.print(f"task {task_id}: {undone} effect(s) undone, newest first")


def children_choice(given: str) -> ChildrenChoice:
    """``--children`` checked: one of refuse, detach, cascade."""
    from skillstate.engine.family import CHILDREN_CHOICES
    from skillstate.errors import UsageError

    for choice in CHILDREN_CHOICES:
        if given == choice:
            return choice
    raise UsageError(f"unknown --children {given!r}; choose from: {', '.join(CHILDREN_CHOICES)}")


def _say_children(db: Store, task_id: str, version: int) -> None:
    """What a rollback or fork just did to child tasks, as its event records it."""
    from rich.markup import escape

    from skillstate._render import console
    from skillstate.cli.tree import family_lines

    events = db.events(task_id, since=version - 1)
    for line in family_lines(events[0].action) if events else []:
        console.print(f"task {escape(task_id)}: {escape(line)}")


# prune (per task and across tasks, by age) is in skillstate.cli.lifecycle.


@app.command(name="set")
def set_(
    task_id: TaskArg,
    assignments: Annotated[
        list[str], typer.Argument(help="PATH=VALUE pairs; VALUE is YAML (3, true, [a, b]).")
    ],
    store: StoreOpt = None,
    agent_ref: AgentOpt = None,
    force: ForceOpt = False,
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Change fields of a task's state by hand (validated; logged as actor human).

    Also the repair path of a corrupted head: the fix is applied to the stored
    document and committed if the result is valid.
    """
    from skillstate._render import console
    from skillstate.engine.edits import set_agent_reference, set_fields
    from skillstate.errors import AgentImportError

    writes = _parse_assignments(assignments)
    with acting_as(actor, reason):
        db = _store(store)
        try:
            agent = _agent_for(db, task_id, agent_ref)
        except AgentImportError:
            if set(writes) != {"agent"}:
                raise
            # The repair of a bad agent reference never imports it (or any other).
            version = set_agent_reference(db, task_id, writes["agent"])
            console.print(f"task {task_id}: set agent as version {version}")
            return
        state = set_fields(db, agent, task_id, writes, force=force)
    console.print(f"task {task_id}: set {', '.join(writes)} as version {state.version}")


@app.command()
def edit(
    task_id: TaskArg,
    store: StoreOpt = None,
    agent_ref: AgentOpt = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="Apply this YAML card instead of opening $EDITOR (e.g. a refused edit, which "
            "is kept in a file the error names).",
            show_default=False,
        ),
    ] = None,
    force: ForceOpt = False,
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Edit a task's state as YAML in $EDITOR (validated; logged as actor human)."""
    from skillstate._render import console
    from skillstate.engine.edits import apply_edit, edit_in_editor
    from skillstate.errors import UsageError

    with acting_as(actor, reason):
        db = _store(store)
        agent = _agent_for(db, task_id, agent_ref)
        if file is not None:
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeError) as exc:
                raise UsageError(f"cannot read --file {str(file)!r}: {exc}") from exc
            state = apply_edit(db, agent, task_id, text, force=force, keep=False)
        else:
            state = edit_in_editor(db, agent, task_id, force=force)
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
    agent_ref: AgentOpt = None,
    compensate: CompensateOpt = False,
    keep_effects: KeepEffectsOpt = False,
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Start a new task from any kept checkpoint of another.

    Refused when the source made effects after that version, unless --keep-effects.
    """
    from skillstate._render import console
    from skillstate.engine.rewind import fork_task

    with acting_as(actor, reason):
        db = _store(store)
        agent = _agent_for(db, task_id, agent_ref)
        _new_task_id(agent, new_id)
        effects = _effect_choice(compensate, keep_effects)
        fork_task(db, agent, task_id, at, new_id, effects=effects)
    console.print(
        f"task {new_id} starts from {task_id} version {at}; run it with: skillstate resume {new_id}"
    )
    _say_children(db, new_id, 1)


@app.command()
def unlock(
    task_id: TaskArg,
    store: StoreOpt = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Clear it even though its holder may be alive (another machine you know is "
            "gone); the holder's later commits are refused (fencing).",
        ),
    ] = False,
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Clear a task's stuck lease (recorded as a human event).

    Without --force only a lease whose holder is gone: expired, or a process of
    this host that has exited.
    """
    from skillstate._render import console
    from skillstate.audit import acting, record, resolve
    from skillstate.engine.edits import record_unlock
    from skillstate.engine.lease import is_dead_local_worker
    from skillstate.errors import Conflict, LeaseHeld, StateCorrupted
    from skillstate.events import utcnow

    identity = resolve(actor, reason)  # checked before anything is cleared
    db = _store(store)
    try:
        lease = db.lease(task_id)
    except StateCorrupted:
        if not force:
            raise
        lease = None  # damaged: force_release clears it whatever it holds
    if lease is not None and not force:
        gone = lease.expires_at <= utcnow() or is_dead_local_worker(lease.worker)
        if not gone:
            held = LeaseHeld(task_id, lease.worker, lease.expires_at)
            raise Conflict(f"{held}; if that worker is gone, clear it with --force")
    dropped = db.force_release(task_id)
    if dropped is None:
        console.print(f"task {task_id} holds no lease")
        return
    with acting(identity):
        version = record_unlock(db, task_id, dropped.worker, dropped.generation, force=force)
        if version is None:  # no readable head to log it on: the store's audit record
            action = {"kind": "unlock", "task": task_id, "worker": dropped.worker, "force": force}
            record(db, "unlock", action)
    where = f" (version {version})" if version is not None else ""
    console.print(f"task {task_id}: lease of {dropped.worker} cleared{where}")


@app.command()
def keygen() -> None:
    """Print a new key for SKILLSTATE_KEY (encrypts Sensitive[...] fields)."""
    from skillstate.state.secrets import generate_key

    typer.echo(generate_key())
