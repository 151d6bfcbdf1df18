"""Griffe extension: Sphinx roles in docstrings (:class:`X`) become API cross-references.

``:class:`Name``` (and ``:func:``, ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``,
``:mod:``, ``:obj:``, with an optional ``py:`` domain and ``~`` prefix) is resolved
in the docstring's scope and rendered as an *optional* autorefs link: a link when the
target is documented, plain code when it is not (never a build warning). The reST
``text::`` that introduces a literal block is shown as ``text:``.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

LITERAL = re.compile(r"(?m)(?<=\S)::$")  # reST "text::" before a literal block
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|exc|mod|obj):`(~?)([\w.]+)(?:\(\))?`")


def _target(obj: griffe.Object, name: str) -> str | None:
    if name.startswith("skillstate."):
        return name
    head, _, rest = name.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            path = scope.resolve(head)
        except griffe.NameResolutionError:
            scope = scope.parent
            continue
        return f"{path}.{rest}" if rest else path
    return None


def _rewrite(obj: griffe.Object, text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        tilde, name = match.groups()
        shown = name.rsplit(".", 1)[-1] if tilde else name
        code = f"<code>{html.escape(shown)}</code>"
        target = _target(obj, name)
        if target is None:
            return code
        return f'<autoref identifier="{html.escape(target)}" optional>{code}</autoref>'

    return LITERAL.sub(":", ROLE.sub(replace, text))


class SphinxRoles(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj, obj.docstring.value)
            stack.extend(m for m in obj.members.values() if isinstance(m, griffe.Object))
