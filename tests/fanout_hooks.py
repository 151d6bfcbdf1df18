"""Stops a ``skillstate worker`` at a fan-out point, for a test to kill -9 it there.

A test starts workers with :data:`LAUNCHER` (``python -c ...``: this module is imported,
then the CLI runs as ``python -m skillstate`` would) and ``SKILLSTATE_TEST_BLOCK`` set
to ``POINT:AFTER:MARKER``: the first worker to reach hook ``POINT``
(:mod:`skillstate.fanout.hooks`: ``create``, before a child's creation; ``join``,
before the join's commit) for the ``AFTER + 1``-th time writes ``<pid> <task id>`` to
``MARKER`` (created exclusively: one worker blocks, ever) and blocks until it is
killed. The test waits for the marker (observed, not slept).
"""

from __future__ import annotations

import os
import time

from skillstate.fanout import hooks

LAUNCHER = (
    "-c",
    "import runpy, tests.fanout_hooks; runpy.run_module('skillstate', run_name='__main__', "
    "alter_sys=True)",
)
ENV = "SKILLSTATE_TEST_BLOCK"


def _install(spec: str) -> None:
    point, after, marker = spec.split(":", 2)
    seen = [0]

    def block(task_id: str) -> None:
        seen[0] += 1
        if seen[0] <= int(after):
            return
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # another worker blocked already: carry on
        os.write(fd, f"{os.getpid()} {task_id}\n".encode())
        os.close(fd)
        while True:  # the test kills this process here
            time.sleep(1)

    hooks.HOOKS[point].append(block)


if os.environ.get(ENV):
    _install(os.environ[ENV])
