"""The Celery side: one app per broker, one task ("advance task T"), sending messages.

Delivery settings are what make a killed worker lose nothing: messages are
acknowledged *late* (after the slice, not on receipt), rejected back to the queue
when the worker process is lost, and prefetched one at a time, so a worker holds at
most the message it is running. A ``kill -9`` drops the broker connection (RabbitMQ
requeues the unacknowledged message at once; Redis after its ``visibility_timeout``)
and the next worker resumes the task from the store (:mod:`skillstate.workers.advance`).

Celery is imported here and in :mod:`skillstate.workers.beat` only: ``import
skillstate`` never loads it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from skillstate.errors import MissingExtra
from skillstate.workers.advance import Advancer, Outcome
from skillstate.workers.settings import DEFAULT_QUEUE, Message
from skillstate.workers.sweep import Sweeper

try:
    from celery import Celery, signals
    from celery.worker.request import Request
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingExtra("skillstate workers need Celery: pip install 'skillstate[celery]'") from exc

__all__ = ["TASK_NAME", "enqueue", "make_app", "serve"]

TASK_NAME = "skillstate.advance"
log = logging.getLogger("skillstate.workers")

_STOPPING = threading.Event()
"""Set when the worker starts a warm shutdown (SIGTERM): slices end after their step."""
_SERVING: dict[str, Advancer] = {}
"""The advancer of this worker process (set by :func:`serve`)."""


def make_app(broker: str, *, visibility_timeout: float = 300.0) -> Celery:
    """A Celery app on ``broker`` with skillstate's delivery settings and its one task.

    ``visibility_timeout`` (Redis brokers) is how long an unacknowledged message
    waits before it is delivered again: the time a killed worker's task waits on
    Redis (plus up to a quarter of it, at most 10 s, for the workers' next look).
    Keep it above the longest slice, or live slices get a duplicate message
    (harmless: the duplicate finds the lease held and is dropped).
    """
    app = Celery("skillstate", broker=broker, set_as_current=False)
    restore = min(10.0, max(1.0, visibility_timeout / 4))
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=DEFAULT_QUEUE,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": visibility_timeout,
            # Redis looks for messages past their visibility timeout only every
            # interval x throttle seconds (10 x 10 by default): a killed worker's
            # message then waited up to 100 s more. Look every quarter of the
            # timeout (1-10 s), each time: one cheap ZRANGE per worker.
            "unacked_restore_interval": restore,
            "unacked_restore_throttle": 1,
            # The look holds a mutex in Redis; a worker killed while holding it
            # blocked every redelivery for the mutex's expiry (300 s by default).
            # A look takes milliseconds: let the mutex lapse after two intervals
            # (a slower look then overlapping another restores a message twice,
            # and the duplicate is dropped like any other).
            "unacked_mutex_expire": int(2 * restore),
        },
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )
    app.task(
        name=TASK_NAME,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        Request=_PromptAck,
    )(_advance)
    return app


class _PromptAck(Request):  # type: ignore[misc]  # celery ships no type hints
    """A request acknowledged as soon as its task returns, when that is on the loop thread.

    Celery hands a late acknowledgement to its event loop (``hub.call_soon``). Called
    from the loop's own thread, as the solo pool does, that wakes nothing: the loop
    can go back to waiting on the broker socket with the ack still queued, and with a
    prefetch of one the broker sends nothing until the ack. The worker then sat idle
    until its next timer (heartbeat checks, up to 2 s; ~200 ms per message on
    average, measured on RabbitMQ). On the loop thread the ack is sent right here,
    which is what the loop would do next anyway; a pool thread (``-c`` > 1) keeps
    Celery's hand-off, since the broker channel is not thread-safe.
    """

    acknowledged: bool

    def acknowledge(self) -> None:
        if self.acknowledged or threading.current_thread() is not threading.main_thread():
            super().acknowledge()
            return
        self.message.ack_log_error(log, self._connection_errors)
        self.acknowledged = True


def enqueue(app: Celery, message: Message, countdown: float = 0.0) -> None:
    """Send "advance ``message.task_id``" (the id and the version, never the state)."""
    app.send_task(
        TASK_NAME,
        args=[message.task_id, message.expected],
        kwargs={"attempt": message.attempt, **({"after": message.after} if message.after else {})},
        queue=message.queue,
        task_id=message.message_id or None,
        countdown=countdown or None,
    )


def serve(
    app: Celery,
    advancer: Advancer,
    *,
    queues: list[str],
    concurrency: int = 1,
    loglevel: str = "INFO",
) -> None:
    """Run a worker in this process until it is stopped (SIGTERM: warm shutdown).

    One slot runs in the main thread (``solo``); more run as threads of this one
    process, sharing its store connection pool and agents. Both keep the shutdown
    flag visible to the running slices, and a ``kill -9`` takes all slots at once.
    Unless ``settings.sweep_every`` is 0, a sweeper thread sends stranded tasks whose
    agent this worker may run to the first of ``queues``
    (:mod:`skillstate.workers.sweep`).
    """
    _SERVING["advancer"] = advancer
    advancer.stopping = _STOPPING.is_set
    advancer.warm()  # the allow-list and --agent imports: not on the first message
    settings = advancer.settings
    if settings.sweep_every > 0:
        Sweeper(
            advancer.store,
            lambda message: enqueue(app, message),
            every=settings.sweep_every,
            older_than=settings.sweep_after,
            queue=queues[0],
            allowed=advancer.allows,
            stopped=_STOPPING,
        ).start()
    pool = "solo" if concurrency == 1 else "threads"
    app.worker_main(
        [
            "worker",
            f"--pool={pool}",
            f"--concurrency={concurrency}",
            f"--queues={','.join(queues)}",
            f"--loglevel={loglevel}",
            f"--hostname=skillstate-{os.getpid()}@{socket.gethostname()}",
            "--without-gossip",
            "--without-mingle",
        ]
    )


def _on_shutdown(**kwargs: Any) -> None:
    _STOPPING.set()


signals.worker_shutting_down.connect(_on_shutdown)


def _advance(self: Any, task_id: str, expected: int, attempt: int = 0, after: str = "") -> str:
    """The Celery task: one message, one :class:`Outcome`; its kind is the result."""
    advancer = _SERVING.get("advancer")
    if advancer is None:
        raise RuntimeError("skillstate workers run through `skillstate worker` (workers.serve)")
    delivery = self.request.delivery_info or {}
    message = Message(
        task_id,
        int(expected),
        message_id=self.request.id or "",
        attempt=int(attempt),
        queue=delivery.get("routing_key") or DEFAULT_QUEUE,
        after=str(after or ""),
    )
    outcome = advancer.advance(message, lambda m, wait: enqueue(self.app, m, wait))
    _log(message, outcome)
    return outcome.kind


def _log(message: Message, outcome: Outcome) -> None:
    loud = {"dead_letter", "not_allowed", "rerouted"}  # rerouted: it waits for another worker
    level = logging.WARNING if outcome.kind in loud else logging.INFO
    log.log(
        level,
        "task %s (message v%s): %s after %d step(s), now v%s %s",
        message.task_id,
        message.expected,
        outcome.kind,
        outcome.steps,
        outcome.version,
        outcome.detail,
    )
