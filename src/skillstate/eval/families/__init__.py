"""Task families: one module per kind of task, each a :class:`~skillstate.eval.tasks.Family`.

A :class:`~skillstate.eval.tasks.TaskSpec` names its family by string (specs are
plain data), so the harness looks the builder up here: a built-in name, or
``module:attr`` for a family of the user's own. Built-ins are imported on first
use, so loading one suite does not import every family.
"""

from __future__ import annotations

import importlib

from skillstate.errors import UsageError
from skillstate.eval.tasks import Family

__all__ = ["BUILTIN", "get_family"]

BUILTIN: dict[str, str] = {
    "records": "skillstate.eval.families.records:RecordsFamily",
    "ticket": "skillstate.eval.families.ticket:TicketFamily",
    "orders": "skillstate.eval.families.orders:OrdersFamily",
    "fix_syntax": "skillstate.eval.families.fix_syntax:FixSyntaxFamily",
    "sales": "skillstate.eval.families.sales:SalesFamily",
}
"""Built-in family name -> ``module:class``."""

_loaded: dict[str, Family] = {}


def get_family(name: str) -> Family:
    """The family called ``name`` (built-in or ``module:attr``); a :class:`UsageError` otherwise."""
    if name in _loaded:
        return _loaded[name]
    ref = BUILTIN.get(name, name)
    module_name, _, attr = ref.partition(":")
    if not attr:
        raise UsageError(
            f"unknown task family {name!r}; built-in: {', '.join(BUILTIN)} (or module:attr)"
        )
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load task family {name!r} from {ref}: {exc}") from None
    family: Family = target() if isinstance(target, type) else target
    _loaded[name] = family
    return family
