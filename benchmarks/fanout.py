"""Fan-out on workers: N child tasks across W workers against the same work in one task.

    python benchmarks/fanout.py [--quick] [--children 100] [--workers 4] [--delay 0.2]
        [--parts 1] [--markdown PATH]
        [--store postgresql://postgres@127.0.0.1:5432/test] [--broker amqp://guest:guest@127.0.0.1:5672//]

The work is **I/O-bound**: each part of an item is one ``fetch`` step that waits
``--delay`` seconds on a simulated remote call (a sleep standing in for an HTTP
request or a hosted model's answer) and appends one keyed line, ``item N part P``,
to a ledger file (an effect: exactly once, :mod:`skillstate.effects.files`). This is
what fan-out on workers is for on this 2-core machine: W workers overlap W waits.
CPU-bound children would not run faster on 4 workers than on one here.

Measured side by side in one run, in one store (a fresh Postgres schema, dropped at
the end), with the same ``fetch`` skill:

* **sequential**: one task (``benchmarks.fanout:serial``) calls ``fetch`` once per
  item and part, run in this process by ``Runtime.run``: no broker, no worker, the
  baseline;
* **fan-out**: one parent (``benchmarks.fanout:parent``) decides one ``Map`` over the
  items: N child tasks (``benchmarks.fanout:item``, ``fetch`` per part, then finish),
  each a task of its own on any of W ``skillstate worker`` processes (solo pool,
  started and answering a ping before the clock starts); the parent's join skill
  ``report`` then writes one ``join`` line. The clock runs from the parent's first
  message until the store says the parent is completed.

Printed: seconds of each, the ratio sequential / fan-out, tasks completed (children
and parent), duplicated ledger lines, ``join`` events in the parent's log and join
lines in its ledger. It exits 1 unless every task completed once with no duplicate
and one join. :func:`run_fanout` and :func:`tally` are what
``tests/test_fanout_workers.py`` runs, with kill -9 of workers mid-child.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

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
from skillstate.effects import files  # noqa: E402
from skillstate.engine.actions import Action, Map  # noqa: E402
from skillstate.fanout import Child  # noqa: E402
from skillstate.store import open_store  # noqa: E402
from skillstate.store.base import Store  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/test"
AMQP = "amqp://guest:guest@127.0.0.1:5672//"
PARENT, ITEM, SERIAL = (f"benchmarks.fanout:{name}" for name in ("parent", "item", "serial"))
AGENTS = (PARENT, ITEM)
"""What a worker is started with (``--agent``): the parent and its child kind."""


class WorkState(AgentState):
    """Where the lines go, how long a remote call takes, how many parts are fetched."""

    ledger: str = ""
    delay: float = Field(default=0.2, ge=0)
    """Seconds one simulated remote call waits."""
    parts: int = Field(default=1, ge=1)
    """``fetch`` steps per item."""
    done: int = 0
    """Parts fetched and recorded (verified)."""

    def last_line(self) -> str:
        """The ledger line of the last part counted in ``done``."""
        raise NotImplementedError


class ItemState(WorkState):
    n: int = 0
    """The item this child fetches."""

    def last_line(self) -> str:
        return line_of(self.n, self.done)


class SerialState(WorkState):
    items: int = Field(default=10, ge=1)
    """Items this one task fetches, one after another."""

    def last_line(self) -> str:
        n, part = divmod(self.done - 1, self.parts)
        return line_of(n, part + 1)


class ParentState(WorkState):
    items: int = Field(default=10, ge=1)
    """Children the parent maps ``fetch`` over, one per item."""
    report: str = ""
    """What the join skill recorded."""


class ItemResult(BaseModel):
    """What the join takes from each child."""

    n: int
    done: int


class Part(BaseModel):
    n: int = Field(ge=0, description="The item.")
    part: int = Field(ge=1, description="The part of the item (1-based).")


machine = StateMachine(
    {
        "init": ["working", "reporting", "done"],
        "working": ["working", "done"],
        "reporting": ["done"],
        "done": [],
    },
    initial="init",
)
work = SkillRegistry()
"""``fetch``: the item's and the sequential task's skill."""
joining = SkillRegistry()
"""``report``: the parent's join skill."""


