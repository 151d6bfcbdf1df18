"""``skillstate ui``: the web inspector (``pip install 'skillstate[ui]'``)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from skillstate.cli._app import StoreOpt, app
from skillstate.cli._common import _store

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@app.command()
def ui(
    store: StoreOpt = None,
    host: Annotated[
        str,
        typer.Option("--host", help="Address to listen on (another than localhost exposes it)."),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")
    ] = 8765,
    allow_edit: Annotated[
        bool,
        typer.Option(
            "--allow-edit",
            help="Accept reply, rollback, fork and set, each with the token printed at start "
            "(or $SKILLSTATE_UI_TOKEN). Without it the inspector is read-only.",
        ),
    ] = False,
    agents: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            help="An agent (MODULE:ATTR) the inspector may use for tasks whose card names it "
            "(repeatable); other stored references must be allowed in [tool.skillstate] "
            "agents or SKILLSTATE_AGENTS.",
            show_default=False,
        ),
    ] = None,
    reports: Annotated[
        list[Path] | None,
        typer.Option(
            "--report",
            help="An evaluation directory (skillstate eval --out DIR) to show (repeatable).",
            show_default=False,
        ),
    ] = None,
    max_steps: Annotated[
        int, typer.Option("--max-steps", min=1, help="Decisions a task runs after a reply.")
    ] = 50,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="Named tokens (TOML: NAME = { sha256 = HEX or token = TEXT, rights = "
            '"read" or "write" }; or $SKILLSTATE_UI_TOKENS): every page then needs one, '
            "writes a write token, and a write records the token's name.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the web inspector: tasks, timelines, diffs, token curves, eval reports."""
    from skillstate.engine.agent import load_agent
    from skillstate.errors import MissingExtra, UsageError
    from skillstate.ui.access import load_tokens
    from skillstate.ui.config import TOKEN_ENV, UIConfig

    try:
        import uvicorn

        from skillstate.ui import create_app
    except ImportError as exc:
        raise MissingExtra(f"skillstate ui needs: pip install 'skillstate[ui]' ({exc})") from exc
    for ref in agents or []:
        load_agent(ref, search_cwd=True)  # a typo fails now, not on the first page
    for directory in reports or []:
        if not (directory / "report.json").is_file():
            raise UsageError(f"--report {str(directory)!r} has no report.json")
    named = load_tokens(token_file)  # a bad file is refused before the store is opened
    writers = [t.name for t in named if t.can_write]
    db = _store(store, create=False)
    token = UIConfig.token_from_env() if allow_edit and not named else None
    local = _loopback(host)
    config = UIConfig(
        store_url=db.url,
        # With named tokens, writes are on exactly when some token may write.
        allow_edit=bool(writers) if named else allow_edit,
        token=token,
        tokens=named,
        agents=tuple(agents or ()),
        reports=tuple(p.resolve() for p in reports or ()),
        max_steps=max_steps,
        hosts=("127.0.0.1", "localhost", "::1", "[::1]") if local else (),
    )
    application = create_app(config, db)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    mode = "edits need the token" if config.allow_edit else "read-only"
    if named:  # never the tokens themselves: only their names
        mode = f"{len(named)} named token(s); writers: {', '.join(writers) or 'none'}"
    typer.echo(f"skillstate ui: {db.url} on {url} ({mode})")
    if token is not None:
        import os

        if os.environ.get(TOKEN_ENV):
            typer.echo(f"write token: from ${TOKEN_ENV}")
        else:
            typer.echo(f"write token: {token}")
            typer.echo(f"open {url}#token={token} to have the pages fill it in")
    if not local:
        typer.echo(f"warning: listening on {host}, not only this machine", err=True)
    uvicorn.run(application, host=host, port=port, log_level="warning", access_log=False)
