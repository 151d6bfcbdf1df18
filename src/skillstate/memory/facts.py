"""What cross-task memory is made of: scopes, facts with provenance, and the card's records.

A **scope** is where facts are shared: ``agent:NAME`` (every task of an agent),
``team:NAME`` (agents that work together) or ``user:NAME`` (everything done for one
person). An agent or a skill may name a scope with placeholders filled from the card,
``user:{user}``: each task then reads and writes the scope of its own ``user`` field.

A **fact** is a key, a JSON value and where it came from: the task, the version of
that task whose verified step wrote it, the skill, the step, an optional artifact
ref, when it was written and when it expires.

The card holds two small records of memory (both runtime-owned): the facts the
task's views show (:class:`Recalled`, with the record versions they were read at),
so a view is a function of the card alone, and the writes a verified step made that
are not in the memory record yet (:class:`Remembered`, the outbox).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from skillstate.errors import UsageError

__all__ = [
    "KEY_CHARS",
    "SCOPE_KINDS",
    "Fact",
    "MemoryWrite",
    "Recalled",
    "Remembered",
    "check_key",
    "check_scope",
    "check_template",
    "parse_duration",
    "resolve_scope",
    "template_fields",
    "template_problems",
]

SCOPE_KINDS = ("agent", "team", "user")
"""The kinds of scope: whose facts they are."""
NAME_CHARS = 128
KEY_CHARS = 128
"""The longest scope name and fact key (characters)."""

_NAME = re.compile(rf"[^\s\x00-\x1f\x7f]{{1,{NAME_CHARS}}}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)\}")
_SCOPE_HELP = "expected agent:NAME, team:NAME or user:NAME (NAME: 1-128 characters, no spaces)"


def check_scope(scope: object) -> str:
    """``scope`` if it names a scope (``agent:orders``); else a one-line ``UsageError``."""
    if isinstance(scope, str):
        kind, sep, name = scope.partition(":")
        if sep and kind in SCOPE_KINDS and _NAME.fullmatch(name) and "{" not in name:
            return scope
    raise UsageError(f"invalid memory scope {scope!r}: {_SCOPE_HELP}")


def check_template(template: object) -> str:
    """``template`` if it is a scope, or one with ``{field}`` placeholders (``user:{user}``)."""
    if isinstance(template, str):
        kind, sep, name = template.partition(":")
        bare = _PLACEHOLDER.sub("x", name)
        if sep and kind in SCOPE_KINDS and _NAME.fullmatch(bare) and "{" not in bare:
            return template
    raise UsageError(
        f"invalid memory scope {template!r}: {_SCOPE_HELP}; a {{field}} of the card may "
        "stand for the name (user:{user})"
    )


def template_fields(template: str) -> list[str]:
    """The card paths a scope template reads (``user:{user}`` reads ``user``)."""
    return _PLACEHOLDER.findall(template)


def resolve_scope(template: str, state: Any) -> str | None:
    """The scope ``template`` names for the card ``state``; ``None`` when a placeholder's
    value is empty or does not make a scope name (that task has no such scope)."""
    missing = False

    def value(match: re.Match[str]) -> str:
        nonlocal missing
        found: Any = state
        for part in match.group(1).split("."):
            found = found.get(part) if isinstance(found, dict) else getattr(found, part, None)
        if isinstance(found, bool) or not isinstance(found, str | int) or found == "":
            missing = True
            return ""
        return str(found)

    kind, _, name = template.partition(":")
    filled = _PLACEHOLDER.sub(value, name)
    if missing or not _NAME.fullmatch(filled) or "{" in filled:
        return None
    return f"{kind}:{filled}"


def template_problems(owner: str, templates: object, fields: Collection[str]) -> list[str]:
    """What is wrong with ``owner``'s memory scopes (``Agent(memory=...)``, a skill's
    ``remembers``) for a card with ``fields``: one phrase each."""
    if isinstance(templates, str) or not isinstance(templates, Iterable):
        return [f"{owner}: memory scopes take a list of scopes, not {templates!r}"]
    problems = []
    for template in templates:
        try:
            check_template(template)
        except UsageError as exc:
            problems.append(f"{owner}: {exc}")
            continue
        for path in template_fields(template):
            top = path.split(".")[0]
            if top not in fields:
                problems.append(
                    f"{owner}: memory scope {template!r} reads {path!r}, but the card has "
                    f"no field {top!r}"
                )
    return problems


def check_key(key: object) -> str:
    """``key`` if it can name a fact: 1-128 characters, no control characters."""
    if (
        isinstance(key, str)
        and 0 < len(key) <= KEY_CHARS
        and not any(ord(c) < 32 or ord(c) == 127 for c in key)
    ):
        return key
    raise UsageError(
        f"invalid memory key {key!r}: 1-{KEY_CHARS} characters without control characters"
    )


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or a sum: ``1d12h``) as a timedelta."""
    compact = text.strip().lower()
    parts = _DURATION.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact.replace(" ", ""):
        raise UsageError(
            f"invalid duration {text!r}: expected a number and a unit, s m h d or w (30d, 12h)"
        )
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"invalid duration {text!r}: it must be longer than zero")
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class MemoryWrite:
    """What a skill asked to remember (``ctx.remember``): kept only if its step verifies."""

    scope: str
    """The scope, resolved for the task (``user:alice``)."""
    key: str
    value: Any
    ttl: float | None = None
    """Seconds the fact lives once written (``None``: until forgotten or replaced)."""
    artifact: str | None = None
    """An artifact ref the fact rests on (a tool output, ``ctx.attach``)."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Remembered(_Record):
    """A verified write waiting in the card's outbox (``memory_outbox``) for the memory
    record: committed with the step that verified it, flushed right after that commit
    (or, after a crash, before the task's next write)."""

    scope: str
    key: str
    value: Any = None
    version: int
    """The task's version whose commit verified it (with the task id: its provenance)."""
    skill: str
    step: str
    """The id of the step record (``0007-learn``)."""
    ttl: float | None = None
    artifact: str | None = None


class Recalled(_Record):
    """A fact of another task as this task's views show it (the card's ``recalled``)."""

    scope: str
    key: str
    value: Any = None
    task: str
    version: int
    skill: str
    artifact: str | None = None

    @property
    def provenance(self) -> str:
        """``task@version`` of the verified step that wrote it."""
        return f"{self.task}@{self.version}"


class Fact(_Record):
    """One fact of a memory record, with its provenance."""

    seq: int
    """Its number in the scope: 1, 2, 3... in the order facts were written (never reused;
    the record stores it under ``f<seq>``)."""
    key: str
    value: Any = None
    task: str
    """The task whose verified step wrote it."""
    version: int
    """That task's version (its commit verified the step)."""
    skill: str
    step: str | None = None
    artifact: str | None = None
    written_at: datetime
    """When it reached the memory record (UTC)."""
    expires_at: datetime | None = None
    """When it stops being shown (UTC; ``None``: never). The next write to the scope, or
    ``skillstate memory prune``, drops it."""

    @property
    def provenance(self) -> str:
        return f"{self.task}@{self.version}"

    def live(self, now: datetime) -> bool:
        """Whether the fact is still shown at ``now``."""
        return self.expires_at is None or self.expires_at > now

    def recalled(self, scope: str) -> Recalled:
        return Recalled(
            scope=scope,
            key=self.key,
            value=self.value,
            task=self.task,
            version=self.version,
            skill=self.skill,
            artifact=self.artifact,
        )
