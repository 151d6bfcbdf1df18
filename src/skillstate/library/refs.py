"""``module:function`` references in skill files, imported the way ``load_agent`` does.

Loading a skill file imports the modules its ``run:`` (and ``rollback:``) name, and
importing runs a module's code: load only files the operator chose (a path in the
agent's own code or on its command line), never one read from a store, a task or a
model's output. ``modules=`` narrows further: then only references inside those
packages are imported. Only plain functions are accepted (``def`` or ``async def``):
a class, a builtin such as ``os:system`` or any other callable is refused, never
called.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Collection
from typing import Any

from skillstate.errors import UsageError

__all__ = ["import_function"]


def import_function(
    ref: Any, *, where: str, arity: int, modules: Collection[str] | None = None
) -> Callable[..., Any]:
    """The function ``ref`` (``module:function``) names, callable with ``arity`` arguments."""
    if not isinstance(ref, str):
        raise UsageError(f"{where}: expected MODULE:FUNCTION, got {type(ref).__name__}")
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{where}: expected MODULE:FUNCTION, got {ref!r}")
    if modules is not None and not any(
        module_name == m or module_name.startswith(m + ".") for m in modules
    ):
        raise UsageError(
            f"{where}: {module_name!r} is not among the allowed modules "
            f"({', '.join(sorted(modules)) or 'none'})"
        )
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{where}: cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise UsageError(f"{where}: {module_name!r} has no attribute {attr!r}")
    if not inspect.isfunction(target):
        raise UsageError(
            f"{where}: {ref!r} is a {type(target).__name__}, not a function "
            "(only def or async def functions are imported)"
        )
    try:
        inspect.signature(target).bind(*range(arity))
    except TypeError:
        raise UsageError(f"{where}: {ref!r} must take {arity} positional arguments") from None
    return target