def line_of(n: int, part: int) -> str:
    return f"item {n} part {part}"


@work.skill(outputs=["done"], step="working", effects=True)
def fetch(state: WorkState, params: Part, ctx: SkillContext) -> Outcome:
    """Fetch one part of an item from a remote service and record it in the ledger."""
    assert ctx.idempotency_key is not None
    time.sleep(state.delay)  # the remote call: waiting, not computing
    files.append_once(state.ledger, line_of(params.n, params.part), ctx.idempotency_key)
    return _fetched(state)


def _fetched(state: WorkState) -> Outcome:
    # run and probe return the same outcome, so a resumed step commits the same state.
    return Outcome(writes={"done": state.done + 1}, summary=f"{state.done + 1} part(s) fetched")


@fetch.prober
def _fetch_recorded(state: WorkState, params: Part, ctx: SkillContext) -> Outcome | None:
    assert ctx.idempotency_key is not None
    return _fetched(state) if files.appended(state.ledger, ctx.idempotency_key) else None


@fetch.verifier
def _fetch_in_ledger(state: WorkState, outcome: Outcome) -> Verdict:
    """The part just counted is in the ledger (read from the file, not trusted)."""
    line = state.last_line()
    if any(found == line for _, found in files.entries(state.ledger)):
        return Verdict.passed()
    return Verdict.failed(f"{line!r} is not in the ledger")


@joining.skill(outputs=["report"], step="reporting", effects=True)
def report(state: ParentState, params: NoParams, ctx: SkillContext) -> Outcome:
    """The join: one line with how the children ended."""
    assert ctx.idempotency_key is not None
    text = _report_text(state)
    files.append_once(state.ledger, f"join {text}", ctx.idempotency_key)
    return Outcome(writes={"report": text}, summary=text)


def _report_text(state: ParentState) -> str:
    done = sum(child.status == "completed" for child in state.children)
    fetched = sum(int((child.outputs or {}).get("done", 0)) for child in state.children)
    return f"{done}/{len(state.children)} children completed, {fetched} part(s) fetched"


@report.verifier
def _report_in_ledger(state: ParentState, outcome: Outcome) -> Verdict:
    line = f"join {state.report}"
    if any(found == line for _, found in files.entries(state.ledger)):
        return Verdict.passed()
    return Verdict.failed(f"{line!r} is not in the ledger")


@report.prober
def _report_recorded(state: ParentState, params: NoParams, ctx: SkillContext) -> Outcome | None:
    assert ctx.idempotency_key is not None
    if not files.appended(state.ledger, ctx.idempotency_key):
        return None
    text = _report_text(state)
    return Outcome(writes={"report": text}, summary=text)


def _item(view: View[ItemState]) -> Action:
    state = view.state
    if state.done < state.parts:
        params = {"n": state.n, "part": state.done + 1}
        return CallSkill(skill="fetch", params=params, reason="the next part")
    return Finish(summary=f"item {state.n}: {state.done} part(s)")


def _serial(view: View[SerialState]) -> Action:
    state = view.state
    if state.done < state.items * state.parts:
        n, part = divmod(state.done, state.parts)
        params = {"n": n, "part": part + 1}
        return CallSkill(skill="fetch", params=params, reason="the next part")
    return Finish(summary=f"{state.items} item(s) fetched")


def _parent(view: View[ParentState]) -> Action:
    state = view.state
    if not state.children:
        fields = {"ledger": state.ledger, "delay": state.delay, "parts": state.parts}
        over = [{**fields, "n": n} for n in range(state.items)]
        return Map(child="item", over=over, reason="one child per item, in parallel")
    if not state.report:
        return CallSkill(skill="report", reason="every child ended: the join")
    return Finish(summary=state.report)


