"""Task suites: named, seeded lists of :class:`~skillstate.eval.tasks.TaskSpec`.

A suite is a pure function of its seed, so two runs of the experiment (or a rerun
of one variant) see exactly the same tasks.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from skillstate.errors import UsageError
from skillstate.eval.families.records import make_spec
from skillstate.eval.tasks import Group, TaskSpec

__all__ = ["SUITES", "load_suite", "long_suite"]

# Records per task for each length group; the skills plan takes n + 2 decisions
# (one per record, the summary, finish), so these give plans of 5-8, 9-20 and 21-60.
_SIZES: dict[Group, tuple[int, int]] = {"short": (3, 6), "medium": (7, 18), "long": (19, 58)}
_CYCLE: tuple[Group, ...] = ("short", "medium", "long", "long")


def long_suite(seed: int = 0, count: int = 12) -> list[TaskSpec]:
    """``count`` records tasks of varied length, mostly long, every group represented.

    Groups cycle short, medium, long, long (so any ``count >= 3`` covers all three);
    each task's size and its own seed are drawn from ``seed``.
    """
    if count < 1:
        raise UsageError("a suite needs at least one task")
    rng = random.Random(f"long:{seed}")
    specs: list[TaskSpec] = []
    for k in range(count):
        low, high = _SIZES[_CYCLE[k % len(_CYCLE)]]
        n = rng.randint(low, high)
        specs.append(make_spec(f"records-{k:03d}", seed=rng.randrange(2**31), n=n, suite="long"))
    return specs


SUITES: dict[str, Callable[..., list[TaskSpec]]] = {"long": long_suite}


def load_suite(name: str, seed: int = 0) -> list[TaskSpec]:
    """The tasks of suite ``name`` for ``seed``; a :class:`UsageError` for an unknown name."""
    suite = SUITES.get(name)
    if suite is None:
        raise UsageError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    return suite(seed)
