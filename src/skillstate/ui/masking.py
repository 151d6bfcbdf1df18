"""What the inspector shows instead of a secret: ``***``, in every page, response and error.

The store never holds a sensitive value in the clear (it is sealed, ``enc:v1:...``,
and everything else passed the agent's redaction policy when it was committed), so
the inspector never decrypts anything: it shows documents as stored, with

* every sealed value (anywhere in a card, a patch, an action) as ``***``;
* every top-level field the agent's state class declares sensitive as ``***``, and
  a JSON Patch operation on such a field with its value as ``***``;
* the exact plaintext of the task's sensitive values (when the operator allowed its
  agent and the server has ``SKILLSTATE_KEY``) replaced in any text shown: tool
  outputs, replies, error messages. That is what a value copied somewhere the
  redaction policy did not know about would need.

The server's own directories are not shown either (:func:`without_paths`): a path
under the working directory is shown relative to it, any other absolute path as
``…/NAME``, in every error message, the store's URL and the report and
expectation paths. They tell a visitor nothing they need and a prober a lot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillstate.state.redact import Redactor
from skillstate.state.secrets import MASK, is_sealed

__all__ = ["MASK", "Masker", "without_paths"]

# The directories of an absolute path: after a ``sqlite:///`` URL's three slashes, or
# where no word, URL or path character precedes the first slash (so ``a/b``,
# ``http://host/x`` and ``/tasks`` stay as they are). A Windows path alike.
_POSIX_DIRS = re.compile(r"(?:(?<=:///)|(?<![\w.~:/\\-]))(?:/[^\s'\"<>/]+)+/")
_WINDOWS_DIRS = re.compile(r"(?<![\w])[A-Za-z]:\\(?:[^\s'\"<>\\]+\\)+")


@dataclass(frozen=True)
class Masker:
    """Masks what one task's pages show (see the module docstring)."""

    hidden: frozenset[str] = frozenset()
    """Top-level card fields the agent's state class declares sensitive."""
    secrets: tuple[str, ...] = ()
    """The plaintext of the task's sensitive values, to replace wherever it appears."""
    _redactor: Redactor = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_redactor", Redactor(self.secrets))

    @classmethod
    def of(cls, hidden: Iterable[str] = (), secrets: Iterable[str] = ()) -> Masker:
        return cls(frozenset(hidden), tuple(secrets))

    def text(self, text: str) -> str:
        """``text`` with the task's secret values replaced by ``***``."""
        return self._redactor.text(text) if self.secrets else text

    def value(self, value: Any) -> Any:
        """A JSON value with sealed values and secret text masked (a copy)."""
        if isinstance(value, str):
            return MASK if is_sealed(value) else self.text(value)
        if isinstance(value, Mapping):
            return {str(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def card(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """A stored card with its sensitive fields (and any sealed value) as ``***``."""
        return {
            name: MASK if name in self.hidden and value is not None else self.value(value)
            for name, value in document.items()
        }

    def patch(self, ops: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """JSON Patch operations with the values of sensitive fields as ``***``."""
        out = []
        for op in ops:
            masked = {str(k): self.value(v) for k, v in op.items()}
            if self.sensitive_path(str(op.get("path", ""))) and "value" in masked:
                masked["value"] = MASK
            out.append(masked)
        return out

    def sensitive_path(self, pointer: str) -> bool:
        """Whether a JSON Pointer (``/api_token``, ``/api_token/x``) is in a sensitive field."""
        top = pointer.split("/")[1] if pointer.startswith("/") else ""
        return top.replace("~1", "/").replace("~0", "~") in self.hidden


def without_paths(text: str) -> str:
    """``text`` with the server's directories left out (see the module docstring)."""
    cwd = str(Path.cwd())
    if cwd != "/":
        text = text.replace(cwd + "/", "")
    text = _POSIX_DIRS.sub("…/", text)
    return _WINDOWS_DIRS.sub("…\\\\", text)
