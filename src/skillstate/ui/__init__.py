"""The web inspector: ``skillstate ui`` (``pip install 'skillstate[ui]'``).

Every task of a store in a browser: the task list, each task's card, timeline,
diffs, states at any version, first bad step and token curve, evaluation reports,
and (with ``--allow-edit`` and its token) reply, rollback, fork and set. See
``docs/ui.md``. The web stack (Starlette, uvicorn, Jinja2) is imported only by
:func:`create_app` and the command, never by ``import skillstate``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skillstate.ui.config import UIConfig

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from skillstate.store.base import Store

__all__ = ["UIConfig", "create_app"]


def create_app(config: UIConfig, store: Store | None = None) -> Starlette:
    """The inspector's ASGI app (needs the ``ui`` extra)."""
    from skillstate.errors import MissingExtra

    try:
        from skillstate.ui.app import create_app as build
    except ImportError as exc:
        raise MissingExtra(
            f"the web inspector needs its extra: pip install 'skillstate[ui]' ({exc})"
        ) from exc
    return build(config, store)
