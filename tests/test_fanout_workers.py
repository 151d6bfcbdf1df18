"""A parent and its children on real ``skillstate worker`` processes, with kill -9.

The agents and the run are ``benchmarks/fanout.py``'s (:func:`run_fanout`): a parent
maps ``fetch`` over 10 items, each child a task of its own that fetches 4 parts (a
simulated remote call and a keyed ledger line each), then the parent's join skill
writes one ``join`` line. The test kills workers while a child is observed mid-run (its
lease held by a live worker, its version past 1), starts replacements, and counts what
the store and the ledger hold at the end. Also: the parent's own worker killed at a
fan-out hook (mid-spawn, before the join; ``tests.fanout_hooks``), the benchmark's
``--quick`` run, and the page's worker example as written. A missing broker or store
skips a test, or fails it under ``SKILLSTATE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from benchmarks.fanout import Run, Workers, run_fanout

from skillstate.errors import TaskNotFound
from skillstate.store.base import Store
from tests.contract.backends import (
    drop_postgres_schemas,
    drop_redis_data,
    postgres_reachable,
    postgres_url_for,
    redis_url_for,
    require_service,
)
from tests.fanout_hooks import ENV as HOOK_ENV
from tests.fanout_hooks import LAUNCHER
from tests.test_benchmarks import run_benchmark
from tests.test_workers_chaos import _broker

pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[1]
KILLS = 2


class Killer:
    """Kills the worker holding a child mid-run (lease live, version past 1), then starts
    a replacement; at most ``KILLS`` times, a second apart."""

    def __init__(self) -> None:
        self.victims: list[tuple[str, int]] = []
        """(child, its version) each kill was aimed at."""
        self.next = 0.0

    def __call__(self, store: Store, fleet: Workers, parent_id: str) -> None:
        now = time.monotonic()
        if len(self.victims) >= KILLS or now < self.next:
            return
        self.next = now + 0.2  # one look per 0.2 s: the store reads take the workers' CPU
        alive = {p.pid for p in fleet.alive()}
        card = store.load(parent_id, verify=False).state
        for record in card.get("children") or []:
            child = record["task_id"]
            lease = store.lease(child)
            if lease is None:
                continue
            pid = _pid(lease.worker)
            try:
                version = store.load(child, verify=False).version
            except TaskNotFound:  # leased while it is created (Runtime.start holds it)
                continue
            if pid in alive and version > 1 and lease.live():
                fleet.kill(pid)
                fleet.start()
                self.victims.append((child, version))
                self.next = now + 1.0
                return


def _pid(holder: str) -> int | None:
    tail = holder.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


PAIRS = [
    pytest.param("postgres", "rabbitmq", id="pg+rabbitmq"),
    pytest.param("redis", "redis", id="redis+redis"),
]


@pytest.mark.parametrize(("store_name", "broker_name"), PAIRS)
def test_ten_children_on_three_workers_with_kill9(
    store_name: str, broker_name: str, tmp_path: Path
) -> None:
    """10 children completed once each, every ledger line once, one join event and one
    join line, the parent completed; two workers killed mid-child and replaced.

    A Redis broker can lose the message of a worker killed between popping it and
    recording it as unacknowledged (kombu; see ``benchmarks/workers_chaos.py``): there
    the sweeper runs and its rescues are allowed. On RabbitMQ it is off: the wakes and
    the redeliveries alone must finish the run."""
    broker = _broker(broker_name)
    store_url = (postgres_url_for if store_name == "postgres" else redis_url_for)(tmp_path)
    lossy = broker_name == "redis"
    sweep = ("--sweep-every", "1", "--sweep-after", "20") if lossy else ("--sweep-every", "0")
    killer = Killer()
    run = Run(
        store_url,
        broker,
        children=10,
        workers=3,
        parts=4,
        delay=0.25,
        extra=(
            "--lease-ttl",
            "3",
            "--visibility-timeout",
            "4",
            "--max-crashes",
            "20",
            "--loglevel",
            "INFO",
            *sweep,
        ),
        deadline=150,
        on_poll=killer,
    )
    try:
        result = run_fanout(run, tmp_path)
    finally:
        drop_postgres_schemas()
        drop_redis_data()
    tally = result.tally
    print(f"\n{tally.line()}, kills {result.kills}, rescues {result.rescues}, "
          f"{result.seconds:.1f} s; killed mid-child: {killer.victims}")  # fmt: skip
    assert tally.ok(10), f"{tally.line()}\nworker logs:\n{result.log_tail}"
    assert (tally.children, tally.completed, tally.parent) == (10, 10, "completed")
    assert (tally.duplicated, tally.joins, tally.join_lines) == (0, 1, 1)
    assert result.kills == KILLS
    assert len(killer.victims) == KILLS
    assert tally.takeovers >= 1  # a kill landed on a task's lease: it was taken over, noted
    if not lossy:
        assert result.rescues == [], result.log_tail


AIMS = [
    pytest.param("create", 3, id="mid-spawn"),  # 3 of the 6 children created, no message sent
    pytest.param("join", 0, id="before-the-join"),  # every child ended, no join committed
]


@pytest.mark.parametrize(("point", "after"), AIMS)
def test_the_parents_worker_killed_mid_spawn_or_before_the_join(
    point: str, after: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker running the parent stops at a fan-out hook (``tests.fanout_hooks``:
    observed through its marker, not slept) and is killed there, then replaced: its
    message comes back, takes the parent over, creates the missing children (or joins),
    and the run ends with every child created and completed once and one join."""
    broker = _broker("rabbitmq")
    store_url = postgres_url_for(tmp_path)
    marker = tmp_path / "blocked"
    monkeypatch.setenv(HOOK_ENV, f"{point}:{after}:{marker}")
    seen: dict[str, object] = {}

    def kill_when_blocked(store: Store, fleet: Workers, parent_id: str) -> None:
        words = marker.read_text().split() if marker.exists() and not seen else []
        if len(words) < 2:
            return  # not there yet (or the marker is being written)
        card = store.load(parent_id, verify=False).state
        ids = [record["task_id"] for record in card.get("children") or []]
        made = set(store.tasks())
        heads = [store.load(i, verify=False).state for i in ids if i in made]
        events = store.events(parent_id)
        seen.update(status=card["status"], existing=len(heads),
                    ended=sum(h["status"] == "completed" for h in heads),
                    joins=sum(e.action.get("kind") == "join" for e in events))  # fmt: skip
        fleet.kill(int(words[0]))
        fleet.start()

    run = Run(store_url, broker, children=6, workers=2, delay=0.05, deadline=120,
              extra=("--lease-ttl", "3", "--sweep-every", "0", "--loglevel", "INFO"),
              on_poll=kill_when_blocked, launcher=LAUNCHER)  # fmt: skip
    try:
        result = run_fanout(run, tmp_path)
    finally:
        drop_postgres_schemas()
    tally = result.tally
    print(f"\nkilled at {point}: {seen}; {tally.line()}, {result.seconds:.1f} s")
    assert seen, f"the {point} hook never blocked\n{result.log_tail}"
    if point == "create":  # the instant aimed at: spawn committed, half the children made
        assert (seen["status"], seen["existing"]) == ("waiting_children", 3)
    else:
        assert (seen["status"], seen["ended"], seen["joins"]) == ("waiting_children", 6, 0)
    assert tally.ok(6), f"{tally.line()}\nworker logs:\n{result.log_tail}"
    assert tally.takeovers >= 1  # the parent's worker_lost note
    assert result.rescues == []


