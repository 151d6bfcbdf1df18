"""YAML from people (``set`` values, ``edit`` files) and from files a store reads.

``yaml.safe_load`` is safe from code execution but not from size or depth: an
anchor referenced by aliases that reference aliases (a "billion laughs") expands
to gigabytes, a 20,000-deep flow list overflows the recursion limit, a cyclic
anchor loops, and ``1e999`` or ``.nan`` become floats JSON cannot hold. This
loader refuses aliases outright (a card never needs them), bounds the nesting
while composing, before anything is expanded or built, and refuses what a card
could not store; each as one :class:`~skillstate.errors.UsageError` line.
"""

from __future__ import annotations

from typing import Any

import yaml

from skillstate.errors import UsageError
from skillstate.limits import DEFAULT_LIMITS, INT_DIGITS, problem

__all__ = ["check_events", "load_yaml"]


class _BoundedLoader(yaml.SafeLoader):
    max_depth = DEFAULT_LIMITS.depth

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _Refused(f"YAML aliases (*{event.anchor}) are not accepted")
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise _Refused(f"it is nested more than {self.max_depth} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Refused(Exception):
    pass


def load_yaml(text: str, *, what: str, max_depth: int = DEFAULT_LIMITS.depth) -> Any:
    """Parse ``text`` (``what`` names it in errors) with the bounds above."""
    loader_class = type("Loader", (_BoundedLoader,), {"max_depth": max_depth})
    try:
        # The reader checks the characters as it is built: a raw control character
        # is refused here (as a ReaderError), before the parse starts.
        loader = loader_class(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{what} is not valid YAML: {_first_line(exc)}") from exc
    try:
        value = loader.get_single_data()
    except _Refused as exc:
        raise UsageError(f"{what} refused: {exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{what} is not valid YAML: {_first_line(exc)}") from exc
    except RecursionError:
        raise UsageError(f"{what} refused: it is nested too deeply") from None
    except ValueError as exc:  # a constructor's: int("9" * 5000), a date 2001-13-45
        reason = (
            f"it holds an integer of more than {INT_DIGITS:,} digits"
            if "digits" in str(exc)
            else f"a value does not read ({_first_line(exc)})"
        )
        raise UsageError(f"{what} refused: {reason}") from None
    finally:
        loader.dispose()
    found = problem(value, chars=1 << 30, depth=max_depth)
    if found is not None:
        raise UsageError(f"{what} refused: {found}")
    return value


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def check_events(text: str | bytes, *, max_depth: int = 256) -> str | None:
    """Why a stored YAML document must not be loaded (an alias, too deep), or None.

    For files skillstate wrote itself (which never hold anchors): one pass over the
    parser's events, in C where available, before anything is built or expanded.
    """
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                return f"it holds a YAML alias (*{event.anchor}), which skillstate never writes"
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > max_depth:
                    return f"it is nested more than {max_depth} levels deep"
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return None  # the load itself reports a syntax error, with its position
    return None
