"""Task families: one module per kind of task, each a :class:`~skillstate.eval.tasks.Family`.

A :class:`~skillstate.eval.tasks.TaskSpec` names its family by string (specs are
plain JSON), so the harness looks the builder up here.
"""

from __future__ import annotations

from skillstate.errors import UsageError
from skillstate.eval.families.records import RecordsFamily
from skillstate.eval.tasks import Family

__all__ = ["FAMILIES", "get_family"]

FAMILIES: dict[str, Family] = {"records": RecordsFamily()}


def get_family(name: str) -> Family:
    """The family called ``name``; a :class:`UsageError` naming the known ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise UsageError(f"unknown task family {name!r}; known: {', '.join(FAMILIES)}") from None
