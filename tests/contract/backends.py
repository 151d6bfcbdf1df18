"""The backends every contract test runs against.

A backend is a name and a factory taking pytest's ``tmp_path``. Backends that need
a server (PostgreSQL, Redis) probe for it: when it is down they skip with the
reason, unless ``SKILLSTATE_REQUIRE_SERVICES=1`` (set by CI), where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore

Factory = Callable[[Path], Store]


def require_service(name: str, reachable: bool, reason: str) -> None:
    """Skip (or, in CI, fail) a test whose backend server is not reachable."""
    if reachable:
        return
    message = f"{name} not reachable: {reason}"
    if os.environ.get("SKILLSTATE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{message} (SKILLSTATE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


BACKENDS: dict[str, Factory] = {
    "memory": lambda tmp: MemoryStore(),
    "sqlite": lambda tmp: SQLiteStore(tmp / "state.db"),
}
