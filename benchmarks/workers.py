"""Tasks on a queue: throughput of 1, 2 and 4 worker processes, and what they add per step.

    python benchmarks/workers.py [--quick] [--markdown PATH]
        [--store postgresql://postgres@127.0.0.1:5432/test] [--broker amqp://guest:guest@127.0.0.1:5672//]

Two agents, each task created in a fresh Postgres schema (dropped at the end):

* **ledger** (``skillstate.examples.ledger``): every step appends one keyed line to a
  file under ``flock`` and ``fsync`` (an effect: intent commit, append, verify,
  settle commit). Throughput table: one process (a loop of ``Runtime.run`` over the
  tasks, as a ``skillstate run`` per task does it without a process start per task:
  the baseline) against N ``skillstate worker`` processes (1, 2, 4; solo pool),
  started and ready before the clock starts; all tasks are enqueued at once and the
  clock stops when the store says every task is completed. Target: 4 workers >=
  1.5x the baseline on 100 tasks.
* **counter** (``benchmarks.workers:counter``): a trivial skill, no effect: ``tick``
  adds one to ``counter`` and its verifier checks ``counter == before + 1`` (a real
  check), until ``target``; then ``Finish``. Nearly everything a step costs here is
  the engine's.

Per-step figures, and how they are measured:

* **engine per step** (target p50 <= 5 ms): counter tasks run in this process by
  ``Runtime.run(task)``, as a worker's slice runs them; each decision timed from the
  end of the one before (the first from the call: lease claim, head read, recheck)
  to its commit (taken by the runtime's observer): load the head, view, decide,
  validate, run, verify, diff, one compare-and-set commit, lease renewal. p50 and
  p99 over every decision.
* **worker adds per step**: the same counter tasks through one worker process
  against the one-process loop over them: (worker seconds per task - loop seconds
  per task) / decisions per task. This is what the queue costs on top of the engine
  (message delivery and ack, judging the message: head and lease reads, claim,
  release), amortized over a task's decisions; on a machine with few cores it also
  includes the worker competing with the broker and the database for them.
* **judging one message** (in this process): a message for a task another worker
  holds, read and dropped (head and lease reads): p50 and p99.
* the ledger's **effect step**, timed the same way (intent commit, synced append,
  verify, settle commit), for comparison.

The clock-stopping poll (``Store.heads``) sleeps four times as long as its last
read took, so that on a small machine it does not take the workers' CPU. Targets are
printed as PASS/FAIL, not asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from skillstate import (  # noqa: E402
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.engine.actions import Action  # noqa: E402
from skillstate.examples import ledger  # noqa: E402
from skillstate.store import open_store  # noqa: E402
from skillstate.store.base import Store  # noqa: E402
from skillstate.workers import Advancer, Message, WorkerSettings  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/test"
AMQP = "amqp://guest:guest@127.0.0.1:5672//"
COUNTER = "benchmarks.workers:counter"


class CounterState(AgentState):
    """A counter that goes up by one per step until ``target``."""

    counter: int = 0
    target: int = 5


_skills = SkillRegistry()


@_skills.skill(step="counting", outputs=["counter"])
def tick(state: CounterState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Add one to the counter."""
    return Outcome(writes={"counter": state.counter + 1})


@tick.verifier
def _one_more(state: CounterState, outcome: Outcome, ctx: Any) -> Verdict:
    if state.counter != ctx.before.counter + 1 or state.counter > state.target:
        return Verdict.failed(f"counter {state.counter} after {ctx.before.counter}")
    return Verdict.passed()


def _count(view: View[CounterState]) -> Action:
    if view.state.counter < view.state.target:
        return CallSkill(skill="tick", reason="not there yet")
    return Finish(summary=f"counted to {view.state.target}")


counter = Agent(
    name="counter",
    description="A trivial skill (no effect, a real verify): the engine's own cost per step.",
    state_type=CounterState,
    machine=StateMachine(
        {"init": ["counting", "done"], "counting": ["counting", "done"], "done": []},
        initial="init",
    ),
    skills=_skills,
    policy=ScriptedPolicy(_count),
    ref=COUNTER,  # the workers import it by this name (this file may run as __main__)
)


