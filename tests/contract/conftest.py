from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from skillstate.store.base import Store
from tests.contract.backends import (
    BACKENDS,
    SERVICE_BACKENDS,
    Factory,
    drop_postgres_schemas,
    drop_redis_data,
)
from tests.contract.damage import DAMAGE, Damage


@pytest.fixture(
    params=[
        pytest.param(name, marks=pytest.mark.services) if name in SERVICE_BACKENDS else name
        for name in sorted(BACKENDS)
    ]
)
def backend_name(request: pytest.FixtureRequest) -> str:
    """The name of one backend (a key of ``BACKENDS``)."""
    return cast("str", request.param)


@pytest.fixture
def backend(backend_name: str) -> Factory:
    """The factory of one backend; tests that reopen a store call it twice."""
    return BACKENDS[backend_name]


@pytest.fixture
def damage(backend_name: str) -> Damage:
    """How to damage what this backend stored, from outside the Store protocol."""
    return DAMAGE[backend_name]


@pytest.fixture
def store(backend: Factory, tmp_path: Path) -> Iterator[Store]:
    opened = backend(tmp_path)
    yield opened
    opened.close()


@pytest.fixture(autouse=True)
def _drop_redis_data() -> Iterator[None]:
    """Redis keys outlive tmp_path: delete this test's after it (and after its store closed)."""
    yield
    drop_redis_data()


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    """Drop the schemas this test's PostgreSQL stores created, once they are closed."""
    yield
    drop_postgres_schemas()
