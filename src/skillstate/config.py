"""The operator's configuration: what the store may not decide.

A task's card is data, and whoever can write the store can write it (a ``set``, a
shared PostgreSQL, a compromised Redis). So the card never decides what code runs
or where credentials go. Those come from the operator, in this order:

1. command-line options (``--agent``, ``--store``, ``--model``, ``--base-url``);
2. environment variables (``SKILLSTATE_AGENTS``, ``SKILLSTATE_STORE``,
   ``SKILLSTATE_MODEL``, ``SKILLSTATE_BASE_URL``);
3. a project file: ``.skillstate.toml`` (top level) or the ``[tool.skillstate]``
   table of ``pyproject.toml``, in the current directory or the nearest parent
   that has one::

        [tool.skillstate]
        store = "sqlite:///.skillstate/state.db"
        agents = ["my_pkg.agents:support", "my_pkg.agents:billing"]
        model = "openai:gpt-4o-mini"
        base_url = "http://localhost:8000/v1"

4. installed packages, for agents: entry points in the ``skillstate.agents`` group
   (``support = "my_pkg.agents:support"``), and the bundled demos.

``agents`` is the allow-list of agent references a stored ``agent`` field may
select when a task is resumed without ``--agent``; anything else is refused
before it is imported (importing a module runs its code).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillstate.errors import UsageError

__all__ = ["BUILTIN_AGENTS", "Config", "allowed_agents", "load_config"]

BUILTIN_AGENTS = frozenset(
    {
        "skillstate.examples.ticket:agent",
        "skillstate.examples.orders:agent",
        "skillstate.examples.ledger:agent",
    }
)
"""The bundled demos: always allowed."""

ENTRY_POINT_GROUP = "skillstate.agents"

_KEYS = {"store", "agents", "model", "base_url", "alerts", "spot_checks"}


@dataclass(frozen=True)
class Config:
    """What the operator configured (see the module docstring for the sources)."""

    store: str | None = None
    agents: tuple[str, ...] = ()
    model: str | None = None
    base_url: str | None = None
    source: str | None = None
    """The project file it was read from, if any."""


def load_config(cwd: str | Path | None = None) -> Config:
    """The project file (if any) with the environment's settings over it."""
    values: dict[str, Any] = {}
    source: str | None = None
    found = _project_file(Path(cwd or os.getcwd()))
    if found is not None:
        path, table = found
        values, source = table, str(path)
    env = os.environ
    agents = _agents(values.get("agents", ()), source)
    if env.get("SKILLSTATE_AGENTS"):
        agents += tuple(a.strip() for a in env["SKILLSTATE_AGENTS"].split(",") if a.strip())
    return Config(
        store=env.get("SKILLSTATE_STORE") or _text(values, "store", source),
        agents=agents,
        model=env.get("SKILLSTATE_MODEL") or _text(values, "model", source),
        base_url=env.get("SKILLSTATE_BASE_URL") or _text(values, "base_url", source),
        source=source,
    )


def allowed_agents(config: Config) -> frozenset[str]:
    """Every agent reference a stored ``agent`` field may select."""
    refs = set(BUILTIN_AGENTS) | set(config.agents)
    try:
        from importlib.metadata import entry_points

        refs |= {ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    except Exception:  # a broken installed distribution must not break resume
        pass
    return frozenset(refs)


def _project_file(start: Path) -> tuple[Path, dict[str, Any]] | None:
    for directory in (start, *start.parents):
        dedicated = directory / ".skillstate.toml"
        if dedicated.is_file():
            return dedicated, _table(_read(dedicated), dedicated, top=True)
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            data = _read(pyproject)
            tool = data.get("tool")
            if isinstance(tool, dict) and isinstance(tool.get("skillstate"), dict):
                return pyproject, _table(tool["skillstate"], pyproject, top=False)
            # A project root without a skillstate table ends the search: a parent
            # directory's settings belong to another project.
            return None
    return None


def _read(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as handle:
            data: dict[str, Any] = tomllib.load(handle)
            return data
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"cannot read configuration {str(path)!r}: {exc}") from exc


def _table(table: dict[str, Any], path: Path, *, top: bool) -> dict[str, Any]:
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        where = str(path) if top else f"[tool.skillstate] in {path}"
        known = ", ".join(sorted(_KEYS))
        raise UsageError(f"unknown setting(s) {', '.join(unknown)} in {where} (known: {known})")
    return table


def _text(values: dict[str, Any], key: str, source: str | None) -> str | None:
    value = values.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise UsageError(f"{key} in {source} must be a non-empty string")
    return value


def _agents(value: Any, source: str | None) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"agents in {source} must be a list of MODULE:ATTR strings")
    return tuple(value)