item = Agent(
    name="fanout-item",
    description="Fetches one item (a simulated remote call per part), then finishes.",
    state_type=ItemState,
    machine=machine,
    skills=work,
    policy=ScriptedPolicy(_item),
    ref=ITEM,  # the workers import it by this name (this file may run as __main__)
)
serial = Agent(
    name="fanout-serial",
    description="Fetches every item itself, one after another: the baseline.",
    state_type=SerialState,
    machine=machine,
    skills=work,
    policy=ScriptedPolicy(_serial),
    ref=SERIAL,
)
parent = Agent(
    name="fanout-parent",
    description="Maps fetch over the items as child tasks, then joins them in one report.",
    state_type=ParentState,
    machine=machine,
    skills=joining,
    policy=ScriptedPolicy(_parent),
    children={"item": Child(item, outputs=ItemResult)},
    ref=PARENT,
)


# ------------------------------------------------------------------ counting


@dataclass
class Tally:
    """What a fan-out run left in the store and the ledger."""

    children: int = 0
    completed: int = 0
    """Children ``completed`` with every part's line in the ledger."""
    parent: str | None = None
    """The parent's status."""
    duplicated: int = 0
    """Ledger lines written more than once (an effect run again), over all tasks."""
    joins: int = 0
    """``join`` events in the parent's log."""
    join_lines: int = 0
    """``join`` lines in the ledger (the join skill's effect)."""
    takeovers: int = 0
    """``worker_lost`` notes on the children and the parent: kills that landed mid-task."""

    def ok(self, expected: int) -> bool:
        return (
            self.children == expected
            and self.completed == expected
            and self.parent == "completed"
            and self.duplicated == 0
            and self.joins == 1
            and self.join_lines == 1
        )

    def line(self) -> str:
        return (
            f"tasks completed {self.completed + (self.parent == 'completed')}/{self.children + 1} "
            f"({self.completed} children, parent {self.parent}), duplicated lines "
            f"{self.duplicated}, join events {self.joins}, join lines {self.join_lines}, "
            f"worker deaths noted {self.takeovers}"
        )


def tally(store: Store, parent_id: str, ledger: str) -> Tally:
    """Count what the run did: each child's status and lines, the parent's joins."""
    found = Tally()
    lines = Counter(line for _, line in files.entries(ledger))
    found.duplicated = sum(times - 1 for times in lines.values() if times > 1)
    found.join_lines = sum(times for line, times in lines.items() if line.startswith("join "))
    head = Runtime(parent, store).load(parent_id)
    found.parent = head.status.value
    found.joins = sum(e.action.get("kind") == "join" for e in store.events(parent_id))
    found.takeovers = sum(e.kind == "worker_lost" for e in head.errors)
    runtime = Runtime(item, store)
    for record in head.children:
        found.children += 1
        child = runtime.load(record.task_id)
        found.takeovers += sum(e.kind == "worker_lost" for e in child.errors)
        assert isinstance(child, ItemState)
        want = [line_of(child.n, p) for p in range(1, child.parts + 1)]
        if child.status.value == "completed" and all(lines[w] == 1 for w in want):
            found.completed += 1
    return found


def phases(store: Store, parent_id: str, began: datetime) -> str:
    """Where a run's time went, read from the commits' times: the parent's spawn (its
    Map commit, the children's creations, their messages), the children's run (first
    fetch to last end), the wake (last child's end to the join's commit) and the join
    skill with the finish. Empty when the run did not get that far."""
    events = store.events(parent_id)
    joins = [e for e in events if e.action.get("kind") == "join"]
    head = Runtime(parent, store).load(parent_id)
    if not joins or not head.children or head.status.value != "completed":
        return ""
    created, started, ended = [], [], []
    for record in head.children:
        child = store.events(record.task_id)
        created.append(child[0].finished_at)
        started.append(min(e.started_at for e in child[1:]))
        ended.append(child[-1].finished_at)
    spans = [
        ("spawn", began, max(created)),
        ("children", min(started), max(ended)),
        ("wake", max(ended), joins[0].finished_at),
        ("join skill + finish", joins[0].finished_at, events[-1].finished_at),
    ]
    return ", ".join(f"{name} {(b - a).total_seconds():.2f} s" for name, a, b in spans)


# ------------------------------------------------------------------ workers


