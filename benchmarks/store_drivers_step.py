"""Whole steps for ``store_drivers.py``: ``Runtime.run`` of a counter agent, and the
bare CAS writes of the same heads.

The stricter reading of issue 30's driver target: not ``store.commit`` alone but a
whole skillstate step (load, view, decide, act, a real verify, diff, commit, lease
renewal) per second, against the bare driver loop of ``store_drivers.py`` writing
the head and event such a step writes. The agent is ``runtime_step.py``'s
``SKILLSTATE_AGENT`` (a counter, one skill ``tick`` whose verifier checks the counter
went up by one), so both benchmarks step the same agent.

* ours (:class:`StepOurs`): ``Runtime.run(task, max_steps=CHUNK)`` over and over on
  the store opened from the URL (the lease on, as shipped: the commits are fenced).
  The store's ``commit`` is wrapped to stamp ``perf_counter`` after each commit, so
  the window arithmetic of ``store_drivers.py`` counts steps exactly as it counts
  commits.
* bare: ``store_drivers.py``'s ``BareRedis`` / ``BarePostgres`` committing pre-built
  steps of the same task: the head and event of a real step of the agent (taken
  from a run on the memory store once its card stopped growing: the card keeps the
  last 20 completed steps), renumbered per version. Same document text size, same
  event, same patch shape, built before the clock starts.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from runtime_step import SKILLSTATE_AGENT, define

from skillstate import _json
from skillstate.events import Event
from skillstate.state.diff import JsonDocument
from skillstate.store import open_store

__all__ = ["CHUNK", "StepOurs", "counter_steps"]

CHUNK = 20
"""Steps per ``Runtime.run`` call: the lease is taken and released once per call."""

STEADY = 30
"""Steps run on the memory store before one is taken as the template: the card keeps
its last 20 completed steps, so by then every head has the same shape."""


@functools.cache
def counter_agent() -> Any:
    """The module ``runtime_step.SKILLSTATE_AGENT`` defines (once per process)."""
    return define(SKILLSTATE_AGENT, "store_drivers_counter")


def counter_steps(
    task_id: str, count: int
) -> tuple[dict[str, Any], Event, list[tuple[int, JsonDocument, Event]]]:
    """The first commit of ``task_id`` (document, event) and ``count`` steps after it."""
    store = open_store("memory://")
    captured: list[tuple[Any, Event]] = []
    commit = store.commit

    def capture(task: str, expected: int, state: Any, event: Event, **kwargs: Any) -> int:
        captured.append((state, event))
        return commit(task, expected, state, event, **kwargs)

    store.commit = capture  # type: ignore[method-assign]
    counter_agent().runtime(store).run(task_id, max_steps=STEADY, create=True)
    store.close()
    first_doc, first_event = dict(captured[0][0]), captured[0][1]
    template, template_event = dict(captured[-1][0]), captured[-1][1]
    renumbered = {"/version", "/counter", "/steps_taken"}
    steps = []
    for version in range(2, count + 2):
        doc = dict(template)
        doc.update(version=version, counter=version - 1, steps_taken=version - 1)
        values = {"/version": version, "/counter": version - 1, "/steps_taken": version - 1}
        patch = [
            {**op, "value": values[op["path"]]} if op.get("path") in renumbered else op
            for op in template_event.patch
        ]
        event = template_event.model_copy(update={"version": version, "patch": patch})
        steps.append((version - 1, JsonDocument.of(doc, _json.dumps(doc)), event))
    return first_doc, first_event, steps


class StepOurs:
    """Whole steps of the counter agent through ``open_store(url)`` as shipped."""

    def __init__(self, url: str) -> None:
        self.store = open_store(url)
        self.runtime = counter_agent().runtime(self.store)
        self.task_id = ""

    def start(self, task_id: str, doc: Any, event: Event) -> None:
        """The task's first step (untimed); ``doc`` and ``event`` are the bare side's."""
        self.task_id = task_id
        self.runtime.run(task_id, max_steps=1, create=True)

    def commit(self, expected: int, doc: Any, event: Event) -> None:  # pragma: no cover
        raise NotImplementedError("StepOurs runs whole steps: see loop()")

    def loop(self, seconds: float, warm: int, stamps: list[float]) -> tuple[float, int]:
        """Step until ``seconds`` after ``warm`` steps; stamps each commit.

        Returns the CPU seconds spent after the warm-up's chunk and the number of
        stamps before they started counting.
        """
        clock, cpu_clock = time.perf_counter, time.process_time
        commit = self.store.commit

        def stamped(*args: Any, **kwargs: Any) -> int:
            version: int = commit(*args, **kwargs)
            stamps.append(clock())
            return version

        self.store.commit = stamped
        deadline, cpu_start, cpu_from = float("inf"), cpu_clock(), 0
        try:
            while not stamps or stamps[-1] < deadline:
                self.runtime.run(self.task_id, max_steps=CHUNK)
                if deadline == float("inf") and len(stamps) >= warm:
                    deadline = stamps[warm - 1] + seconds
                    cpu_start, cpu_from = cpu_clock(), len(stamps)
        finally:
            del self.store.commit
        return cpu_clock() - cpu_start, cpu_from

    def close(self) -> None:
        self.store.close()
