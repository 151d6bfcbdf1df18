"""What a worker is configured with, and what one message says.

A message names a task and the version its sender saw, never the state: the store
is the only truth, and a message that arrives late or twice is judged against it
(:mod:`skillstate.workers.advance`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["BROKER_ENV", "DEFAULT_QUEUE", "Message", "WorkerSettings", "broker_url"]

BROKER_ENV = "SKILLSTATE_BROKER"
DEFAULT_QUEUE = "skillstate"
"""The queue ``submit`` sends to and ``worker`` consumes when none is named."""


def broker_url(given: str | None) -> str | None:
    """``--broker``, else ``$SKILLSTATE_BROKER``, else ``None`` (no broker configured)."""
    return given or os.environ.get(BROKER_ENV) or None


@dataclass(frozen=True)
class Message:
    """ "Advance task ``task_id``": what one broker message carries."""

    task_id: str
    expected: int
    """The version the sender saw: a worker that finds the task past it, and nobody
    left holding it, knows a newer message (or nobody) is responsible now."""
    message_id: str = ""
    """The message's id (Celery's task id: the same on a redelivery and on a retry of
    this message; empty for a new one). A worker writes it into its lease name, so a
    redelivery can tell the lease its first delivery left behind."""
    attempt: int = 0
    """Provider retries so far (backoff grows with it); 0 for a fresh message."""
    queue: str = DEFAULT_QUEUE
    after: str = ""
    """The lease holder that sent this message while it still held the task (a slice's
    continuation, a provider retry): ``<message id>@host:pid``. The worker that gets
    the message takes the task over from exactly that holder at once, whether it has
    released the lease yet or not (or died first); empty for a message nobody held
    the task for (submit, reply, requeue, the sweeper)."""


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker advances tasks (the options of ``skillstate worker``)."""

    store_url: str
    slice_steps: int = 20
    """Steps one message may run before the task goes back to the end of the queue,
    so a long task does not starve the short ones."""
    lease_ttl: float = 30.0
    """Seconds a lease lives without a heartbeat: how long a task whose worker was
    killed waits before another worker takes it over (a dead worker on the same host
    is noticed at once)."""
    max_crashes: int = 5
    """A task whose worker died this many times in a row without any commit in
    between is dead-lettered: failed with the reason, no longer redelivered."""
    retry_base: float = 2.0
    """First backoff (seconds) after a provider error; it doubles per retry."""
    retry_cap: float = 300.0
    max_retries: int = 8
    """Provider errors in a row before the task is dead-lettered."""
    sweep_every: float = 60.0
    """Seconds between two looks of this worker's sweeper for stranded tasks (0: no
    sweeper). See :mod:`skillstate.workers.sweep`."""
    sweep_after: float = 600.0
    """A running task with no live lease and no commit for this many seconds is
    stranded: the sweeper sends it a new message. Keep it above the longest time a
    message can wait in the queue and above ``retry_cap``."""
    max_countdown: float = 240.0
    """The longest countdown a waiting task is requeued with (seconds). A wait longer
    than this hops: the message comes back early, finds the task still waiting and
    sends the next one. Keep it below the broker's limit on holding a message it has
    delivered: Redis's ``visibility_timeout`` (300 s here; a longer countdown would be
    delivered again meanwhile) and RabbitMQ's ``consumer_timeout`` (30 min by default;
    past it the broker closes the channel)."""
    agents: frozenset[str] = field(default_factory=frozenset)
    """Agent references this worker may import, besides the configured allow-list
    (``[tool.skillstate] agents``, ``SKILLSTATE_AGENTS``, entry points, the demos).
    A reference named only by a stored card is never imported otherwise."""
    route_definitions: bool = False
    """A task pinned to a definition this worker's agent does not have (and cannot
    carry) goes to that definition's queue, ``<queue>.def-<digest12>``, instead of being
    dead-lettered (:mod:`skillstate.workers.routing`)."""

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt + 1`` of a provider error."""
        return float(min(self.retry_cap, self.retry_base * 2**attempt))
