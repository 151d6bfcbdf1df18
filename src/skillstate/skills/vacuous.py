"""A verify that cannot fail, found when the agent is built (seed 004 §5.3).

``verify=lambda s, o: True`` lets every step pass: the system looks smooth and
nothing is checked. The seed makes it a hard rule that verify is never such a
placeholder, so an :class:`~skillstate.engine.agent.Agent` whose skill has one is
refused when it is built, like a skill with no verify at all.

The check reads the verifier's bytecode and never calls it. It is conservative:
a verifier is reported only when its code does nothing but build a constant and
return it, so it cannot even read its arguments: ``True``, ``1``, ``"ok"``,
``Verdict.passed(...)`` or ``Verdict(ok=True)`` (with constant arguments).
Anything else is taken for a real check, however weak: reading the state or the
outcome, a branch, a call of anything but :class:`~skillstate.events.Verdict`, a
global other than a module or ``Verdict``, a closure, a callable object.
"""

from __future__ import annotations

import builtins
import dis
import types
from collections.abc import Callable, Mapping
from typing import Any

from skillstate.events import Verdict

__all__ = ["constant_result", "vacuous_verify"]

_UNKNOWN = object()
"""What a verifier returns when it is not a constant (anything that is not vacuous)."""

_NEUTRAL = frozenset(
    {
        "RESUME",
        "NOP",
        "CACHE",
        "EXTENDED_ARG",
        "PUSH_NULL",
        "PRECALL",
        "RETURN_GENERATOR",
        "GEN_START",
        "COPY_FREE_VARS",
        "MAKE_CELL",
        "NOT_TAKEN",
    }
)
"""Instructions that neither read anything nor change what is returned (3.10-3.14)."""

_PASSED = Verdict.__dict__["passed"].__func__
"""The function behind ``Verdict.passed`` (each attribute access binds it anew)."""

_CALLS = frozenset({"CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_KW", "CALL_FUNCTION_KW"})
_NAMES_ON_STACK = frozenset({"CALL_KW", "CALL_FUNCTION_KW"})
"""Calls whose keyword names are a tuple on the stack (3.10's and 3.13's)."""


def vacuous_verify(fn: Callable[..., Any] | None) -> str | None:
    """What ``fn`` always returns, described (``True``, ``a passing Verdict``), when it
    is a verifier that cannot fail; ``None`` when it may fail (or cannot be read)."""
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if not isinstance(fn, types.FunctionType):
        return None  # a builtin, a partial, a callable object: not read, trusted
    value = constant_result(fn.__code__, fn.__globals__)
    if value is _UNKNOWN:
        return None
    if isinstance(value, Verdict):
        return "a passing Verdict" if value.ok else None
    return _shown(value) if value else None


def constant_result(code: types.CodeType, globals_: Mapping[str, Any]) -> Any:
    """The value ``code`` returns when it only ever builds and returns a constant;
    otherwise a private marker (see :func:`vacuous_verify`)."""
    stack: list[Any] = []
    names: tuple[str, ...] = ()
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op in _NEUTRAL:
            continue
        if op == "RETURN_CONST":
            return ins.argval
        if op == "RETURN_VALUE":
            return stack.pop() if stack else _UNKNOWN
        if op == "KW_NAMES":
            names = ins.argval if isinstance(ins.argval, tuple) else code.co_consts[ins.arg or 0]
            continue
        if op in _NAMES_ON_STACK:
            names = stack.pop() if stack else ()
        if _execute(ins, stack, globals_, names) is _UNKNOWN:
            return _UNKNOWN
        if op in _CALLS:
            names = ()
    return _UNKNOWN


def _execute(
    ins: dis.Instruction, stack: list[Any], globals_: Mapping[str, Any], names: tuple[str, ...]
) -> Any:
    """Run one instruction of a constant builder on ``stack``; the marker if it is not one."""
    op = ins.opname
    if op == "POP_TOP":
        if stack:
            stack.pop()
        return None
    if op in ("LOAD_CONST", "LOAD_SMALL_INT"):
        found = ins.argval
    elif op == "LOAD_GLOBAL":
        found = _global(globals_, str(ins.argval))
    elif op in ("LOAD_ATTR", "LOAD_METHOD"):
        found = _attribute(stack.pop() if stack else _UNKNOWN, str(ins.argval))
    elif op in _CALLS:
        found = _call(stack, ins.arg or 0, names)
    else:  # reads an argument, branches, builds something: a real check
        return _UNKNOWN
    if found is not _UNKNOWN:
        stack.append(found)
    return found


def _global(globals_: Mapping[str, Any], name: str) -> Any:
    """A module or ``Verdict`` by name; anything else could vary between calls."""
    found = globals_[name] if name in globals_ else getattr(builtins, name, _UNKNOWN)
    return found if isinstance(found, types.ModuleType) or found is Verdict else _UNKNOWN


def _attribute(owner: Any, name: str) -> Any:
    """``owner.name`` along a path to ``Verdict`` (``skillstate.Verdict.passed``)."""
    if not (isinstance(owner, types.ModuleType) or owner is Verdict):
        return _UNKNOWN
    found = getattr(owner, name, _UNKNOWN)
    if isinstance(found, types.ModuleType) or found is Verdict or _is_passed(found):
        return found
    return _UNKNOWN


def _is_passed(fn: Any) -> bool:
    return getattr(fn, "__func__", None) is _PASSED


def _call(stack: list[Any], count: int, names: tuple[str, ...]) -> Any:
    """``Verdict(...)`` or ``Verdict.passed(...)`` with constant arguments, evaluated."""
    if len(stack) < count + 1:
        return _UNKNOWN
    args = stack[len(stack) - count :]
    del stack[len(stack) - count :]
    fn = stack.pop()
    if not (fn is Verdict or _is_passed(fn)) or not isinstance(names, tuple):
        return _UNKNOWN
    split = len(args) - len(names)
    try:
        return fn(*args[:split], **dict(zip(names, args[split:], strict=True)))
    except Exception:  # not a valid Verdict: whatever it is, it is not a constant pass
        return _UNKNOWN


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