class Workers:
    """``skillstate worker`` processes on one queue: started, killed with SIGKILL, stopped."""

    def __init__(
        self,
        store_url: str,
        broker: str,
        queue: str,
        logs: Path,
        *extra: str,
        launcher: tuple[str, ...] = ("-m", "skillstate"),
    ) -> None:
        self.command = [
            sys.executable, *launcher, "worker", "--broker", broker,
            "--store", store_url, "--queues", queue, *extra,
        ]  # fmt: skip
        for ref in AGENTS:
            self.command += ["--agent", ref]
        self.queue = queue
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0
        self.kills = 0

    def start(self, n: int = 1) -> None:
        for _ in range(n):
            self.started += 1
            with open(self.logs / f"{self.queue}-w{self.started}.log", "wb") as out:
                self.procs.append(
                    subprocess.Popen(self.command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
                )

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def kill(self, pid: int | None = None) -> int:
        """SIGKILL the worker ``pid`` (a random live one when ``None``); returns its pid."""
        alive = self.alive()
        victim = next((p for p in alive if p.pid == pid), None) or random.choice(alive)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()  # reaped: its pid no longer answers, its lease is seen dead at once
        self.procs.remove(victim)
        self.kills += 1
        return victim.pid

    def wait_ready(self, app: Any, within: float = 120.0) -> None:
        """Until every live worker answers a ping (its consumer is up)."""
        names = [f"skillstate-{p.pid}@{socket.gethostname()}" for p in self.alive()]
        end = time.monotonic() + within
        while time.monotonic() < end:
            if len(app.control.ping(destination=names, timeout=1.0) or []) >= len(names):
                return
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"a worker exited at start:\n{self.log()[-3000:]}")
        raise RuntimeError(f"{len(names)} workers did not come up in {within:.0f} s")

    def log(self) -> str:
        found = sorted(self.logs.glob(f"{self.queue}-w*.log"))
        return "".join(p.read_text(errors="replace") for p in found)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class Run:
    """One fan-out run on workers."""

    store_url: str
    broker: str
    children: int = 10
    workers: int = 3
    parts: int = 1
    delay: float = 0.2
    extra: tuple[str, ...] = ("--loglevel", "WARNING")
    """More ``skillstate worker`` options (lease TTL, sweeper, log level)."""
    deadline: float = 300.0
    on_poll: Callable[[Store, Workers, str], None] | None = None
    """Called at each poll while the parent runs (the test's kill -9)."""
    launcher: tuple[str, ...] = ("-m", "skillstate")
    """How ``python`` starts a worker (a test imports its hooks first)."""


@dataclass
class Result:
    seconds: float
    parent_id: str
    ledger: str
    tally: Tally
    kills: int = 0
    log_tail: str = ""
    rescues: list[str] = field(default_factory=list)
    """Tasks the sweeper rescued (its WARNING lines ``rescued stranded task T``)."""
    phases: str = ""
    """Where the time went, from the commits' times (:func:`phases`)."""


def run_fanout(run: Run, tmp: Path) -> Result:
    """Create the parent, start the workers, send its message, wait until it completes."""
    from skillstate.workers.celery_app import enqueue, make_app
    from skillstate.workers.settings import Message

    queue = f"fanout-{uuid.uuid4().hex[:8]}"
    ledger = str(tmp / f"{queue}.ledger")
    parent_id = f"P-{uuid.uuid4().hex[:6]}"
    store = open_store(run.store_url)
    app = make_app(run.broker)
    fleet = Workers(run.store_url, run.broker, queue, tmp, *run.extra, launcher=run.launcher)
    try:
        fleet.start(run.workers)
        fleet.wait_ready(app)
        # Created once the workers are up: a task created long before its message looks
        # stranded to a sweeper with a short threshold (a false alarm, but a rescue).
        Runtime(parent, store).start(
            parent_id, ledger=ledger, items=run.children, parts=run.parts, delay=run.delay
        )
        began, wall = time.perf_counter(), datetime.now(timezone.utc)
        enqueue(app, Message(parent_id, 1, queue=queue))
        end = time.monotonic() + run.deadline
        while store.load(parent_id, verify=False).state.get("status") != "completed":
            if time.monotonic() > end:
                break
            if run.on_poll is not None:
                run.on_poll(store, fleet, parent_id)
            time.sleep(0.05)
        seconds = time.perf_counter() - began
    finally:
        fleet.stop()
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
        app.close()
    try:
        counted = tally(store, parent_id, ledger)
        spans = phases(store, parent_id, wall)
    finally:
        store.close()
    log = fleet.log()
    return Result(
        seconds, parent_id, ledger, counted, fleet.kills, log[-4000:],
        re.findall(r"rescued stranded task (\S+)", log), spans,
    )  # fmt: skip


