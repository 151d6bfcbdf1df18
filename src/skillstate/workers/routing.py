"""Queues per definition: a task goes to a worker that has the definition it is pinned to.

During a rolling deploy old and new workers share a queue. A worker whose agent's
definition differs from a task's pin (:mod:`skillstate.definitions`), and cannot
carry it (no declared patch), never runs the task. By default it dead-letters it,
loudly: the reason in the task's error log and in the worker's log. With routing on
(``skillstate worker --route-definitions``, :attr:`WorkerSettings.route_definitions`)
it forwards the message instead to ``<queue>.def-<digest12>``, the queue of that
definition, which every routing worker consumes for the agents it was started with
(``--agent``): a worker still running the old code picks it up and finishes the task.

A message already on a definition's queue that reaches a worker without that
definition (a misconfigured worker) is dead-lettered, never bounced on.
"""

from __future__ import annotations

from collections.abc import Iterable

from skillstate.definitions.manifest import short

__all__ = ["SUFFIX", "base_queue", "definition_queue", "worker_queues"]

SUFFIX = ".def-"
"""What separates a queue's name from the definition its queue is for."""


def base_queue(queue: str) -> str:
    """``queue`` without a definition suffix: ``skillstate.def-0123456789ab`` -> ``skillstate``."""
    head, sep, tail = queue.rpartition(SUFFIX)
    return head if sep and len(tail) == 12 else queue


def definition_queue(queue: str, ref: str) -> str:
    """The queue of definition ``ref`` (``sha256:...``) beside ``queue``."""
    return f"{base_queue(queue)}{SUFFIX}{short(ref)}"


def worker_queues(queues: Iterable[str], refs: Iterable[str]) -> list[str]:
    """``queues``, then each one's queue for every definition in ``refs`` (in order, once)."""
    names = list(dict.fromkeys(queues))
    definitions = list(dict.fromkeys(refs))
    extra = [definition_queue(q, ref) for q in names for ref in definitions]
    return list(dict.fromkeys(names + extra))
