"""A whole step against the storage floor and Burr, at equal durability, in one run (issue 30).

    .venv/bin/python benchmarks/step_floor.py [--depths 100,1000,10000] [--rounds 7]
        [--batch 200] [--markdown PATH] [--profile] [--quick]

Prints markdown (the environment with the load average at the start and the end, a
table of µs per step, the ratios, one PASS/FAIL line per target) on stdout and
progress on stderr. ``--quick`` is a smoke run (depths 50,200; 2 rounds of 20 steps).
``--profile`` adds where a skillstate step's time goes (a sampling of the call tree by
``cProfile`` over one extra batch; it inflates Python-heavy parts, so shares, not µs).

The same card on every side: a goal (~300 characters), 8 constraints, 6 facts and three
fields a step writes (``counter``, ``last``, ``total``): about 1.5 KB of JSON. One step
writes those three fields.

* **skillstate**: an ``Agent`` with a ``ScriptedPolicy`` that calls the one skill
  ``tick`` (``outputs=["counter", "last", "total"]``), whose verifier checks all three
  against ``ctx.before`` (a failing verifier leaves the card alone). ``Runtime.run(task,
  max_steps=K)`` timed whole and divided by K: lease (on, the default), view, decision,
  action validation, run, verify, next state, diff, event, redaction, checksums, one
  compare-and-set commit. On ``sqlite:///`` (WAL, ``synchronous=NORMAL``, as shipped)
  and ``memory://``.
* **bare SQLite write** (the floor): the task's own stored head, read once from our
  store after growing it, then per step the three fields and the version set in that
  dict, its JSON text made (orjson, as our store does) and one compare-and-set
  ``UPDATE ... WHERE version = ?`` committed in a ``BEGIN IMMEDIATE`` transaction, same
  file settings (WAL, ``synchronous=NORMAL``). A second floor also ``INSERT``\\ s a
  history row (the step's patch), the least a store that keeps versions writes; it is
  shown, not judged.
* **Burr**: an ``Application`` with one action ``tick`` that writes the same three
  fields over the same card; ``app.step()`` K times. With ``SQLLitePersister`` whose
  connection is set to WAL and ``synchronous=NORMAL`` (equal durability: it writes the
  whole state as one row per step) and without persistence (bare).

Every subject at every depth is its own task / file / app, grown before the clock
starts; the rounds interleave all subjects (rotated order), and each cell is the median
over rounds. Targets (issue 30), judged on this run's numbers:

* SQLite step ≤ 4x the bare head write, at every depth;
* SQLite step ≤ 1.0x Burr + SQLLitePersister at equal durability, at every depth;
* memory step ≤ 2x bare Burr, at every depth;
* flat: SQLite step at the deepest depth ≤ 1.1x the step at the shallowest.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import orjson

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillRegistry,
    StateMachine,
    Verdict,
)
from skillstate.store import open_store

GOAL = "Count up while keeping every constraint of the task in mind, step by step. " * 4
CONSTRAINTS = [f"constraint {i}: never touch the production database {i}" for i in range(8)]
FACTS = {f"fact_{i}": f"a short verified fact number {i} about the work" for i in range(6)}


# ------------------------------------------------------------------------ skillstate


class Card(AgentState):
    counter: int = 0
    last: str = ""
    total: int = 0


skills = SkillRegistry()


@skills.skill(step="work", outputs=["counter", "last", "total"])
def tick(state: Card, params: NoParams, ctx: Any) -> Outcome:
    """Add one."""
    n = state.counter + 1
    return Outcome(writes={"counter": n, "last": f"step {n}", "total": state.total + 2})


@tick.verifier
def counted(state: Card, outcome: Outcome, ctx: Any) -> Verdict:
    before = ctx.before
    ok = (
        state.counter == before.counter + 1
        and state.total == before.total + 2
        and state.last == f"step {state.counter}"
    )
    return Verdict(ok=ok, reason="" if ok else "the counter did not go up by one")


AGENT = Agent(
    name="floor",
    state_type=Card,
    machine=StateMachine({"init": ["work"], "work": ["work"]}),
    skills=skills,
    policy=ScriptedPolicy(lambda view: CallSkill(skill="tick")),
)


class Skillstate:
    """One task on one store, stepped by ``Runtime.run(max_steps=K)``."""

    def __init__(self, url: str) -> None:
        self.store = open_store(url)
        self.runtime = Runtime(
            AGENT, self.store, max_steps=10**7, max_stalled=None, max_repeats=None
        )
        self.task_id = f"floor-{uuid.uuid4().hex[:8]}"
        self.runtime.start(self.task_id, goal=GOAL, constraints=CONSTRAINTS, facts=FACTS)
        self.depth = 0

    def take(self, steps: int) -> int:
        result = self.runtime.run(self.task_id, max_steps=steps)
        counter: int = result.state.counter
        if counter != self.depth + steps:
            raise RuntimeError(f"{steps} steps gave counter {counter} (stopped: {result.stopped})")
        self.depth = counter
        return counter

    grow = take

    def close(self) -> None:
        self.store.close()


# ------------------------------------------------------------------------ the floor


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


class BareWrite:
    """The least durable work a step needs: a compare-and-set write of the same head."""

    def __init__(self, path: Path, head: dict[str, Any], *, history: bool) -> None:
        self.conn = _connect(path)
        self.history = history
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS heads "
            "(task_id TEXT PRIMARY KEY, version INTEGER, head TEXT)"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS versions "
            "(task_id TEXT, version INTEGER, patch TEXT, PRIMARY KEY (task_id, version))"
        )
        self.doc = dict(head)
        self.task_id = uuid.uuid4().hex[:8]
        self.conn.execute(
            "INSERT INTO heads VALUES (?, ?, ?)",
            (self.task_id, self.doc["version"], orjson.dumps(self.doc).decode()),
        )
        self.depth = int(self.doc["counter"])

    def take(self, steps: int) -> int:
        conn, doc, task_id = self.conn, self.doc, self.task_id
        for _ in range(steps):
            n = doc["counter"] + 1
            doc["counter"], doc["last"], doc["total"] = n, f"step {n}", doc["total"] + 2
            expected = doc["version"]
            doc["version"] = expected + 1
            text = orjson.dumps(doc).decode()
            conn.execute("BEGIN IMMEDIATE")
            cur = conn.execute(
                "UPDATE heads SET version = ?, head = ? WHERE task_id = ? AND version = ?",
                (expected + 1, text, task_id, expected),
            )
            if cur.rowcount != 1:
                conn.execute("ROLLBACK")
                raise RuntimeError("the bare compare-and-set was refused")
            if self.history:
                patch = orjson.dumps(
                    [
                        {"op": "replace", "path": "/counter", "value": n},
                        {"op": "replace", "path": "/last", "value": doc["last"]},
                        {"op": "replace", "path": "/total", "value": doc["total"]},
                        {"op": "replace", "path": "/version", "value": expected + 1},
                    ]
                ).decode()
                conn.execute(
                    "INSERT INTO versions VALUES (?, ?, ?)", (task_id, expected + 1, patch)
                )
            conn.execute("COMMIT")
        self.depth = int(doc["counter"])
        return self.depth

    grow = take

    def close(self) -> None:
        self.conn.close()


# ------------------------------------------------------------------------ Burr


def burr_app(persister: Any = None, app_id: str | None = None) -> Any:
    from burr.core import ApplicationBuilder, State, action

    @action(reads=["counter", "total"], writes=["counter", "last", "total"])
    def tick(state: State) -> State:
        n = state["counter"] + 1
        return state.update(counter=n, last=f"step {n}", total=state["total"] + 2)

    card = {
        "goal": GOAL,
        "constraints": CONSTRAINTS,
        "facts": FACTS,
        "counter": 0,
        "last": "",
        "total": 0,
    }
    built = ApplicationBuilder().with_actions(tick=tick).with_transitions(("tick", "tick"))
    if persister is None:
        return built.with_state(**card).with_entrypoint("tick").build()
    return (
        built.initialize_from(
            persister, resume_at_next_action=True, default_state=card, default_entrypoint="tick"
        )
        .with_identifiers(app_id=app_id)
        .with_state_persister(persister)
        .build()
    )


class Burr:
    """A Burr application stepped with ``app.step()``, with or without a persister."""

    def __init__(self, path: Path | None) -> None:
        self.persister: Any = None
        app_id = f"floor-{uuid.uuid4().hex[:8]}"
        if path is not None:
            from burr.core.persistence import SQLLitePersister

            self.persister = SQLLitePersister(db_path=str(path), table_name="burr_state")
            # Equal durability: the settings our SQLite store runs with.
            self.persister.connection.execute("PRAGMA journal_mode=WAL")
            self.persister.connection.execute("PRAGMA synchronous=NORMAL")
            self.persister.initialize()
        self.app = burr_app(self.persister, app_id)
        self.depth = 0

    def take(self, steps: int) -> int:
        app = self.app
        for _ in range(steps):
            app.step()
        counter: int = app.state["counter"]
        if counter != self.depth + steps:
            raise RuntimeError(f"Burr: {steps} steps gave counter {counter}")
        self.depth = counter
        return counter

    grow = take

    def close(self) -> None:
        if self.persister is not None:
            self.persister.cleanup()


# ------------------------------------------------------------------------ the run

SQLITE = "skillstate sqlite"
MEMORY = "skillstate memory"
FLOOR = "bare SQLite head write"
FLOOR_HISTORY = "bare SQLite head write + history row"
BURR_SAVED = "burr + SQLLitePersister (WAL, NORMAL)"
BURR_BARE = "burr bare"


@dataclass
class Run:
    depths: list[int]
    subjects: dict[tuple[str, int], Any] = field(default_factory=dict)
    times: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    head_bytes: int = 0


def build(run: Run, workdir: Path, log: Callable[[str], None]) -> None:
    try:
        import burr.core
    except ImportError as exc:
        run.skipped["burr"] = f"apache-burr is not installed ({exc}); pip install -e '.[bench]'"
    for depth in run.depths:
        log(f"growing depth {depth}")
        ours = Skillstate(f"sqlite:///{workdir}/ours-{depth}.db")
        ours.grow(depth)
        head = ours.store.load(ours.task_id).state
        run.head_bytes = len(orjson.dumps(head))
        run.subjects[(SQLITE, depth)] = ours
        memory = Skillstate("memory://")
        memory.grow(depth)
        run.subjects[(MEMORY, depth)] = memory
        run.subjects[(FLOOR, depth)] = BareWrite(workdir / f"floor-{depth}.db", head, history=False)
        run.subjects[(FLOOR_HISTORY, depth)] = BareWrite(
            workdir / f"floorh-{depth}.db", head, history=True
        )
        if "burr" not in run.skipped:
            for name, path in ((BURR_SAVED, workdir / f"burr-{depth}.db"), (BURR_BARE, None)):
                burr = Burr(path)
                burr.grow(depth)
                run.subjects[(name, depth)] = burr


def measure(run: Run, rounds: int, batch: int, log: Callable[[str], None]) -> None:
    keys = list(run.subjects)
    for key in keys:  # one untimed batch each: caches, page cache, first-use costs
        run.subjects[key].take(batch)
    for r in range(rounds):
        log(f"round {r + 1}/{rounds}")
        shift = r % len(keys)
        for key in keys[shift:] + keys[:shift]:
            begun = time.perf_counter()
            run.subjects[key].take(batch)
            run.times.setdefault(key, []).append((time.perf_counter() - begun) / batch * 1e6)


def profile(run: Run, batch: int) -> str:
    """Where a SQLite step's time goes, as shares of ``Runtime.run``, from cProfile."""
    subject = run.subjects[(SQLITE, run.depths[-1])]
    profiler = cProfile.Profile()
    profiler.enable()
    subject.take(batch)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = stats.stats  # type: ignore[attr-defined]
    parts = {
        "load the head (reload / trusted)": ("commit.py", "head"),
        "view": ("phases.py", "begin"),
        "decide": ("policy.py", "decide"),
        "act: validate, run, verify, next state": ("act.py", "handle"),
        "commit: serialize, mask, diff": ("commit.py", "_serialize"),
        "commit: the event, masked": ("redact.py", "event"),
        "store.commit (encode, checksums, SQL)": ("sqlite.py", "commit"),
        "inbox read": ("inbox.py", "boundary"),
    }
    total = sum(v[3] for k, v in rows.items() if k[2] == "run" and k[0].endswith("runtime.py"))
    lines = ["| part | share of a step (cProfile) |", "| --- | ---: |"]
    for label, (path, func) in parts.items():
        spent = sum(v[3] for k, v in rows.items() if k[0].endswith(path) and k[2] == func)
        lines.append(f"| {label} | {spent / total:.0%} |" if total else f"| {label} | - |")
    return "\n".join(lines)