def run_serial(store_url: str, items: int, parts: int, delay: float, tmp: Path) -> float:
    """The same fetches in one task, one after another, in this process."""
    ledger = str(tmp / f"serial-{uuid.uuid4().hex[:6]}.ledger")
    store = open_store(store_url)
    try:
        runtime = Runtime(serial, store, max_steps=items * parts + 10)
        task = f"S-{uuid.uuid4().hex[:6]}"
        runtime.start(task, ledger=ledger, items=items, parts=parts, delay=delay)
        began = time.perf_counter()
        result = runtime.run(task)
        seconds = time.perf_counter() - began
        if result.stopped != "completed":
            raise RuntimeError(f"the sequential task stopped {result.stopped}")
        lines = Counter(line for _, line in files.entries(ledger))
        want = {line_of(n, p) for n in range(items) for p in range(1, parts + 1)}
        if set(lines) != want or any(times != 1 for times in lines.values()):
            raise RuntimeError("the sequential task's ledger is not each line once")
        return seconds
    finally:
        store.close()


def _schema(url: str) -> tuple[str, str | None]:
    if not url.startswith("postgres"):
        return url, None
    schema = f"bench_fanout_{uuid.uuid4().hex[:8]}"
    return f"{url}{'&' if '?' in url else '?'}schema={schema}", schema


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 children, 2 workers, 0.05 s")
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds per remote call")
    parser.add_argument("--parts", type=int, default=1, help="fetch steps per child")
    parser.add_argument("--markdown", type=Path, help="also write the report to this file")
    parser.add_argument("--store", default=os.environ.get("SKILLSTATE_BENCH_STORE", PG))
    parser.add_argument("--broker", default=os.environ.get("SKILLSTATE_BENCH_BROKER", AMQP))
    args = parser.parse_args()
    if args.quick:
        args.children, args.workers, args.delay = 8, 2, 0.05
    if args.children < 1 or args.workers < 1 or args.parts < 1 or args.delay < 0:
        parser.error("--children, --workers and --parts must be >= 1, --delay >= 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    store_url, schema = _schema(args.store)
    tmp = Path(tempfile.mkdtemp(prefix="skillstate-fanout-"))
    load = os.getloadavg()[0]
    try:
        sequential = run_serial(store_url, args.children, args.parts, args.delay, tmp)
        done = run_fanout(
            Run(store_url, args.broker, args.children, args.workers, args.parts, args.delay), tmp
        )
    finally:
        if schema is not None:
            import psycopg

            with psycopg.connect(args.store, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    calls = args.children * args.parts
    fanned = f"{args.children} children on {args.workers} worker processes"
    lines = [
        f"fan-out: {args.children} items x {args.parts} part(s), each part a simulated remote "
        f"call of {args.delay:.2f} s (I/O-bound: waiting, not computing; "
        f"{os.cpu_count()} CPUs, load average {load:.2f} at the start)",
        f"store {args.store.split('@')[-1]}, broker {args.broker.split('@')[-1]}",
        "",
        "| runner | seconds | remote calls/s |",
        "|---|---:|---:|",
        f"| one task, sequential (Runtime.run, this process) | {sequential:.2f} "
        f"| {calls / sequential:.1f} |",
        f"| {fanned} | {done.seconds:.2f} | {calls / done.seconds:.1f} |",
        "",
        f"ratio sequential / fan-out: {sequential / done.seconds:.2f}x "
        f"({fanned}; the waits alone: {calls * args.delay:.1f} s sequential, "
        f"{calls * args.delay / args.workers:.1f} s spread over {args.workers})",
        done.tally.line(),
        f"where the fan-out's time went (commit times): {done.phases}",
    ]
    ok = done.tally.ok(args.children)
    lines.append("PASS: every task completed once, one join" if ok else "FAILED")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")
    if not ok:
        print(done.log_tail[-3000:], file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