def _create(store: Store, agent: Agent[Any], prefix: str, n: int, **fields: Any) -> list[str]:
    runtime = Runtime(agent, store)
    ids = [f"{prefix}-{i:03d}" for i in range(n)]
    for task in ids:
        runtime.start(task, **fields)
    return ids


def _baseline(store: Store, agent: Agent[Any], ids: list[str]) -> float:
    runtime = Runtime(agent, store)
    began = time.perf_counter()
    for task in ids:
        assert runtime.run(task).stopped == "completed"
    return time.perf_counter() - began


def _workers(n: int, store_url: str, broker: str, ids: list[str], logs: Path) -> float:
    from skillstate.workers.celery_app import enqueue, make_app

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    procs = []
    for i in range(n):
        log = logs / f"{queue}-{i}.log"
        command = [sys.executable, "-m", "skillstate", "worker", "--broker", broker,
                   "--store", store_url, "--queues", queue, "--agent", COUNTER,
                   "--loglevel", "WARNING"]  # fmt: skip
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT))
    store = open_store(store_url)
    app = make_app(broker)
    try:
        _wait_ready(app, n)
        began = time.perf_counter()
        for task in ids:
            enqueue(app, Message(task, 1, queue=queue))
        _wait_completed(store, ids)
        return time.perf_counter() - began
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
        app.close()
        store.close()


def _wait_completed(store: Store, ids: list[str]) -> None:
    """Until the store says every task in ``ids`` is completed.

    ``heads()`` reads every task of the store (tens of ms for a few hundred on
    Postgres): polling it back to back would take a core from the workers."""
    remaining = set(ids)
    while True:
        began = time.perf_counter()
        remaining -= {h.task_id for h in store.heads() if h.status == "completed"}
        if not remaining:
            return
        time.sleep(max(0.01, 4 * (time.perf_counter() - began)))


def _wait_ready(app: Any, n: int) -> None:
    """Until n workers answer a ping (their consumers are up), 120 s at most."""
    end = time.monotonic() + 120
    while time.monotonic() < end:
        if len(app.control.ping(timeout=1.0) or []) >= n:
            return
    raise SystemExit(f"{n} workers did not come up in 120 s")


def _per_step(store: Store, agent: Agent[Any], ids: list[str]) -> list[float]:
    """Seconds per decision inside ``Runtime.run(task)``, over every decision of ``ids``.

    A decision ends with its last commit (an effect commits its intent, then its
    outcome); it starts where the one before ended, the first at the call, so the
    lease claim, head read and recheck of the call fall on the first decision."""
    marks: list[tuple[str | None, float]] = []
    runtime = Runtime(
        agent, store, observer=lambda r: marks.append((r.event.step_id, time.perf_counter()))
    )
    steps: list[float] = []
    for task in ids:
        marks.clear()
        began = time.perf_counter()
        assert runtime.run(task).stopped == "completed"
        ends = dict(marks)  # the last commit of each decision
        for end in sorted(ends.values()):
            steps.append(end - began)
            began = end
    return steps


def _judging(store: Store, ids: list[str]) -> list[float]:
    """Seconds to judge and drop a message for a task another worker holds."""
    advancer = Advancer(store, WorkerSettings(store_url=store.url))
    dispatch: list[float] = []
    for task in ids:
        store.claim(task, "other@elsewhere:1", 30)
        began = time.perf_counter()
        assert advancer.advance(Message(task, 1, "m"), lambda m, w: None).kind == "held"
        dispatch.append(time.perf_counter() - began)
        store.release(task, "other@elsewhere:1")
    return dispatch


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1e3:.2f} ms, p99 {_pct(values, 0.99) * 1e3:.2f} ms"


class Bench:
    """One run: its store (a fresh schema), its broker, its sizes."""

    def __init__(self, store_url: str, broker: str, tasks: int, steps: int, tmp: Path) -> None:
        self.store_url, self.broker, self.tasks, self.steps, self.tmp = (
            store_url, broker, tasks, steps, tmp
        )  # fmt: skip
        self.store = open_store(store_url)

    def ledger_tasks(self, prefix: str) -> list[str]:
        path = str(self.tmp / f"{prefix}.txt")
        return _create(self.store, ledger.agent, prefix, self.tasks, ledger=path, target=self.steps)

    def counter_tasks(self, prefix: str, n: int | None = None) -> list[str]:
        return _create(self.store, counter, prefix, n or self.tasks, target=self.steps)

    def workers(self, n: int, ids: list[str]) -> float:
        return _workers(n, self.store_url, self.broker, ids, self.tmp)