def test_the_benchmark_quick_run(tmp_path: Path) -> None:
    """``benchmarks/fanout.py --quick``: both runs, the ratio and the counts printed
    (Postgres + RabbitMQ; the ratio is a measurement, not asserted)."""
    require_service("PostgreSQL", *postgres_reachable())
    _broker("rabbitmq")
    markdown = tmp_path / "fanout.md"
    script = ROOT / "benchmarks" / "fanout.py"
    result = run_benchmark("--quick", "--markdown", str(markdown), script=script)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = markdown.read_text(encoding="utf-8")
    assert "ratio sequential / fan-out:" in text
    assert "tasks completed 9/9 (8 children, parent completed)" in text
    assert "duplicated lines 0, join events 1, join lines 1" in text
    assert "I/O-bound" in text


def test_the_pages_worker_example_runs_as_written(tmp_path: Path) -> None:
    """``docs/fanout.md``'s "On Celery workers" commands, run as written (RabbitMQ; in a
    temporary directory, and on a queue of this test's own so nothing else consumes it)."""
    _broker("rabbitmq")
    text = (ROOT / "docs" / "fanout.md").read_text(encoding="utf-8")
    section = text.split("## On Celery workers", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)[0]
    block = block.replace("/tmp/fanout", str(tmp_path)).replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in block.splitlines()]
    env = dict(os.environ)
    for words in commands:
        if words and words[0] == "export":
            name, _, value = words[1].partition("=")
            env[name] = value
    worker = next(w for w in commands if w[:2] == ["skillstate", "worker"])
    submit = next(w for w in commands if w[:2] == ["skillstate", "submit"])
    queue = f"docs-{uuid.uuid4().hex[:8]}"
    cli = [sys.executable, "-m", "skillstate"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip

    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    args = [w for w in worker[1:] if w != "&"]  # started in the background, as the page does
    proc = subprocess.Popen([*cli, *args, "--queues", queue], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        out = run(*submit[1:], "--queue", queue)
        assert out.returncode == 0, out.stderr
        end = time.monotonic() + 120
        while True:
            listing = run("tasks", "--json")
            assert listing.returncode == 0, listing.stderr
            status = {t["task_id"]: t["status"] for t in json.loads(listing.stdout)}
            if status.get("P1") == "completed":
                break
            assert time.monotonic() < end, (tmp_path / "worker.log").read_text()[-3000:]
            time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    assert status == {"P1": "completed", **{f"P1.2.{n}": "completed" for n in range(5)}}
    ledger = (tmp_path / "ledger.txt").read_text(encoding="utf-8")
    assert ledger.count("\titem ") == 5
    assert ledger.count("\tjoin 5/5 children completed") == 1
