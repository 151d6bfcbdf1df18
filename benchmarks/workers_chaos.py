"""Do the workers finish every task? Ledger tasks on real workers, with and without kill -9.

    python benchmarks/workers_chaos.py [--quick] [--markdown PATH]
        [--store postgresql://postgres@127.0.0.1:5432/test]
        [--redis-broker redis://127.0.0.1:6379/1] [--rabbitmq-broker amqp://guest:guest@127.0.0.1:5672//]
        [--brokers redis,rabbitmq] [--slices 1,5,default] [--kills no,yes] [--sweep]
        [--submit-every SECONDS]

The acceptance matrix (the default): 100 ledger tasks (``skillstate.examples.ledger``)
of 30 entries each, on 3 ``skillstate worker`` processes, with ``--slice 1``,
``--slice 5`` and the default slice, on a Redis and a RabbitMQ broker, each without
and with a ``kill -9`` of a random worker every 2-4 s from the first commit on (a new
worker replaces it; no kill once 90% of the tasks are done, and at least 3 per run).
Every run has its own queue, its own Postgres schema (dropped afterwards) and one
ledger file; the messages are sent once every worker answers a ping (all at once, or
one every ``--submit-every`` seconds: a trickle keeps the queue short, so that most
continuations reach an idle worker while their sender still holds the lease).

Per run it prints:

* **completed**: tasks whose status is ``completed`` *and* whose ledger holds exactly
  ``entry 1`` .. ``entry 30``, each once;
* **duplicated**: ledger lines written twice (an effect run again);
* **stranded**: tasks left ``running`` (or ``created``) with no live lease once
  nothing moved for ``quiet`` seconds: nobody will ever advance them;
* **lost**: the other unfinished ones (failed, dead-lettered, a wrong ledger, or
  still held when the run's deadline passed);
* **kills**, **rescues** (tasks the workers' sweeper requeued: WARNING lines
  ``rescued stranded task``), **seconds** from the first message until every task
  completed (or until the run gave up).

The sweeper is OFF in these runs (``--sweep-every 0``), except where a broker itself
can lose a message: the numbers must show that the hand-over between slices strands
nothing. The exception is a Redis broker with kill -9: kombu's Redis transport pops a
message (``BRPOP``) and only then records it as unacknowledged, so a worker killed
between the two loses it for good, whatever skillstate does (RabbitMQ requeues what a
dead consumer held). Those runs turn the sweeper on (every second, threshold
``quiet / 2``) and print its rescues; every other run must have none. ``--sweep``
turns it on everywhere (rescues then must still be 0 outside Redis-with-kills). The
script exits 1 if any run completed fewer than all its tasks, or has a duplicate, a
stranded task or a rescue it does not allow.

:func:`chaos_run` is what ``tests/test_workers_chaos.py`` runs on smaller sizes.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from skillstate import Runtime  # noqa: E402
from skillstate.effects import files  # noqa: E402
from skillstate.engine.lease import is_dead_local_worker  # noqa: E402
from skillstate.examples import ledger  # noqa: E402
from skillstate.store import open_store  # noqa: E402
from skillstate.store.base import HeadInfo, Store  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/1"
AMQP = "amqp://guest:guest@127.0.0.1:5672//"
RESCUE = re.compile(r"rescued stranded task (\S+)")
"""The sweeper's WARNING line (``skillstate.workers.sweep``)."""


@dataclass(frozen=True)
class Chaos:
    """One run: how many tasks, how they are sliced, whether workers are killed."""

    store_url: str
    broker: str
    tasks: int = 100
    entries: int = 30
    workers: int = 3
    slice_steps: int | None = None
    """``--slice``; ``None``: the worker's default."""
    kills: bool = False
    kill_every: tuple[float, float] = (2.0, 4.0)
    min_kills: int = 3
    max_kills: int | None = None
    step_delay: float = 0.0
    lease_ttl: float = 5.0
    visibility: float = 8.0
    """Redis brokers: a killed worker's message comes back after this many seconds."""
    submit_every: float = 0.0
    """Seconds between two tasks' first messages, sent while the workers run (as a loop of
    ``skillstate submit`` would); 0: every message is queued before the workers start.
    A trickle keeps the queue short, so a slice's continuation reaches an idle worker
    at once, while its sender still holds the lease."""
    sweep: bool = False
    """Run the workers' sweeper (every second, threshold ``quiet / 2``) instead of none."""
    rescues_allowed: bool = False
    """Whether a sweeper rescue still passes: only where the broker can lose a message
    (a Redis broker with kill -9, see the module docstring)."""
    quiet: float = 25.0
    """Seconds without any commit after which the run stops: whatever is unfinished
    then is stranded or lost. Above the visibility timeout plus the lease TTL."""
    deadline: float = 900.0
    loglevel: str = "WARNING"
    """The workers' (INFO: a line per message, for a post-mortem)."""
    label: str = ""