def _run(bench: Bench, counts: tuple[int, ...]) -> dict[str, Any]:
    base = _baseline(bench.store, ledger.agent, bench.ledger_tasks("base"))
    rows = [("one process (Runtime.run loop)", base)]
    for n in counts:
        name = f"{n} worker process{'es' if n > 1 else ''}"
        rows.append((name, bench.workers(n, bench.ledger_tasks(f"w{n}"))))
    counter_base = _baseline(bench.store, counter, bench.counter_tasks("cbase"))
    counter_worker = bench.workers(1, bench.counter_tasks("cw1"))
    sample = max(20, bench.tasks // 5)
    return {
        "rows": rows,
        "counter": (counter_base, counter_worker),
        "engine": _per_step(bench.store, counter, bench.counter_tasks("lat", sample)),
        "effect": _per_step(bench.store, ledger.agent, bench.ledger_tasks("eff")[:sample]),
        "judging": _judging(bench.store, bench.counter_tasks("judge", sample)),
    }


def _report(found: dict[str, Any], args: argparse.Namespace, tasks: int, steps: int) -> str:
    decisions = steps + 1  # the Finish decision is a step too
    rows = found["rows"]
    base = rows[0][1]
    lines = [
        f"{tasks} ledger tasks x {steps} effects ({decisions} decisions each), store "
        f"{args.store.split('@')[-1]}, broker {args.broker.split('@')[-1]}, {os.cpu_count()} CPUs",
        "",
        "| runner | seconds | tasks/s | steps/s | vs one process |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, seconds in rows:
        lines.append(
            f"| {name} | {seconds:.2f} | {tasks / seconds:.1f} | {tasks * decisions / seconds:.0f} "
            f"| {base / seconds:.2f}x |"
        )
    counter_base, counter_worker = found["counter"]
    added = (counter_worker - counter_base) / tasks / decisions * 1e3
    engine = found["engine"]
    p50 = statistics.median(engine) * 1e3
    lines += [
        "",
        f"counter tasks ({tasks} x {decisions} decisions, trivial skill): one process "
        f"{counter_base:.2f} s, 1 worker process {counter_worker:.2f} s",
        f"engine per step, trivial skill (each decision of Runtime.run, n={len(engine)}): "
        f"{_ms(engine)} [{'PASS' if p50 <= 5 else 'FAIL'}: p50 <= 5 ms]",
        f"worker adds per step ((1 worker - one process) / task / decision, counter): "
        f"{added:.2f} ms",
        f"judging one message (n={len(found['judging'])}): {_ms(found['judging'])}",
        f"ledger effect step for comparison (two commits and a synced append, "
        f"n={len(found['effect'])}): {_ms(found['effect'])}",
    ]
    if not args.quick:
        speedup = base / rows[-1][1]
        verdict = "PASS" if speedup >= 1.5 else "FAIL"
        lines.append(f"4 workers vs one process (ledger): {speedup:.2f}x [{verdict}: >= 1.5x]")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 tasks of 3 steps, 1 and 2 workers")
    parser.add_argument("--markdown", type=Path, help="write the report to this file")
    parser.add_argument("--store", default=os.environ.get("SKILLSTATE_BENCH_STORE", PG))
    parser.add_argument("--broker", default=os.environ.get("SKILLSTATE_BENCH_BROKER", AMQP))
    args = parser.parse_args()
    tasks, steps = (12, 3) if args.quick else (100, 5)
    counts = (1, 2) if args.quick else (1, 2, 4)
    schema = f"bench_workers_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in args.store else "?"
    store_url = (
        f"{args.store}{sep}schema={schema}" if args.store.startswith("postgres") else args.store
    )
    bench = Bench(
        store_url, args.broker, tasks, steps, Path(tempfile.mkdtemp(prefix="skillstate-bench-"))
    )
    try:
        found = _run(bench, counts)
    finally:
        bench.store.close()
        if args.store.startswith("postgres"):
            import psycopg

            with psycopg.connect(args.store, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    text = _report(found, args, tasks, steps)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
