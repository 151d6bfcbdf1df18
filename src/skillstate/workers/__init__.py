"""Many workers, many machines: skillstate tasks advanced from a Celery queue.

One message means "advance task T": a worker claims T's lease, runs steps until the
task stops or a fair slice is spent (then enqueues T again), and acknowledges the
message only afterwards. The store stays the only truth: a message carries T's id
and the version its sender saw (a slice's continuation also names the lease holder
that sent it, which hands the task over), so a duplicate or a stale one is recognised and
dropped, and a task whose worker was killed is resumed from its last commit through
the exactly-once effect machinery.

* :mod:`~skillstate.workers.settings`: the worker's options, the message.
* :mod:`~skillstate.workers.advance`: judging a message, running a slice (no Celery).
* :mod:`~skillstate.workers.crashes`: the crash count and the dead letter.
* :mod:`~skillstate.workers.sweep`: finding stranded tasks and sending them a message.
* :mod:`~skillstate.workers.celery_app`: the Celery app, task and sending (needs
  ``pip install 'skillstate[celery]'``; imported only from there).
* :mod:`~skillstate.workers.beat`: Celery beat over the store's schedules
  (``skillstate beat``; see :mod:`skillstate.control.schedules`).
"""

from __future__ import annotations

from skillstate.workers.advance import Advancer, Outcome, worker_name
from skillstate.workers.crashes import dead_lettered, reopen
from skillstate.workers.settings import DEFAULT_QUEUE, Message, WorkerSettings, broker_url

__all__ = [
    "DEFAULT_QUEUE",
    "Advancer",
    "Message",
    "Outcome",
    "WorkerSettings",
    "broker_url",
    "dead_lettered",
    "reopen",
    "worker_name",
]
