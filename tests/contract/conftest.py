from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skillstate.store.base import Store
from tests.contract.backends import BACKENDS, Factory


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Factory:
    """The factory of one backend; tests that reopen a store call it twice."""
    return BACKENDS[request.param]


@pytest.fixture
def store(backend: Factory, tmp_path: Path) -> Iterator[Store]:
    opened = backend(tmp_path)
    yield opened
    opened.close()
