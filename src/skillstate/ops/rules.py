"""The alert rules and their configuration.

Every rule has a default, so ``skillstate alerts`` works without any setting; the
project file changes them (``.skillstate.toml``'s ``[alerts]`` or ``pyproject.toml``'s
``[tool.skillstate.alerts]``), and the command's flags win over both::

    [tool.skillstate.alerts]
    stale_after = "15m"        # running, but no commit for this long
    waiting_after = "1d"       # waiting on a person (waiting_user, waiting_approval)
    max_retries = 3            # failed attempts of one step that has not completed
    budget_warn_at = 0.8       # a share of a budget below
    budget_tokens = 200000     # prompt tokens per task (like --max-tokens)
    budget_calls = 50          # model calls per task (like --max-calls)
    budget_cost = 2.0          # money per task, by the provider's price table
    disabled = ["waiting"]     # rules not evaluated

A bad value is one line (:class:`~skillstate.errors.UsageError`, exit 2).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from skillstate._validation import first_error
from skillstate.errors import UsageError

__all__ = ["RULES", "AlertRules", "RuleName", "load_rules", "parse_duration"]

RuleName = Literal["stale", "waiting", "retries", "compensation", "dead_letter", "budget"]

RULES: tuple[RuleName, ...] = (
    "stale",
    "waiting",
    "retries",
    "compensation",
    "dead_letter",
    "budget",
)
"""Every rule, in the order alerts are listed."""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(value: object, name: str = "duration") -> float:
    """Seconds from ``90``, ``"90s"``, ``"15m"``, ``"2h"`` or ``"1d"``; else ``UsageError``."""
    if isinstance(value, bool):
        raise UsageError(f"{name} must be a duration such as 15m, 2h or 1d, not {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        found = _DURATION.match(str(value))
        if found is None:
            raise UsageError(f"{name} must be a duration such as 15m, 2h or 1d, not {value!r}")
        seconds = float(found.group(1)) * _UNITS[found.group(2) or "s"]
    if seconds <= 0:
        raise UsageError(f"{name} must be a positive duration, not {value!r}")
    return seconds


class AlertRules(BaseModel):
    """When each rule fires (see the module docstring for the settings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stale_after: float = 900.0
    """Seconds a ``running`` task may go without a commit (default 15 minutes)."""
    waiting_after: float = 86400.0
    """Seconds a task may wait on a person (default a day)."""
    max_retries: int = Field(default=3, ge=0)
    """Failed attempts of one not-yet-completed step above which it alerts."""
    budget_warn_at: float = Field(default=0.8, gt=0, le=1)
    """The share of a budget at which the budget rule fires."""
    budget_tokens: int | None = Field(default=None, ge=1)
    budget_calls: int | None = Field(default=None, ge=1)
    budget_cost: float | None = Field(default=None, gt=0)
    disabled: tuple[RuleName, ...] = ()
    """Rules not evaluated."""

    @field_validator("stale_after", "waiting_after", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    def enabled(self, rule: RuleName) -> bool:
        return rule not in self.disabled


def load_rules(cwd: str | Path | None = None, **overrides: Any) -> AlertRules:
    """The rules of the project file's alerts table, with ``overrides`` (the CLI's
    flags; ``None`` values are ignored) over it. Raises a one-line ``UsageError``."""
    from skillstate.config import _project_file

    table: dict[str, Any] = {}
    where = "the command line"
    found = _project_file(Path(cwd or os.getcwd()))
    if found is not None:
        path, settings = found
        raw = settings.get("alerts", {})
        if not isinstance(raw, dict):
            raise UsageError(f"alerts in {path} must be a table")
        table, where = dict(raw), f"the alerts settings of {path}"
    given = {key: value for key, value in overrides.items() if value is not None}
    if given:
        where = f"{where} or the command line" if found else where
    try:
        return AlertRules.model_validate({**table, **given})
    except UsageError as exc:
        raise UsageError(f"bad alert setting in {where}: {exc}") from exc
    except ValidationError as exc:
        why = first_error(exc, "alerts").replace("Value error, ", "")
        raise UsageError(f"bad alert setting in {where}: {why}") from exc