def med(values: Sequence[float] | None) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}{unit}" if value < 100 else f"{value:,.0f}{unit}"


def environment() -> str:
    versions = []
    for package in ("pydantic", "apache-burr", "orjson"):
        try:
            versions.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            versions.append(f"{package} not installed")
    return (
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs, {platform.system()}, " + ", ".join(versions)
    )


def report(run: Run, args: argparse.Namespace, loads: tuple[float, float], extra: str) -> str:
    depths = run.depths
    names = [SQLITE, MEMORY, FLOOR, FLOOR_HISTORY, BURR_SAVED, BURR_BARE]
    out = [
        "## A step against the storage floor (issue 30)",
        "",
        "```bash",
        "    ".join(["$ .venv/bin/python benchmarks/step_floor.py", *sys.argv[1:]]).strip(),
        "```",
        "",
        f"Run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {environment()}.",
        f"Load average (1 min) {loads[0]:.2f} at the start, {loads[1]:.2f} at the end.",
        f"{args.rounds} interleaved rounds of {args.batch} steps per subject and depth; the"
        f" card's head is {run.head_bytes:,} bytes of JSON.",
        "",
        "### µs per step (median over rounds)",
        "",
        "| subject | " + " | ".join(f"{d:,}" for d in depths) + " |",
        "| --- | " + " | ".join("---:" for _ in depths) + " |",
    ]
    for name in names:
        if any((name, d) in run.times for d in depths):
            cells = " | ".join(fmt(med(run.times.get((name, d)))) for d in depths)
            out.append(f"| {name} | {cells} |")
    for reason in run.skipped.values():
        out.append(f"\n- skipped: {reason}")
    checks: list[tuple[str, float | None, float]] = []
    out += ["", "### Ratios (same run, per depth)", ""]
    out.append("| ours | against | " + " | ".join(f"{d:,}" for d in depths) + " | target |")
    out.append("| --- | --- | " + " | ".join("---:" for _ in depths) + " | --- |")
    pairs = [(SQLITE, FLOOR, 4.0), (SQLITE, BURR_SAVED, 1.0), (MEMORY, BURR_BARE, 2.0)]
    for ours, theirs, limit in pairs:
        ratios = []
        for d in depths:
            a, b = med(run.times.get((ours, d))), med(run.times.get((theirs, d)))
            ratios.append(a / b if a is not None and b else None)
        out.append(
            f"| {ours} | {theirs} | "
            + " | ".join(fmt(r, "x") for r in ratios)
            + f" | ≤ {limit:g}x |"
        )
        for d, r in zip(depths, ratios, strict=True):
            checks.append((f"{ours} ≤ {limit:g}x {theirs} at depth {d:,}", r, limit))
    shallow, deep = (
        med(run.times.get((SQLITE, depths[0]))),
        med(run.times.get((SQLITE, depths[-1]))),
    )
    flat = deep / shallow if deep is not None and shallow else None
    label = f"{SQLITE} at depth {depths[-1]:,} ≤ 1.1x at depth {depths[0]:,}"
    checks.append((label, flat, 1.1))
    history = [med(run.times.get((FLOOR_HISTORY, d))) for d in depths]
    out.append(
        f"| {SQLITE} | {FLOOR_HISTORY} | "
        + " | ".join(
            fmt(a / b if a is not None and b else None, "x")
            for a, b in zip((med(run.times.get((SQLITE, d))) for d in depths), history, strict=True)
        )
        + " | (shown) |"
    )
    out += ["", "### Targets", ""]
    for what, value, limit in checks:
        verdict = "SKIP" if value is None else "PASS" if value <= limit else "FAIL"
        out.append(f"- {verdict}: {what} (measured {fmt(value, 'x')})")
    if extra:
        out += ["", "### Where a SQLite step's time goes (deepest depth)", "", extra]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.depths, args.rounds, args.batch = "50,200", 2, 20
    try:
        depths = sorted({int(d) for d in args.depths.split(",") if d.strip()})
    except ValueError:
        parser.error(f"--depths takes whole numbers separated by commas, got {args.depths!r}")
    if not depths or depths[0] < 1 or args.rounds < 1 or args.batch < 1:
        parser.error("--depths, --rounds and --batch must be at least 1")

    def log(message: str) -> None:
        print(f"step_floor: {message}", file=sys.stderr, flush=True)

    start_load = os.getloadavg()[0]
    run = Run(depths)
    with tempfile.TemporaryDirectory(prefix="step-floor-") as tmp:
        try:
            build(run, Path(tmp), log)
            measure(run, args.rounds, args.batch, log)
            extra = profile(run, args.batch) if args.profile else ""
        finally:
            for subject in run.subjects.values():
                subject.close()
    text = report(run, args, (start_load, os.getloadavg()[0]), extra)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
