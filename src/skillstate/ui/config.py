"""What the operator started the inspector with, and the one check every write passes.

Nothing here imports the web stack: the command line builds a :class:`UIConfig`
and the tests build one without a server.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skillstate.ui.access import NamedToken

__all__ = ["MAX_BODY", "TOKEN_ENV", "UIConfig", "new_token"]

TOKEN_ENV = "SKILLSTATE_UI_TOKEN"
"""Where ``skillstate ui --allow-edit`` takes its write token from (else it makes one)."""
TOKEN_HEADER = "x-skillstate-token"
"""The header a write carries the token in (forms send a ``token`` field instead)."""
MAX_BODY = 64 * 1024
"""The largest write body the inspector reads, in bytes (a reply, a few assignments);
a larger one is refused (413) before or while it is read."""


def new_token() -> str:
    """A fresh write token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class UIConfig:
    """How one ``skillstate ui`` serves one store."""

    store_url: str
    """The store every page reads (``--store``)."""
    allow_edit: bool = False
    """``--allow-edit``: reply, roll back, fork and set are accepted (with the token)."""
    token: str | None = None
    """The write token; required (and only used) with ``allow_edit``."""
    agents: tuple[str, ...] = ()
    """``--agent`` references: tasks whose card names one of them are run with it.
    Every other stored reference goes through the configured allow-list."""
    reports: tuple[Path, ...] = ()
    """``--report`` directories (``skillstate eval --out``), shown under /reports."""
    max_steps: int = 50
    """Decisions a task takes after a reply before the inspector stops driving it."""
    page_size: int = 50
    """Rows per page of the task list and of a task's timeline."""
    max_body: int = MAX_BODY
    """The largest write body accepted, in bytes."""
    hosts: tuple[str, ...] = field(default=("127.0.0.1", "localhost", "::1", "[::1]"))
    """Host headers accepted (DNS rebinding guard); empty accepts any."""
    tokens: tuple[NamedToken, ...] = ()
    """Named tokens (:mod:`skillstate.ui.access`): when any is given, every request needs
    one, a write needs one with the write right, and :attr:`token` is not used."""

    def __post_init__(self) -> None:
        writers = any(t.can_write for t in self.tokens)
        if self.allow_edit and not self.token and not writers:
            raise ValueError("allow_edit needs a token")

    @classmethod
    def token_from_env(cls) -> str:
        """``$SKILLSTATE_UI_TOKEN``, or a new token when it is unset or empty."""
        return os.environ.get(TOKEN_ENV) or new_token()

    def token_ok(self, given: str | None) -> bool:
        """Whether ``given`` is the write token (constant-time comparison)."""
        if not self.allow_edit or not self.token or not given:
            return False
        return hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))