@dataclass
class Result:
    chaos: Chaos
    completed: int = 0
    duplicated: int = 0
    stranded: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    kills: int = 0
    takeovers: int = 0
    """``worker_lost`` notes: kills that landed while a worker held a task."""
    rescues: list[str] = field(default_factory=list)
    seconds: float = 0.0
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return (
            self.completed == self.chaos.tasks
            and self.duplicated == 0
            and not self.stranded
            and (not self.rescues or self.chaos.rescues_allowed)
        )

    def line(self) -> str:
        c = self.chaos
        return (
            f"{c.label:<32} completed {self.completed}/{c.tasks}, duplicated {self.duplicated}, "
            f"stranded {len(self.stranded)}, lost {len(self.lost)}, kills {self.kills} "
            f"({self.takeovers} mid-task), "
            f"sweeper rescues {len(self.rescues)}, {self.seconds:.1f} s"
            + ("" if self.ok else "  FAILED")
            + (f" (stranded: {', '.join(self.stranded[:8])})" if self.stranded else "")
        )


class Fleet:
    """``skillstate worker`` processes on one queue: started, kill -9'd, replaced."""

    def __init__(self, chaos: Chaos, queue: str, logs: Path) -> None:
        self.chaos = chaos
        self.queue = queue
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.born: dict[int, float] = {}
        self.started = 0
        self.kills = 0

    def command(self) -> list[str]:
        c = self.chaos
        command = [
            sys.executable, "-m", "skillstate", "worker", "--broker", c.broker,
            "--store", c.store_url, "--queues", self.queue, "--loglevel", c.loglevel,
            "--lease-ttl", str(c.lease_ttl), "--max-crashes", "50",
            "--visibility-timeout", str(c.visibility),
        ]  # fmt: skip
        if c.slice_steps is not None:
            command += ["--slice", str(c.slice_steps)]
        if c.sweep:
            command += ["--sweep-every", "1", "--sweep-after", str(c.quiet / 2)]
        else:
            command += ["--sweep-every", "0"]
        return command

    def start(self) -> None:
        self.started += 1
        with open(self.logs / f"{self.queue}-w{self.started}.log", "wb") as out:
            proc = subprocess.Popen(self.command(), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self.born[proc.pid] = time.monotonic()

    def kill_one(self) -> None:
        """SIGKILL a random worker, one up for a few seconds when there is one (a worker
        still starting holds no task: killing it tests nothing)."""
        alive = [p for p in self.procs if p.poll() is None]
        settled = [p for p in alive if time.monotonic() - self.born[p.pid] > 3.0]
        victim = random.choice(settled or alive)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()  # reaped: its pid no longer answers, its lease is seen dead at once
        self.procs.remove(victim)
        self.kills += 1

    def wait_ready(self, app: Any, within: float = 120.0) -> None:
        """Until every worker answers a ping (its consumer is up)."""
        names = [f"skillstate-{p.pid}@{socket.gethostname()}" for p in self.procs]
        end = time.monotonic() + within
        while time.monotonic() < end:
            if len(app.control.ping(destination=names, timeout=1.0) or []) >= len(names):
                return
            if any(p.poll() is not None for p in self.procs):
                raise SystemExit(f"a worker exited at start:\n{self.log()[-3000:]}")
        raise SystemExit(f"{len(names)} workers did not come up in {within:.0f} s")

    def log(self) -> str:
        found = sorted(self.logs.glob(f"{self.queue}-w*.log"))
        return "".join(p.read_text(errors="replace") for p in found)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def chaos_run(chaos: Chaos, tmp: Path) -> Result:
    """Create the tasks, enqueue them, run the workers (killing some), count."""
    from skillstate.workers.celery_app import enqueue, make_app
    from skillstate.workers.settings import Message

    queue = f"chaos-{uuid.uuid4().hex[:8]}"
    path = str(tmp / f"{queue}.ledger")
    ids = [f"L{i}" for i in range(chaos.tasks)]
    store = open_store(chaos.store_url)
    app = make_app(chaos.broker)
    fleet = Fleet(chaos, queue, tmp)
    result = Result(chaos)
    try:
        runtime = Runtime(ledger.agent, store)
        for task in ids:
            runtime.start(task, ledger=path, target=chaos.entries, step_delay=chaos.step_delay)
        for _ in range(chaos.workers):
            fleet.start()
        fleet.wait_ready(app)  # the clock and the trickle start with every worker up
        if not chaos.submit_every:
            for task in ids:
                enqueue(app, Message(task, 1, queue=queue))
        trickle = [] if not chaos.submit_every else list(ids)

        def submit() -> bool:
            """Send the next task's first message; False once all are sent."""
            if trickle:
                enqueue(app, Message(trickle.pop(0), 1, queue=queue))
            return bool(trickle)

        result.seconds = _drive(chaos, store, ids, fleet, submit)
        result.kills = fleet.kills
    finally:
        fleet.stop()
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
        app.close()
    try:
        _count(result, store, ids, path)
        runtime = Runtime(ledger.agent, store)
        result.takeovers = sum(
            e.kind == "worker_lost" for task in ids for e in runtime.load(task).errors
        )
    finally:
        store.close()
    log = fleet.log()
    result.rescues = sorted(set(RESCUE.findall(log)))
    result.log_tail = log[-4000:]
    return result


def _drive(
    chaos: Chaos, store: Store, ids: list[str], fleet: Fleet, submit: Callable[[], bool]
) -> float:
    """Poll the store until every task completed or nothing moved for ``quiet`` seconds;
    send the trickle's messages; once a worker has committed (the workers are up), kill
    -9 a random worker now and then when asked to. Returns the seconds spent."""
    began = moved = time.monotonic()
    progress = -1
    kill_at: float | None = None
    next_submit, submitting = began, bool(chaos.submit_every)
    while True:
        if submitting and time.monotonic() >= next_submit:
            submitting = submit()
            next_submit += chaos.submit_every
        read = time.perf_counter()
        heads = _heads(store, ids)
        read = time.perf_counter() - read
        now = time.monotonic()
        completed = sum(h.status == "completed" for h in heads)
        if completed == len(ids):
            return now - began
        total = sum(h.version or 0 for h in heads)
        if kill_at is None and 0 <= progress < total:
            kill_at = now + random.uniform(*chaos.kill_every) / 2
        if total != progress or submitting:  # a task not sent yet is not stranded
            progress, moved = total, now
        if now - moved > chaos.quiet or now - began > chaos.deadline:
            return now - began
        if chaos.kills and kill_at is not None and now >= kill_at:
            if _kill_wanted(chaos, fleet, completed, len(ids)):
                fleet.kill_one()
                fleet.start()
            kill_at = now + random.uniform(*chaos.kill_every)
        # heads() reads every task: polling it back to back would take the workers' CPU.
        pause = max(0.1, 4 * read)
        if submitting:
            pause = min(pause, max(0.0, next_submit - time.monotonic()))
        time.sleep(pause)


def _kill_wanted(chaos: Chaos, fleet: Fleet, completed: int, tasks: int) -> bool:
    """At least ``min_kills``, at most ``max_kills``, none once 90% of the tasks are done."""
    if chaos.max_kills is not None and fleet.kills >= chaos.max_kills:
        return False
    return completed < 0.9 * tasks or fleet.kills < chaos.min_kills


def _heads(store: Store, ids: list[str]) -> list[HeadInfo]:
    wanted = set(ids)
    return [h for h in store.heads() if h.task_id in wanted]


def _count(result: Result, store: Store, ids: list[str], path: str) -> None:
    lines: dict[str, list[str]] = {task: [] for task in ids}
    for key, line in files.entries(path):
        lines.setdefault(key.split(":", 1)[0], []).append(line)
    want = [f"entry {n}" for n in range(1, result.chaos.entries + 1)]
    now = datetime.now(timezone.utc)
    for head in _heads(store, ids):
        got = lines[head.task_id]
        result.duplicated += len(got) - len(set(got))
        if head.status == "completed" and sorted(got, key=_number) == want:
            result.completed += 1
        elif head.status in {"running", "created"} and not _live(head, now):
            result.stranded.append(head.task_id)
        else:
            result.lost.append(head.task_id)


def _live(head: HeadInfo, now: datetime) -> bool:
    lease = head.lease
    return lease is not None and lease.expires_at > now and not is_dead_local_worker(lease.worker)


def _number(line: str) -> int:
    return int(line.rsplit(" ", 1)[-1])


@contextmanager
def _postgres_schema(url: str) -> Iterator[str]:
    """A fresh schema on the Postgres ``url`` for one run, dropped afterwards."""
    schema = f"bench_chaos_{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}schema={schema}"
    finally:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def matrix(args: argparse.Namespace) -> list[Chaos]:
    brokers = {"redis": args.redis_broker, "rabbitmq": args.rabbitmq_broker}
    size = {"tasks": 12, "entries": 8} if args.quick else {"tasks": 100, "entries": 30}
    runs = []
    for broker in args.brokers.split(","):
        for slice_text in args.slices.split(","):
            for kills in args.kills.split(","):
                steps = None if slice_text == "default" else int(slice_text)
                lossy = broker == "redis" and kills == "yes"  # see the module docstring
                label = f"{broker} slice {slice_text} {'kill -9' if kills == 'yes' else 'no kills'}"
                runs.append(
                    Chaos(
                        args.store,
                        brokers[broker],
                        slice_steps=steps,
                        kills=kills == "yes",
                        min_kills=1 if args.quick else 3,
                        kill_every=(1.0, 2.0) if args.quick else (2.0, 4.0),
                        submit_every=args.submit_every,
                        sweep=args.sweep or lossy,
                        rescues_allowed=lossy,
                        label=label,
                        **size,
                    )
                )
    return runs


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A one-line usage error for a matrix the script cannot run."""
    for name, allowed in (("brokers", {"redis", "rabbitmq"}), ("kills", {"no", "yes"})):
        wrong = set(getattr(args, name).split(",")) - allowed
        if wrong:
            parser.error(f"--{name}: {', '.join(sorted(wrong))} is not one of {sorted(allowed)}")
    for text in args.slices.split(","):
        if text != "default" and not (text.isdigit() and int(text) >= 1):
            parser.error(f"--slices: {text!r} is neither a number of steps >= 1 nor 'default'")
    if args.submit_every < 0:
        parser.error("--submit-every must be >= 0")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 tasks of 8 entries per run")
    parser.add_argument("--markdown", type=Path, help="also write the lines to this file")
    parser.add_argument("--store", default=os.environ.get("SKILLSTATE_BENCH_STORE", PG))
    parser.add_argument("--redis-broker", default=REDIS)
    parser.add_argument("--rabbitmq-broker", default=AMQP)
    parser.add_argument("--brokers", default="redis,rabbitmq")
    parser.add_argument("--slices", default="1,5,default")
    parser.add_argument("--kills", default="no,yes")
    parser.add_argument("--sweep", action="store_true", help="run the sweeper (rescues must be 0)")
    parser.add_argument("--submit-every", type=float, default=0.0, help="seconds between tasks")
    args = parser.parse_args()
    _check(parser, args)
    # A SIGTERM ends the run through its finally blocks: workers stopped, schema dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="skillstate-chaos-"))
    load = os.getloadavg()[0]
    print(f"workers chaos: {os.cpu_count()} CPUs, load average {load:.2f} at the start")
    lines, failed = [], False
    for chaos in matrix(args):
        result = _one(chaos, tmp)
        lines.append(result.line())
        print(lines[-1], flush=True)
        if not result.ok:
            failed = True
            print(result.log_tail[-1500:], file=sys.stderr)
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if failed:
        print(f"FAILED (the workers' logs are in {tmp})")
        raise SystemExit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: every task completed, none duplicated or stranded, no unexpected rescue")


def _one(chaos: Chaos, tmp: Path) -> Result:
    if not chaos.store_url.startswith("postgres"):
        return chaos_run(chaos, tmp)
    with _postgres_schema(chaos.store_url) as url:
        return chaos_run(replace(chaos, store_url=url), tmp)


if __name__ == "__main__":
    main()
