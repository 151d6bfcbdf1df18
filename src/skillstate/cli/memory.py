"""``skillstate memory``: the cross-task memory, listed, forgotten and pruned.

``skillstate memory SCOPE`` lists a scope's facts with their provenance (``memory``
alone lists the scopes), ``memory forget SCOPE KEY --reason R`` removes one fact (an
audited event by a person), ``memory prune --older-than 30d`` drops old and expired
facts. Each scope is a record in the store: ``skillstate log skillstate:memory:SCOPE``
prints its history. See :mod:`skillstate.memory`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from skillstate.cli._app import ActorOpt, JsonOpt, StoreOpt, app
from skillstate.cli._common import _store

if TYPE_CHECKING:
    from skillstate.memory import Fact


class _ShowByDefault(TyperGroup):
    """``memory SCOPE`` is ``memory show SCOPE``: a first word that names no subcommand
    (or none at all) is the scope to show."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click Context
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["show", *args]
        return super().parse_args(ctx, args)


memory_app = typer.Typer(
    cls=_ShowByDefault,
    help="The cross-task memory: facts verified skills remembered, with their provenance. "
    "skillstate memory SCOPE lists a scope (agent:NAME, team:NAME, user:NAME); "
    "skillstate memory alone lists the scopes.",
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(memory_app, name="memory")

ScopeArg = Annotated[
    str, typer.Argument(help="The scope: agent:NAME, team:NAME or user:NAME.", show_default=False)
]


@memory_app.command("show")
def show(
    scope: Annotated[
        str | None,
        typer.Argument(
            help="The scope: agent:NAME, team:NAME or user:NAME (none: list the scopes).",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    json_: JsonOpt = False,
    all_: Annotated[
        bool, typer.Option("--all", help="Also list expired facts (not shown to tasks).")
    ] = False,
) -> None:
    """List a scope's facts: value, the task@version whose verified step wrote it, the
    skill, when it was written and when it expires."""
    from skillstate.memory import check_scope, load_memory, memory_scopes
    from skillstate.memory.record import now

    if scope is not None:
        check_scope(scope)  # a bad scope is refused before the store is opened
    db = _store(store, create=False)
    try:
        if scope is None:
            _list_scopes(db.url, [load_memory(db, s) for s in memory_scopes(db)], json_)
            return
        memory = load_memory(db, scope)
    finally:
        db.close()
    at = now()
    facts = memory.facts if all_ else memory.live(at)
    if json_:
        rows = [{"scope": scope, **f.model_dump(mode="json")} for f in reversed(facts)]
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not facts:
        typer.echo(f"no facts in memory scope {scope} of {db.url}")
        return
    for fact in reversed(facts):  # the most recent first, as views show them
        typer.echo(_fact_line(fact, expired=not fact.live(at)))
    count = f"{len(facts)} fact{'s' if len(facts) != 1 else ''}"
    typer.echo(f"{count} in {scope} (record version {memory.version}) of {db.url}")


@memory_app.command("forget")
def forget(
    scope: ScopeArg,
    key: Annotated[str, typer.Argument(help="The fact's key.", show_default=False)],
    reason: Annotated[
        str,
        typer.Option("--reason", help="Why, for the audit log (required).", show_default=False),
    ],
    store: StoreOpt = None,
    actor: ActorOpt = None,
) -> None:
    """Remove one fact from a scope: an audited event (the person and the reason); tasks
    stop seeing it at their next decision."""
    from skillstate.audit import acting, check_reason, resolve
    from skillstate.memory import check_key, check_scope
    from skillstate.memory import forget as forget_fact

    check_scope(scope)
    check_key(key)
    identity = resolve(actor, check_reason(reason) or "")
    db = _store(store, create=False)
    try:
        with acting(identity):
            removed = forget_fact(db, scope, key, reason=reason, actor=identity.by)
    finally:
        db.close()
    typer.echo(f"forgot {key} in {scope} (it came from {removed.provenance} by {removed.skill})")


@memory_app.command("prune")
def prune(
    scopes: Annotated[
        list[str] | None,
        typer.Argument(help="Scopes to prune (default: every scope).", show_default=False),
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Also drop facts written longer ago than this: 30d, 12h, 90m, 2w.",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    actor: ActorOpt = None,
) -> None:
    """Drop expired facts, and with --older-than old ones, from the memory scopes (one
    audited event per scope that changed)."""
    from skillstate.audit import acting, resolve
    from skillstate.memory import check_scope, parse_duration
    from skillstate.memory import prune as prune_facts

    age = parse_duration(older_than) if older_than is not None else None
    chosen = [check_scope(s) for s in scopes] if scopes else None
    identity = resolve(actor)
    db = _store(store, create=False)
    try:
        with acting(identity):
            dropped = prune_facts(db, chosen, older_than=age, actor=identity.by)
    finally:
        db.close()
    if not dropped:
        typer.echo("nothing to prune")
    for scope, keys in dropped.items():
        typer.echo(f"pruned {len(keys)} from {scope}: {', '.join(keys)}")


def _list_scopes(url: str, memories: list[Any], as_json: bool) -> None:
    from skillstate.memory.record import now

    at = now()
    if as_json:
        rows = [
            {"scope": m.scope, "version": m.version, "facts": len(m.live(at))} for m in memories
        ]
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not memories:
        typer.echo(f"no memory scopes in {url}")
        return
    for m in memories:
        live = len(m.live(at))
        typer.echo(f"{m.scope}  {live} fact{'s' if live != 1 else ''}  version {m.version}")


def _fact_line(fact: Fact, *, expired: bool) -> str:
    value = json.dumps(fact.value, ensure_ascii=False, default=str)
    if len(value) > 80:
        value = value[:79] + "…"
    expires = ""
    if fact.expires_at is not None:
        word = "expired" if expired else "expires"
        expires = f"  {word} {fact.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    ref = f"  artifact {fact.artifact}" if fact.artifact else ""
    return (
        f"{fact.key} = {value}  from {fact.provenance} by {fact.skill}  "
        f"written {fact.written_at:%Y-%m-%d %H:%M:%S} UTC{expires}{ref}"
    )
