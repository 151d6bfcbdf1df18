"""Tasks on a queue: throughput of 1, 2 and 4 worker processes, and what they add per step.

    python benchmarks/workers.py [--quick] [--rounds N] [--markdown PATH]
        [--store postgresql://postgres@127.0.0.1:5432/test] [--broker amqp://guest:guest@127.0.0.1:5672//]

Two agents; every throughput measurement gets a fresh Postgres schema of its own (all
dropped at the end), so none reads a table the others have grown:

* **ledger** (``skillstate.examples.ledger``): every step appends one keyed line to a
  file under ``flock`` and ``fsync`` (an effect: intent commit, append, verify,
  settle commit). Throughput table: one process (a loop of ``Runtime.run`` over the
  tasks, as a ``skillstate run`` per task does it without a process start per task:
  the baseline) against N ``skillstate worker`` processes (1, 2, 4; solo pool),
  started, ready and warm (each fleet first runs 3N tasks of its own: the
  baseline's process is warm too) before the clock starts; all tasks are enqueued at
  once and the clock stops at the last task's completing commit (the store's
  ``updated_at``, the same host's clock). Target (issue 30): 4 workers >= 1.8x the
  baseline on 100 tasks on a quiet 2-core machine (issue 14's 1.5x is printed too).
  The baseline and 4 workers are measured side by side in ``--rounds`` interleaved
  rounds (the order flips every round); the target uses the median of the per-round
  ratios. CPU seconds of the runner, PostgreSQL and RabbitMQ (``/proc``) are added up
  over the rounds: CPU per task bounds what 4 workers can reach on 2 idle cores,
  whatever else shares the machine during the run (printed as a ceiling). The load
  average (``os.getloadavg``) is printed at the start and at the end: on a machine
  shared with other work the ratio says little about the quiet one.
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
  (message delivery and ack, judging the message: lease and head reads, claim, a
  head read under the lease, release), amortized over a task's decisions; on a
  machine with few cores it also includes the worker competing with the broker and
  the database for them.
* **judging one message** (in this process): a message for a task another worker
  holds, read and dropped (one lease read): p50 and p99.
* the ledger's **effect step**, timed the same way (intent commit, synced append,
  verify, settle commit), for comparison.

The poll that waits for the tasks to complete (``Store.heads``) sleeps ten times as
long as its last read took (at least 250 ms), so that on a small machine it does not
take the workers' CPU; it does not stop the clock, the last commit's time does.
Targets are printed as PASS/FAIL, not asserted.
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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # benchmarks.proc_cpu, when run as a script

from benchmarks.proc_cpu import Cpu  # noqa: E402

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


def _baseline(store: Store, agent: Agent[Any], ids: list[str], cpu: Cpu | None = None) -> float:
    runtime = Runtime(agent, store)
    if cpu is not None:
        cpu.start()
    began = time.perf_counter()
    for task in ids:
        assert runtime.run(task).stopped == "completed"
    seconds = time.perf_counter() - began
    if cpu is not None:
        cpu.stop()
    return seconds


def _workers(
    n: int,
    store_url: str,
    broker: str,
    ids: list[str],
    logs: Path,
    *,
    warm: tuple[str, ...] = (),
    cpu: Cpu | None = None,
) -> float:
    """Seconds from enqueueing ``ids`` to the last one's completing commit, ``n`` workers
    (their CPU, and the services', into ``cpu``: from the enqueue to the end), once they
    have run the ``warm`` tasks."""
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
        for task in warm:  # first messages pay for connections, prepared statements...
            enqueue(app, Message(task, 1, queue=queue))
        _wait_completed(store, list(warm))
        if cpu is not None:
            cpu.start([proc.pid for proc in procs])
        began = time.time()  # wall clock: the end is the store's commit time
        for task in ids:
            enqueue(app, Message(task, 1, queue=queue))
        last = _wait_completed(store, ids).timestamp()
        if cpu is not None:
            cpu.stop()
        return last - began
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
        app.close()
        store.close()


def _wait_completed(store: Store, ids: list[str]) -> datetime:
    """Until the store says every task in ``ids`` is completed; when the last one was.

    ``heads()`` reads every task of the store (a few ms for a hundred on Postgres):
    polling it back to back would take a core from the workers. The time returned is
    the last completing commit's, so how late this poll notices does not count."""
    remaining = set(ids)
    last = datetime.min.replace(tzinfo=timezone.utc)
    while True:
        began = time.perf_counter()
        for head in store.heads():
            if head.status == "completed" and head.task_id in remaining:
                remaining.discard(head.task_id)
                last = max(last, head.updated_at or datetime.now(timezone.utc))
        if not remaining:
            return last
        time.sleep(max(0.25, 10 * (time.perf_counter() - began)))


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
    """One run: its stores (a fresh schema per measurement), its broker, its sizes."""

    def __init__(self, store_url: str, broker: str, tasks: int, steps: int, tmp: Path) -> None:
        self.base_url, self.broker, self.tasks, self.steps, self.tmp = (
            store_url, broker, tasks, steps, tmp
        )  # fmt: skip
        self.run_id = uuid.uuid4().hex[:8]
        self.schemas: list[str] = []
        self.store_url, self.store = self.fresh("main")

    def fresh(self, name: str) -> tuple[str, Store]:
        """A store in a schema of its own (Postgres; other stores are shared)."""
        if not self.base_url.startswith("postgres"):
            return self.base_url, open_store(self.base_url)
        schema = f"bench_workers_{self.run_id}_{name}"
        self.schemas.append(schema)
        sep = "&" if "?" in self.base_url else "?"
        url = f"{self.base_url}{sep}schema={schema}"
        return url, open_store(url)

    def ledger_tasks(
        self, prefix: str, n: int | None = None, store: Store | None = None
    ) -> list[str]:
        path = str(self.tmp / f"{prefix}.txt")
        return _create(
            store or self.store,
            ledger.agent,
            prefix,
            n or self.tasks,
            ledger=path,
            target=self.steps,
        )

    def counter_tasks(
        self, prefix: str, n: int | None = None, store: Store | None = None
    ) -> list[str]:
        return _create(store or self.store, counter, prefix, n or self.tasks, target=self.steps)

    def baseline(
        self, prefix: str, agent: Agent[Any] = ledger.agent, cpu: Cpu | None = None
    ) -> float:
        """The one-process loop over fresh tasks in a schema of their own."""
        _, store = self.fresh(prefix)
        try:
            make = self.ledger_tasks if agent is ledger.agent else self.counter_tasks
            return _baseline(store, agent, make(prefix, store=store), cpu)
        finally:
            store.close()

    def workers(
        self, n: int, prefix: str, agent: Agent[Any] = ledger.agent, cpu: Cpu | None = None
    ) -> float:
        """``n`` worker processes over fresh tasks in a schema of their own."""
        url, store = self.fresh(prefix)
        try:
            make = self.ledger_tasks if agent is ledger.agent else self.counter_tasks
            ids = make(prefix, store=store)
            warm = tuple(make(f"{prefix}warm", 3 * n, store=store))
        finally:
            store.close()
        return _workers(n, url, self.broker, ids, self.tmp, warm=warm, cpu=cpu)

    def drop(self) -> None:
        self.store.close()
        if not self.schemas:
            return
        import psycopg

        with psycopg.connect(self.base_url, autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _run(bench: Bench, counts: tuple[int, ...], rounds: int) -> dict[str, Any]:
    most = max(counts)
    cpus = {"one process": Cpu(), f"{most} workers": Cpu()}
    base = bench.baseline("base0", cpu=cpus["one process"])
    rows = [("one process (Runtime.run loop)", base)]
    for n in counts:
        name = f"{n} worker process{'es' if n > 1 else ''}"
        cpu = cpus[f"{most} workers"] if n == most else None
        rows.append((name, bench.workers(n, f"w{n}r0", cpu=cpu)))
    pairs = [(base, rows[-1][1])]  # round 0: the table's own figures
    for r in range(1, rounds):
        # Side by side, the order flipped every round: a trend in the machine's load
        # (another job starting, a compile ending) falls on both sides alike.
        base_cpu, most_cpu = cpus["one process"], cpus[f"{most} workers"]
        if r % 2:
            most_s = bench.workers(most, f"w{most}r{r}", cpu=most_cpu)
            base_s = bench.baseline(f"base{r}", cpu=base_cpu)
        else:
            base_s = bench.baseline(f"base{r}", cpu=base_cpu)
            most_s = bench.workers(most, f"w{most}r{r}", cpu=most_cpu)
        pairs.append((base_s, most_s))
    counter_base = bench.baseline("cbase", counter)
    counter_worker = bench.workers(1, "cw1", counter)
    sample = max(20, bench.tasks // 5)
    return {
        "rows": rows,
        "pairs": pairs,
        "most": most,
        "cpu": {name: cpu.spent for name, cpu in cpus.items()},
        "counter": (counter_base, counter_worker),
        "engine": _per_step(bench.store, counter, bench.counter_tasks("lat", sample)),
        "effect": _per_step(bench.store, ledger.agent, bench.ledger_tasks("eff")[:sample]),
        "judging": _judging(bench.store, bench.counter_tasks("judge", sample)),
    }


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min)"


def _report(found: dict[str, Any], args: argparse.Namespace, tasks: int, steps: int) -> str:
    decisions = steps + 1  # the Finish decision is a step too
    rows = found["rows"]
    base = rows[0][1]
    lines = [
        f"{tasks} ledger tasks x {steps} effects ({decisions} decisions each), store "
        f"{args.store.split('@')[-1]}, broker {args.broker.split('@')[-1]}, {os.cpu_count()} CPUs",
        f"load average at the start: {found['load_start']}; at the end: {found['load_end']}",
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
    most = found["most"]
    pairs = found["pairs"]
    done = tasks * len(pairs)  # ledger tasks per side over every round
    totals = {}
    for name, spent in found["cpu"].items():
        totals[name] = sum(spent.values()) / done
        parts = ", ".join(f"{key} {value / done * 1e3:.1f}" for key, value in spent.items())
        lines.append(
            f"CPU per ledger task, {name} (all rounds): {totals[name] * 1e3:.1f} ms ({parts}; "
            f"services: every client's, so an upper bound on a shared machine)"
        )
    base_wall = sum(b for b, _ in pairs) / done
    cores = min(most, os.cpu_count() or 1)
    ceiling = cores * base_wall / totals[f"{most} workers"]
    busy = totals["one process"] / base_wall
    lines.append(
        f"one process: {base_wall * 1e3:.1f} ms per task, busy {busy:.0%} of it; {most} "
        f"workers on {cores} idle cores could at best reach {cores} x {base_wall * 1e3:.1f} / "
        f"{totals[f'{most} workers'] * 1e3:.1f} ms = {ceiling:.2f}x (CPU per task bounds them)"
    )
    ratios = [b / w for b, w in pairs]
    each = ", ".join(f"{b:.2f}/{w:.2f} s = {b / w:.2f}x" for b, w in pairs)
    median = statistics.median(ratios)
    lines.append(
        f"{most} workers vs one process (ledger), {len(ratios)} interleaved round(s): {each}; "
        f"median {median:.2f}x"
    )
    if not args.quick:
        for target in (1.8, 1.5):
            verdict = "PASS" if median >= target else "FAIL"
            note = "issue 30, on a quiet machine" if target == 1.8 else "issue 14"
            lines.append(
                f"{most} workers >= {target}x one process ({note}): {median:.2f}x [{verdict}]"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 tasks of 3 steps, 1 and 2 workers")
    parser.add_argument(
        "--rounds", type=int, help="rounds of one process vs the most workers (default 3; quick 1)"
    )
    parser.add_argument("--markdown", type=Path, help="write the report to this file")
    parser.add_argument("--store", default=os.environ.get("SKILLSTATE_BENCH_STORE", PG))
    parser.add_argument("--broker", default=os.environ.get("SKILLSTATE_BENCH_BROKER", AMQP))
    args = parser.parse_args()
    tasks, steps = (12, 3) if args.quick else (100, 5)
    counts = (1, 2) if args.quick else (1, 2, 4)
    rounds = max(1, args.rounds or (1 if args.quick else 3))
    load_start = _load()
    print(f"load average at the start: {load_start}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="skillstate-bench-"))
    bench = Bench(args.store, args.broker, tasks, steps, tmp)
    try:
        found = _run(bench, counts, rounds)
    finally:
        bench.drop()
    found["load_start"], found["load_end"] = load_start, _load()
    text = _report(found, args, tasks, steps)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
