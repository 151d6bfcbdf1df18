"""What evaluating the alert rules costs, and what it costs the task list.

On a SQLite file with ``--tasks`` tasks (a quarter completed, the rest running,
waiting on a person, failed with a dead letter, or with failed attempts), times:

1. ``evaluate`` over the whole store (what ``skillstate alerts`` and ``/metrics`` do):
   one ``heads()`` read, then the head card of every task not completed;
2. ``heads()`` alone, the baseline the task list already pays;
3. the task list's badges: ``evaluate`` over one page of 50 heads.

Best of ``--runs``; prints the times, the ratio to ``heads()`` and the alerts found.

    .venv/bin/python benchmarks/alerts.py           # --tasks 2000 --runs 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skillstate.events import Event
from skillstate.ops.alerts import evaluate
from skillstate.ops.rules import AlertRules
from skillstate.store.sqlite import SQLiteStore

KINDS: list[dict[str, Any]] = [
    {"status": "completed"},
    {"status": "running"},
    {"status": "waiting_user"},
    {"status": "failed", "errors": [{"kind": "dead_letter", "message": "dead letter: x"}]},
    {"errors": [{"kind": "skill_error", "message": "x", "step_id": "s1"}] * 5},
]


def fill(store: SQLiteStore, tasks: int) -> None:
    for n in range(tasks):
        task_id = f"t{n:06d}"
        fields = {"status": "running", "current_step": "work", **KINDS[n % len(KINDS)]}
        card = {"task_id": task_id, "version": 1, "facts": {"n": n}, **fields}
        event = Event(task_id=task_id, version=1, actor="runtime", action={"kind": "bench"})
        store.commit(task_id, 0, card, event)


def best(runs: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rules = AlertRules(stale_after=1, waiting_after=1, max_retries=3)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "state.db")
        fill(store, args.tasks)
        heads_s, heads = best(args.runs, store.heads)
        full_s, firing = best(args.runs, lambda: evaluate(store, rules))
        page = heads[:50]
        page_s, _ = best(args.runs, lambda: evaluate(store, rules, heads=page))
        store.close()
    counts = Counter(a.rule for a in firing)
    print(f"tasks: {args.tasks}, best of {args.runs}")
    print(f"heads() alone:           {heads_s * 1000:8.1f} ms")
    ratio = full_s / heads_s
    print(f"evaluate, whole store:   {full_s * 1000:8.1f} ms  ({ratio:.1f}x heads())")
    print(f"evaluate, one page (50): {page_s * 1000:8.1f} ms")
    print(f"alerts found: {len(firing)} {dict(sorted(counts.items()))}")


if __name__ == "__main__":
    main()
