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
from skillstate.limits import DEFAULT_LIMITS, problem

__all__ = ["load_yaml"]


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
    loader = loader_class(text)
    try:
        value = loader.get_single_data()
    except _Refused as exc:
        raise UsageError(f"{what} refused: {exc}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(f"{what} is not valid YAML: {first}") from exc
    except RecursionError:
        raise UsageError(f"{what} refused: it is nested too deeply") from None
    finally:
        loader.dispose()
    found = problem(value, chars=1 << 30, depth=max_depth)
    if found is not None:
        raise UsageError(f"{what} refused: {found}")
    return value
