"""Many tasks on one event loop: ``AsyncRuntime`` against a model that takes 200 ms a call.

    .venv/bin/python benchmarks/async_concurrency.py [--tasks 100] [--latency 0.2]
        [--stores sqlite,postgres,redis] [--quick]

One process, one loop, one store per measurement, opened with ``open_async_store``:
SQLite (a ``ThreadedStore``), and the native async PostgreSQL and Redis stores
(``$SKILLSTATE_BENCH_POSTGRES``, default ``postgresql://postgres@127.0.0.1:5432/test``
with a fresh ``?schema=`` dropped at the end; ``$SKILLSTATE_BENCH_REDIS``, default
``redis://127.0.0.1:6379/0`` with a fresh ``?prefix=`` whose keys are deleted). A store
whose server does not answer is reported as skipped. A fake async provider answers every
decision after ``--latency`` seconds (as a hosted model would: the time is spent
waiting, not computing). Each task takes ``--steps`` skill steps and a finish, so
one task alone takes about ``(steps + 1) x latency``. Measured in the same run:

* one task alone on the loop;
* ``--tasks`` tasks at once on the loop (``asyncio.gather``): the target is a small
  multiple of one task's time, not ``--tasks`` times it; for PostgreSQL and Redis
  also with their synchronous store, called from the step threads directly;
* the same tasks one after another through the synchronous ``Runtime`` (what a
  loop without ``AsyncRuntime`` would do, blocking on each model call), on SQLite.

Prints the times and the ratios; ``--markdown FILE`` writes the table too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from skillstate import Agent, AgentState, Outcome, Runtime, SkillContext, SkillRegistry
from skillstate import StateMachine as Machine
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.engine.policy import StatePolicy
from skillstate.errors import StoreError
from skillstate.llm.base import Completion, Message, Usage
from skillstate.store import open_store
from skillstate.store.aio import AsyncStore, is_async_store, open_async_store
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore

POSTGRES = os.environ.get("SKILLSTATE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("SKILLSTATE_BENCH_REDIS", "redis://127.0.0.1:6379/0")


class Counter(AgentState):
    n: int = 0
    target: int = 4


class NoArgs(BaseModel):
    pass


class WaitingModel:
    """Answers after ``latency`` seconds: bump until the view says ``n`` reached the target."""

    name = "waiting"

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def _reply(self, messages: Sequence[Message]) -> Completion:
        text = messages[-1].content
        done = "bump(" not in text  # the skill is offered only while n < target
        action = {"kind": "finish"} if done else {"kind": "call_skill", "skill": "bump"}
        return Completion(json.dumps(action), Usage(100, 10), "waiting")

    def complete(self, messages: Sequence[Message], **_: Any) -> Completion:
        time.sleep(self.latency)
        return self._reply(messages)

    async def acomplete(self, messages: Sequence[Message], **_: Any) -> Completion:
        await asyncio.sleep(self.latency)
        return self._reply(messages)


def agent(latency: float) -> Agent[Counter]:
    skills = SkillRegistry()

    @skills.skill(outputs=["n"], when=lambda s: s.n < s.target)
    def bump(state: Counter, params: NoArgs, ctx: SkillContext) -> Outcome:
        """Add one to n."""
        return Outcome(writes={"n": state.n + 1})

    @bump.verifier
    def _grew(state: Counter, outcome: Outcome) -> bool:
        return 0 < state.n <= state.target

    return Agent(
        name="counter",
        state_type=Counter,
        machine=Machine({"init": ["init"]}, final=["init"]),
        skills=skills,
        policy=StatePolicy(WaitingModel(latency)),
    )


async def concurrent(runtime: AsyncRuntime[Counter], ids: list[str], steps: int) -> float:
    for task_id in ids:
        await runtime.start(task_id, target=steps)
    begun = time.perf_counter()
    results = await asyncio.gather(*(runtime.run(task_id) for task_id in ids))
    elapsed = time.perf_counter() - begun
    bad = [r for r in results if r.stopped != "completed" or r.state.n != steps]
    if bad:
        raise SystemExit(f"{len(bad)} tasks did not complete right: {bad[0].stopped}")
    return elapsed


def store_url(name: str, root: Path, tag: str) -> str:
    if name == "sqlite":
        return f"sqlite:///{root / 'state.db'}"
    base = {"postgres": POSTGRES, "redis": REDIS}[name]
    option = "schema" if name == "postgres" else "prefix"
    return f"{base}{'&' if '?' in base else '?'}{option}={tag}"


def drop(name: str, tag: str) -> None:
    """Remove what a server-backed measurement wrote (its schema, its keys)."""
    if name == "postgres":
        import psycopg

        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {tag} CASCADE")
    elif name == "redis":
        import redis

        client = redis.Redis.from_url(REDIS)
        try:
            keys = list(client.scan_iter(match=f"{tag}:*", count=1000))
            if keys:
                client.unlink(*keys)
        finally:
            client.close()


async def measure(
    built: Agent[Counter], url: str, tasks: int, steps: int, *, native: bool = True
) -> tuple[float, float]:
    """(one task alone, ``tasks`` at once) on one loop and one store: the async store
    the URL opens, or with ``native=False`` its synchronous store (called from the
    step threads directly)."""
    store: AsyncStore | Store = (
        await open_async_store(url) if native else await asyncio.to_thread(open_store, url)
    )
    try:
        runtime = AsyncRuntime(built, store)
        await concurrent(runtime, ["warm-up"], steps)  # imports, threads, connections
        one = await concurrent(runtime, ["alone"], steps)
        many = await concurrent(runtime, [f"t{i}" for i in range(tasks)], steps)
        return one, many
    finally:
        if is_async_store(store):
            await cast("AsyncStore", store).close()
        else:
            cast("Store", store).close()


def sequential(built: Agent[Counter], path: Path, tasks: int, steps: int) -> tuple[int, float]:
    """(tasks run, seconds per task) one after another through the synchronous Runtime."""
    store = SQLiteStore(path)
    sync = Runtime(built, store)
    ids = [f"s{i}" for i in range(min(tasks, 10))]
    started = time.perf_counter()
    for task_id in ids:
        sync.start(task_id, target=steps)
        sync.run(task_id)
    per_task = (time.perf_counter() - started) / len(ids)
    store.close()
    return len(ids), per_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    parser.add_argument("--quick", action="store_true", help="20 tasks, 50 ms: a smoke run")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.latency = 20, 0.05
    names = [n.strip() for n in args.stores.split(",") if n.strip()]
    unknown = sorted(set(names) - {"sqlite", "postgres", "redis"})
    if unknown:
        raise SystemExit(f"unknown store {unknown[0]!r}; expected sqlite, postgres or redis")
    root = Path(tempfile.mkdtemp(prefix="skillstate-async-"))
    built = agent(args.latency)
    rows: list[tuple[str, str, str]] = []
    alone: dict[str, float] = {}  # store -> one task's time
    ratios: list[str] = []
    # Each server-backed store twice: native async, then its sync store in the step
    # threads (what the async store is measured against).
    runs = [(n, True) for n in names] + [(n, False) for n in names if n != "sqlite"]
    for name, native in runs:
        label = name if native or name == "sqlite" else f"{name} (sync store)"
        tag = f"bench_async_{uuid.uuid4().hex[:10]}"
        try:
            one, many = asyncio.run(
                measure(built, store_url(name, root, tag), args.tasks, args.steps, native=native)
            )
        except (StoreError, ImportError) as exc:
            print(f"{label}: skipped ({' '.join(str(exc).split())})")
            continue
        finally:
            drop(name, tag)
        alone.setdefault(name, one)
        rows.append((f"{label}: one task alone", f"{one:.2f} s", "1.00x"))
        at_once = f"{label}: {args.tasks} tasks at once, one loop"
        rows.append((at_once, f"{many:.2f} s", f"{many / one:.2f}x"))
        ratios.append(f"{label} {many / one:.2f}x")
    if not rows:
        raise SystemExit("no store could be measured")
    count, per_task_sync = sequential(built, root / "sync.db", args.tasks, args.steps)
    # Against SQLite's one task when it was measured (the sequential run is on SQLite).
    base = alone.get("sqlite", next(iter(alone.values())))
    rows.append(
        (
            f"{args.tasks} tasks one after another (Runtime on SQLite, extrapolated from {count})",
            f"{per_task_sync * args.tasks:.2f} s",
            f"{per_task_sync * args.tasks / base:.2f}x",
        )
    )
    lines = [
        f"{args.tasks} tasks x ({args.steps} steps + finish), model latency "
        f"{args.latency * 1000:.0f} ms",
        "",
        "| run | wall time | vs one task |",
        "|---|---|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
    ]
    print("\n".join(lines))
    print(f"concurrency ratio ({args.tasks} tasks vs one): {', '.join(ratios)}")
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
