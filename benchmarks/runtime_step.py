"""Runtime step: a whole agent step by task depth, against LangGraph and Burr, in one run.

    .venv/bin/python benchmarks/runtime_step.py [--depths 100,1000,10000]
        [--backends memory,sqlite,postgres,redis] [--rounds 15] [--batch 20] [--batches 1]
        [--loads 50] [--resume-depths 1000,10000] [--resume-runs 5] [--markdown PATH]
        [--quick]

Prints markdown (tables, then one PASS/FAIL line per target) on stdout, progress on
stderr; ``--markdown PATH`` also writes the same text to PATH. ``--quick`` is a smoke
run (depths 50,200; 1 round of 10-step batches; resume at 200, 1 run) in seconds.
The LangGraph rows need ``langgraph`` and ``langgraph-checkpoint-sqlite`` (the bench
extra), the Burr rows ``apache-burr``; a framework that is not installed, a backend
whose driver is missing or whose server does not answer is reported as skipped, with
the reason. Servers: ``$SKILLSTATE_BENCH_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432/test``; a fresh ``?schema=``, dropped at the
end) and ``$SKILLSTATE_BENCH_REDIS`` (default ``redis://127.0.0.1:6379/0``; a fresh
``?prefix=`` whose keys are deleted at the end). SQLite files live in a temp dir.
The run exits 1 if anything raised while measuring (a FAIL target does not).

The trivial step, the same on every side: a counter in the state goes up by one.

* skillstate: ``Agent`` with a ``ScriptedPolicy`` that always calls the one skill
  ``tick`` (``outputs=["counter"]``), whose verifier checks ``counter ==
  ctx.before.counter + 1`` (a real check: a failing verifier leaves the counter
  alone). ``Runtime(agent, store, max_stalled=None, max_repeats=None)``, lease on
  (the default). One step is everything the runtime does for one decision: load
  the head (every step starts from the stored head), build the view, decide,
  validate the action against the state machine, run, verify, build the next state,
  diff it, build the event, one compare-and-set commit, renew the lease. (The view's
  text and token count are rendered only when read: a scripted policy that ignores
  them does not pay for them, a model policy would.) Rows: ``run(task,
  max_steps=K)`` timed as a whole and divided by K (lease acquire/release and the
  resume recheck of a ``run`` call amortized over K steps; the headline shape) and
  ``step(task)`` called K times (one lease acquire/release, with its heartbeat
  thread, per step: "one call, one step").
* LangGraph: a ``StateGraph`` over a ``TypedDict`` (``counter``, ``request``,
  ``until``) with one node ``tick`` returning ``{"counter": counter + 1}``. Two
  shapes, because LangGraph has two natural "steps" (read from
  ``langgraph/pregel/_loop.py``):
  - invoke per step: ``START -> tick -> END``; one ``graph.invoke({"request": n},
    config)`` on the same ``thread_id`` is one step (a new input arrives, the node
    runs on the persisted state). With a checkpointer each invoke loads the head
    (``get_tuple``), writes the input checkpoint, the node's writes and the loop
    checkpoint: depth = number of prior invokes (2 checkpoints each). This is the
    shape the issue names and the like-for-like partner of ``step()``.
  - K-step loop: ``tick`` routes back to itself until ``counter >= until``; one
    ``invoke({"until": depth + K})`` runs K supersteps, timed as a whole and divided
    by K: the like-for-like partner of ``run(max_steps=K)`` (how a LangGraph agent
    loops between its nodes). Depth = prior supersteps.
  Each shape runs without a checkpointer ("bare": the caller passes the counter in,
  nothing is kept; depth does not apply, the same measurement is repeated in every
  depth column) and with ``SqliteSaver(sqlite3.connect(path,
  check_same_thread=False))`` as shipped (WAL, ``synchronous=FULL``: an fsync per
  commit; durability mode as shipped, ``"async"``: checkpoints are written in a
  background thread while the next superstep runs, and ``invoke`` returns once all
  are written). Each shape also runs on a second thread in its own file whose
  connection is set to ``synchronous=NORMAL`` (our SQLite store's setting: no fsync
  per commit, safe against a killed process), so the durability difference can be
  read off.
* Burr: an ``Application`` from ``ApplicationBuilder`` with one action ``tick``
  (``reads=writes=["counter"]``, transition ``tick -> tick``), stepped with
  ``app.step()``; without a persister, and with ``SQLitePersister`` (Burr's
  ``SQLLitePersister``) as shipped (rollback journal, ``synchronous=FULL``: a row
  per step). Depth = prior steps.

Depth: every configuration gets its own tasks / threads / apps at each depth (tasks
of one of our backends share its store, as tasks do), grown by the framework itself
before anything is timed, in calls of up to 1,000 steps (LangGraph's and Burr's
SQLite files with ``synchronous=OFF`` while growing, set back before measuring; our
stores as they are). How long growing took per step is printed too: a long run that
slows down with depth shows there. The timed batches at depth D stay near D: one
subject serves at most max(K, D/4) timed steps, grown to D minus half of that, then
a fresh one of its pool takes over (at depth 100 with batches of 20: a fresh task
each round, timed from 90 to 110; at 1,000: a task per 12 rounds, 880 to 1,120; at
10,000: one task, 9,850 to 10,150 over 15 rounds). The actual starting depths are
printed.

What is timed (``time.perf_counter_ns``, garbage collector on): one batch of K
steps (``--batch``) of one configuration at one depth. First one untimed batch of
each (first-use costs: lazy imports, caches). Then ``--rounds`` rounds; each round
takes every configuration at every depth once (``--batches`` batches each, the
round's value being their median, µs per step), in one fixed order whose starting
point moves along each round. The figure reported is the median over rounds, with
the min-max over rounds next to it. So a slow spell of this shared 2-core machine
hits every configuration and every depth alike: the ratios, including deep against
shallow, are read side by side from one run. After every batch (not timed) the
counter the framework returned must equal depth + K: K verified steps really ran;
at the end every counter is read back from storage (``Runtime.load``,
``graph.get_state``, ``persister.load``) and must equal the steps taken.

Why this is fair: every side does the same trivial work, through its public API,
with its storage as shipped, and pays for its own loading, bookkeeping and
persistence. Ours does more per step than either (view, verifier, state-machine
check, JSON Patch, event, lease renewal), not less. The batched
shapes are compared with each other and the per-call shapes with each other; the
issue's headline (our batched step against LangGraph's invoke per step) is printed
too, next to both like-for-like ratios.

Warm head load: ``Runtime.load(task_id)`` of the batched task on the open store
(LangGraph: ``graph.get_state(config)`` of the invoke thread; Burr:
``persister.load``), ``--loads`` calls timed one by one in each round after the
steps, median per round, median over rounds.

Fresh-process resume (after the rounds, at the ``--resume-depths`` that were
measured; the deepest depth if none is): wall-clock of ``subprocess.run([python,
"-c", code, ...])`` from spawn to exit, minus nothing: import the framework, define
the agent / compile the graph / build the app, open the store, load the head, print
the counter (checked), close. The code is the same source text this process
measures. Ours: ``Runtime(agent, store).load(task_id)`` (SQLite, PostgreSQL,
Redis); LangGraph: ``import langgraph`` + ``SqliteSaver``, compile the graph,
``graph.get_state(config)`` of the invoke thread; Burr:
``ApplicationBuilder.initialize_from(persister)``. ``python -c pass`` is measured
alongside. Extra rows (not targets) also take the next step in that process (ours
``run(max_steps=1)``, LangGraph one invoke, Burr ``app.step()``): a resume is
usually followed by work, and first-use costs land there; the task really advances
(checked; Burr's in-process app is rebuilt from its persister afterwards). One
untimed spawn of each first (page cache, bytecode), then ``--resume-runs``
interleaved rounds, median.

Targets (issue 13), printed as PASS/FAIL from this run's numbers, never tuned;
"every depth" is every depth of this run, "at 10,000" the deepest one:

* whole step with SQLite ≤ 0.5x LangGraph + SqliteSaver at every depth, checked
  three ways: as briefed (our ``run`` batch against one invoke per step) and like
  for like (batch against the K-step loop; ``step()`` against one invoke);
* the SQLite step at the deepest depth ≤ 1.5x the step at the shallowest;
* without persistence (memory store) ≤ 2x LangGraph's bare step, the same three ways;
* warm head load (``Runtime.load``, SQLite) at the deepest depth ≤ 2 ms;
* fresh-process resume (SQLite, load only) ≤ 0.5x LangGraph's, at each resume depth.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

# The servers (``$SKILLSTATE_BENCH_POSTGRES``, ``$SKILLSTATE_BENCH_REDIS``) and how
# to tell one is missing are the store benchmark's.
from store_overhead import POSTGRES_URL, REDIS_URL, probe_postgres, probe_redis

Log = Callable[[str], None]
GROW_CHUNK = 1000
"""Steps per call while growing a task (one ``run`` / ``invoke`` each)."""

# ----------------------------------------------------------------- the three programs
# Each is source text so that the fresh-process resume runs exactly what this process
# measures (``define`` executes the same text here).

SKILLSTATE_AGENT = '''
from skillstate import (
    Agent, AgentState, CallSkill, NoParams, Outcome, Runtime, ScriptedPolicy,
    SkillRegistry, StateMachine, Verdict,
)


class Counter(AgentState):
    counter: int = 0


skills = SkillRegistry()


@skills.skill(step="work", outputs=["counter"])
def tick(state: Counter, params: NoParams, ctx) -> Outcome:
    """Add one."""
    return Outcome(writes={"counter": state.counter + 1})


@tick.verifier
def counted(state: Counter, outcome: Outcome, ctx) -> Verdict:
    return Verdict(ok=state.counter == ctx.before.counter + 1)


agent = Agent(
    name="bench",
    state_type=Counter,
    machine=StateMachine({"init": ["work"], "work": ["work"]}),
    skills=skills,
    policy=ScriptedPolicy(lambda view: CallSkill(skill="tick")),
)


def runtime(store):
    return Runtime(agent, store, max_steps=10**6, max_stalled=None, max_repeats=None)
'''

SKILLSTATE_RESUME = (
    "import sys\n"
    + SKILLSTATE_AGENT
    + """
from skillstate.store import open_store

store = open_store(sys.argv[1])
if sys.argv[3] == "step":  # resume, then take the next step
    print(runtime(store).run(sys.argv[2], max_steps=1).state.counter)
else:
    print(runtime(store).load(sys.argv[2]).counter)
store.close()
"""
)

LANGGRAPH_GRAPH = """
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class Counter(TypedDict, total=False):
    counter: int
    request: int
    until: int


def tick(state: Counter) -> dict:
    return {"counter": state.get("counter", 0) + 1}


def again(state: Counter) -> str:
    return END if state["counter"] >= state["until"] else "tick"


def builder(loop: bool) -> StateGraph:
    graph = StateGraph(Counter)
    graph.add_node("tick", tick)
    graph.add_edge(START, "tick")
    if loop:
        graph.add_conditional_edges("tick", again, ["tick", END])
    else:
        graph.add_edge("tick", END)
    return graph
"""

LANGGRAPH_RESUME = (
    "import sqlite3\nimport sys\n"
    + LANGGRAPH_GRAPH
    + """
from langgraph.checkpoint.sqlite import SqliteSaver

conn = sqlite3.connect(sys.argv[1], check_same_thread=False)
graph = builder(loop=False).compile(checkpointer=SqliteSaver(conn))
config = {"configurable": {"thread_id": sys.argv[2]}}
if sys.argv[3] == "step":  # resume, then take the next step
    print(graph.invoke({"request": 0}, config)["counter"])
else:
    print(graph.get_state(config).values["counter"])
conn.close()
"""
)

BURR_APP = """
from burr.core import ApplicationBuilder, State, action


@action(reads=["counter"], writes=["counter"])
def tick(state: State) -> State:
    return state.update(counter=state["counter"] + 1)


def application(persister=None, app_id=None):
    built = ApplicationBuilder().with_actions(tick=tick).with_transitions(("tick", "tick"))
    if persister is None:
        return built.with_state(counter=0).with_entrypoint("tick").build()
    return (
        built.initialize_from(
            persister,
            resume_at_next_action=True,
            default_state={"counter": 0},
            default_entrypoint="tick",
        )
        .with_identifiers(app_id=app_id)
        .with_state_persister(persister)
        .build()
    )
"""

BURR_RESUME = (
    "import sys\n"
    + BURR_APP
    + """
from burr.core.persistence import SQLLitePersister

persister = SQLLitePersister(db_path=sys.argv[1], table_name="burr_state")
app = application(persister, sys.argv[2])
if sys.argv[3] == "step":  # resume, then take the next step
    app.step()
print(app.state["counter"])
persister.cleanup()
"""
)


def define(source: str, name: str) -> Any:
    """Execute one of the programs above as a module of this process."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


# ----------------------------------------------------------------------- subjects


class Subject(Protocol):
    """One task, thread or app at one depth: what a configuration steps."""

    depth: int
    """Steps taken so far (the counter's value)."""

    def take(self, steps: int) -> int:
        """Take ``steps`` steps; the counter the framework reports afterwards."""
        ...

    def grow(self, steps: int) -> None:
        """Take ``steps`` more steps, untimed (building the depth)."""
        ...

    def stored(self) -> int:
        """The counter read back from storage."""
        ...

    def load(self) -> object:
        """Load the head state (warm head load)."""
        ...

    def resume_args(self) -> list[str]:
        """Where a fresh process finds it: the store or database, then the id."""
        ...

    def refresh(self) -> None:
        """Another process stepped it: pick up from storage."""
        ...

    def close(self) -> None: ...


@dataclass
class Chunk:
    """One untimed growing call (printed: a long run slowing down with depth shows here)."""

    start: int
    end: int
    seconds: float


@dataclass
class Config:
    """One configuration (a row of the step table) and its subject at each depth."""

    name: str
    per_call: str
    """How many steps one timed call takes: "K" or "1"."""
    make: Callable[[], Subject]
    loader: str | None = None
    """How the warm head load row calls it, or None for no such row."""
    subjects: dict[int, list[Subject]] = field(default_factory=dict)
    """Depth -> its pool: subject ``i`` serves rounds ``i * per_subject`` onwards."""
    rounds: dict[int, list[float]] = field(default_factory=dict)
    """Depth -> µs per step, one value per round."""
    starts: dict[int, list[int]] = field(default_factory=dict)
    """Depth -> the depth each timed batch started at."""
    loads: dict[int, list[float]] = field(default_factory=dict)
    """Depth -> µs per head load, one median per round."""
    growth: dict[int, list[Chunk]] = field(default_factory=dict)


@dataclass
class Resume:
    """One row of the fresh-process table."""

    name: str
    code: str | None
    """``python -c`` source; None for ``python -c pass``."""
    config: Config | None = None
    """Whose subject it resumes (at each resume depth)."""
    mode: str = "load"
    """``load``: load the head; ``step``: resume, then take the next step."""
    runs: dict[int, list[float]] = field(default_factory=dict)
    """Depth -> wall-clock ms per spawn."""

    @property
    def steps(self) -> int:
        return 1 if self.mode == "step" else 0


def _restore(conn: sqlite3.Connection, synchronous: object) -> None:
    """Set a connection's durability back (a failed write may have left a transaction)."""
    if conn.in_transaction:
        conn.rollback()
    conn.execute(f"PRAGMA synchronous={synchronous}")


class SkillstateTask:
    """A skillstate task stepped by ``Runtime.run`` (batched) or ``Runtime.step``."""

    def __init__(self, runtime: Any, url: str, *, per_call: bool) -> None:
        self.runtime, self.url, self.per_call = runtime, url, per_call
        self.task_id = f"bench-{uuid.uuid4().hex[:8]}"
        self.depth = 0

    def take(self, steps: int) -> int:
        if not self.per_call:
            return self.runtime.run(self.task_id, max_steps=steps, create=True).state.counter
        report = None
        for _ in range(steps):
            report = self.runtime.step(self.task_id)
        assert report is not None
        return report.after.counter

    def grow(self, steps: int) -> None:
        result = self.runtime.run(self.task_id, max_steps=steps, create=True)
        if result.state.counter != self.depth + steps:
            raise RuntimeError(
                f"growing by {steps} gave counter {result.state.counter}, expected "
                f"{self.depth + steps} (stopped: {result.stopped})"
            )
        self.depth += steps

    def stored(self) -> int:
        return self.runtime.load(self.task_id).counter

    def load(self) -> object:
        return self.runtime.load(self.task_id)

    def resume_args(self) -> list[str]:
        return [self.url, self.task_id]

    def refresh(self) -> None:
        pass  # every step starts from the stored head

    def close(self) -> None:
        pass  # the store is shared by the backend's tasks and closed with it


class LangGraphThread:
    """A compiled graph on its own ``SqliteSaver`` file, one thread, one of the two shapes."""

    def __init__(self, lg: Any, path: Path, loop: bool, synchronous: str | None) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.path, self.loop = path, loop
        self.conn = sqlite3.connect(str(path), check_same_thread=False)
        saver = SqliteSaver(self.conn)
        saver.setup()
        if synchronous is not None:
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.setting = self.conn.execute("PRAGMA synchronous").fetchone()[0]
        """The durability measured: as shipped unless told (restored after growing)."""
        self.graph = lg.builder(loop).compile(checkpointer=saver)
        self.thread_id = f"bench-{uuid.uuid4().hex[:8]}"
        self.config: Any = {"configurable": {"thread_id": self.thread_id}}
        self.depth = 0

    def take(self, steps: int) -> int:
        if self.loop:
            config = {**self.config, "recursion_limit": steps + 10}
            return self.graph.invoke({"until": self.depth + steps}, config)["counter"]
        graph, config = self.graph, self.config
        out: Any = None
        for n in range(steps):
            out = graph.invoke({"request": n}, config)
        return out["counter"]

    def grow(self, steps: int) -> None:
        self.conn.execute("PRAGMA synchronous=OFF")
        try:
            self.depth = self.take(steps)
        finally:
            _restore(self.conn, self.setting)

    def stored(self) -> int:
        return self.graph.get_state(self.config).values["counter"]

    def load(self) -> object:
        return self.graph.get_state(self.config)

    def resume_args(self) -> list[str]:
        return [str(self.path), self.thread_id]

    def refresh(self) -> None:
        pass  # every invoke starts from the thread's last checkpoint

    def close(self) -> None:
        self.conn.close()


class LangGraphBare:
    """The same graph without a checkpointer: the caller carries the counter."""

    def __init__(self, lg: Any, loop: bool) -> None:
        self.loop = loop
        self.graph = lg.builder(loop).compile()
        self.depth = 0

    def take(self, steps: int) -> int:
        graph, counter = self.graph, self.depth
        if self.loop:
            config: Any = {"recursion_limit": steps + 10}
            return graph.invoke({"counter": counter, "until": counter + steps}, config)["counter"]
        for _ in range(steps):
            counter = graph.invoke({"counter": counter})["counter"]
        return counter

    def grow(self, steps: int) -> None:
        self.depth += steps  # nothing is kept between invokes: nothing to build

    def stored(self) -> int:
        return self.depth

    def load(self) -> object:
        raise NotImplementedError

    def resume_args(self) -> list[str]:
        raise NotImplementedError

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


class BurrApp:
    """A Burr application stepped with ``app.step()``, with or without a persister."""

    def __init__(self, burr: Any, path: Path | None) -> None:
        self.burr, self.path = burr, path
        self.app_id = f"bench-{uuid.uuid4().hex[:8]}"
        self.persister: Any = None
        if path is not None:
            from burr.core.persistence import SQLLitePersister

            self.persister = SQLLitePersister(db_path=str(path), table_name="burr_state")
            self.persister.initialize()
            self.setting = self.persister.connection.execute("PRAGMA synchronous").fetchone()[0]
        self.app = burr.application(self.persister, self.app_id)
        self.depth = 0

    def take(self, steps: int) -> int:
        app = self.app
        for _ in range(steps):
            app.step()
        return app.state["counter"]

    def grow(self, steps: int) -> None:
        if self.persister is None:
            self.depth = self.take(steps)
            return
        self.persister.connection.execute("PRAGMA synchronous=OFF")
        try:
            self.depth = self.take(steps)
        finally:
            _restore(self.persister.connection, self.setting)

    def stored(self) -> int:
        if self.persister is None:
            return self.app.state["counter"]
        return self.persister.load("", self.app_id)["state"]["counter"]

    def load(self) -> object:
        return self.persister.load("", self.app_id)

    def resume_args(self) -> list[str]:
        return [str(self.path), self.app_id]

    def refresh(self) -> None:
        # The app keeps its state in memory: after another process stepped it, it is
        # rebuilt from the persister, as a resuming process would.
        if self.persister is not None:
            self.app = self.burr.application(self.persister, self.app_id)

    def close(self) -> None:
        if self.persister is not None:
            self.persister.cleanup()


# ----------------------------------------------------------------------- backends


def _with_query(url: str, key: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{key}={value}"


class Place:
    """Where one of our backends keeps this run's data, and how to remove it."""

    def __init__(self, backend: str, workdir: Path) -> None:
        self.backend = backend
        tag = uuid.uuid4().hex[:8]
        self.schema = f"skillstate_bench_rtstep_{tag}"
        self.prefix = f"skillstate-bench-rtstep-{tag}"
        self.path = workdir / "skillstate.db"
        urls = {
            "memory": "memory://",
            "sqlite": f"sqlite:///{self.path}",
            "sqlite-full": f"sqlite:///{workdir / 'skillstate-full.db'}?synchronous=full",
            "postgres": _with_query(POSTGRES_URL, "schema", self.schema),
            "redis": _with_query(REDIS_URL, "prefix", self.prefix),
        }
        self.url = urls[backend]

    def drop(self) -> None:
        if self.backend == "postgres":
            import psycopg
            from psycopg import sql

            with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
                )
        elif self.backend == "redis":
            import redis

            client = redis.Redis.from_url(REDIS_URL)
            try:
                keys = list(client.scan_iter(match=f"{self.prefix}*"))
                for start in range(0, len(keys), 500):
                    client.delete(*keys[start : start + 500])
            finally:
                client.close()


BACKENDS: dict[str, Callable[[], str | None]] = {
    "memory": lambda: None,
    "sqlite": lambda: None,
    "sqlite-full": lambda: None,
    "postgres": probe_postgres,
    "redis": probe_redis,
}
SHARED = {"sqlite", "sqlite-full", "postgres", "redis"}
"""Backends a second process can open (fresh-process resume)."""
PER_CALL = {"memory", "sqlite"}
"""Backends that also get a ``step()`` per call row."""


def missing(package: str, *modules: str) -> str | None:
    """Why ``modules`` cannot be imported here (``package`` is what to install), or None."""
    for module in modules:
        try:
            if importlib.util.find_spec(module) is not None:
                continue
        except ModuleNotFoundError:
            pass
        return f"{module} is not installed (pip install {package})"
    return None


# ----------------------------------------------------------------------- the bench


@dataclass
class Bench:
    configs: list[Config] = field(default_factory=list)
    resumes: list[Resume] = field(default_factory=list)
    places: list[Place] = field(default_factory=list)
    stores: list[Any] = field(default_factory=list)
    created: list[Subject] = field(default_factory=list)
    """Every subject made (closed at the end, failed or not)."""
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    depths: list[int] = field(default_factory=list)
    resume_depths: list[int] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    per_subject: dict[int, int] = field(default_factory=dict)
    """Depth -> how many rounds one subject serves before the next of its pool takes over."""

    def live(self) -> list[tuple[Config, int]]:
        """Every (configuration, depth) still measured, shallowest depth first."""
        return [(c, d) for d in self.depths for c in self.configs if d in c.subjects]

    def subject(self, config: Config, depth: int, round_: int) -> Subject:
        """The subject of ``config`` at ``depth`` that serves round ``round_``."""
        pool = config.subjects[depth]
        return pool[min(round_ // self.per_subject[depth], len(pool) - 1)]

    def fail(self, config: Config, depth: int, error: str) -> None:
        """A subject raised: the configuration stops at that depth (what it measured stays)."""
        config.subjects.pop(depth, None)
        self.failed[f"{config.name} at {depth:,}"] = error


def setup_skillstate(bench: Bench, backends: Sequence[str], workdir: Path) -> None:
    ours = define(SKILLSTATE_AGENT, "runtime_step_skillstate")
    from skillstate.store import open_store

    for backend in backends:
        name = f"skillstate {backend}"
        reason = BACKENDS[backend]()
        if reason:
            bench.skipped[name] = reason
            continue
        place = Place(backend, workdir)
        bench.places.append(place)
        try:
            store = open_store(place.url)
        except Exception as exc:
            bench.failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        bench.stores.append(store)
        runtime = ours.runtime(store)  # one store and one runtime: a task per row and depth

        def task(per_call: bool, runtime: Any = runtime, url: str = place.url) -> Subject:
            return SkillstateTask(runtime, url, per_call=per_call)

        batched = Config(name, "K", lambda task=task: task(False), loader="Runtime.load")
        bench.configs.append(batched)
        if backend in PER_CALL:
            bench.configs.append(Config(f"{name}, step() per call", "1", lambda t=task: t(True)))
        if backend in SHARED:
            what = f"{name}: import + open store + Runtime.load"
            bench.resumes.append(Resume(what, SKILLSTATE_RESUME, batched))
            if backend == "sqlite":
                then = f"{what} + run(max_steps=1)"
                bench.resumes.append(Resume(then, SKILLSTATE_RESUME, batched, "step"))


def setup_langgraph(bench: Bench, workdir: Path) -> None:
    reason = missing("-e '.[bench]'", "langgraph.graph", "langgraph.checkpoint.sqlite")
    if reason:
        bench.skipped["langgraph"] = reason
        return
    lg = define(LANGGRAPH_GRAPH, "runtime_step_langgraph")

    def thread(loop: bool, synchronous: str | None) -> Subject:
        path = workdir / f"langgraph-{uuid.uuid4().hex[:8]}.db"
        return LangGraphThread(lg, path, loop, synchronous)

    for loop in (False, True):
        shape, per_call = ("K-step loop", "K") if loop else ("invoke per step", "1")
        bench.configs.append(
            Config(f"langgraph bare, {shape}", per_call, lambda loop=loop: LangGraphBare(lg, loop))
        )
        shipped = Config(
            f"langgraph + SqliteSaver, {shape}",
            per_call,
            lambda loop=loop: thread(loop, None),
            loader=None if loop else "graph.get_state",
        )
        normal = Config(
            f"langgraph + SqliteSaver sync=NORMAL, {shape}",
            per_call,
            lambda loop=loop: thread(loop, "NORMAL"),
        )
        bench.configs += [shipped, normal]
        if not loop:
            what = "langgraph + SqliteSaver: import + compile"
            bench.resumes.append(Resume(f"{what} + get_state", LANGGRAPH_RESUME, shipped))
            then = f"{what} + invoke (1 step)"
            bench.resumes.append(Resume(then, LANGGRAPH_RESUME, shipped, "step"))


def setup_burr(bench: Bench, workdir: Path) -> None:
    reason = missing("apache-burr", "burr.core", "burr.core.persistence")
    if reason:
        bench.skipped["burr"] = reason
        return
    burr = define(BURR_APP, "runtime_step_burr")
    bench.configs.append(Config(BURR_BARE, "1", lambda: BurrApp(burr, None)))
    saved = Config(
        BURR_SAVED,
        "1",
        lambda: BurrApp(burr, workdir / f"burr-{uuid.uuid4().hex[:8]}.db"),
        loader="persister.load",
    )
    bench.configs.append(saved)
    what = "burr + SQLitePersister: import + initialize_from"
    bench.resumes.append(Resume(what, BURR_RESUME, saved))
    bench.resumes.append(Resume(f"{what} + step()", BURR_RESUME, saved, "step"))


def rotated(items: Sequence[Any], by: int) -> list[Any]:
    if not items:
        return []
    by %= len(items)
    return [*items[by:], *items[:by]]


def plan(args: argparse.Namespace, depth: int) -> tuple[int, int]:
    """How many rounds one subject serves at ``depth``, and how many subjects that takes.

    A subject serves at most ``max(batch, depth / 4)`` timed steps, so the batches stay
    near the nominal depth however many rounds there are (at depth 100 with batches of
    20: a fresh task each round).
    """
    per_round = args.batch * args.batches
    drift = max(per_round, depth // 4)
    per_subject = max(1, min(args.rounds, drift // per_round))
    return per_subject, math.ceil(args.rounds / per_subject)


def grow(bench: Bench, args: argparse.Namespace, log: Log) -> None:
    """Each configuration's pool at each depth, grown so that its batches straddle the depth.

    The first subject of a pool also takes the untimed warm-up batch: it is grown that
    much less.
    """
    for depth in args.depths:
        per_subject, count = plan(args, depth)
        bench.per_subject[depth] = per_subject
        start = max(1 + args.batch, depth - per_subject * args.batch * args.batches // 2)
        for config in list(bench.configs):
            log(f"growing {config.name}: {count} x {start:,} steps (depth {depth:,})")
            pool: list[Subject] = []
            config.subjects[depth] = pool
            chunks = config.growth.setdefault(depth, [])
            try:
                for i in range(count):
                    subject = config.make()
                    bench.created.append(subject)
                    pool.append(subject)
                    target = start - args.batch if i == 0 else start
                    while subject.depth < target:
                        before = subject.depth
                        started = time.perf_counter()
                        subject.grow(min(GROW_CHUNK, target - before))
                        chunks.append(Chunk(before, subject.depth, time.perf_counter() - started))
            except Exception as exc:
                bench.fail(config, depth, f"growing: {type(exc).__name__}: {exc}")


def batch(bench: Bench, config: Config, depth: int, subject: Subject, steps: int) -> float | None:
    """Time one batch; µs per step, or None if it raised (the configuration stops there)."""
    before = subject.depth
    try:
        started = time.perf_counter_ns()
        counter = subject.take(steps)
        elapsed = time.perf_counter_ns() - started
        if counter != before + steps:
            raise RuntimeError(
                f"counter {counter} after {steps} steps from {before}: the steps did not all run"
            )
    except Exception as exc:
        bench.fail(config, depth, f"{type(exc).__name__}: {exc}")
        return None
    subject.depth = counter
    return elapsed / steps / 1000


def time_loads(bench: Bench, config: Config, depth: int, subject: Subject, loads: int) -> None:
    samples = []
    try:
        for _ in range(loads):
            started = time.perf_counter_ns()
            subject.load()
            samples.append(time.perf_counter_ns() - started)
    except Exception as exc:
        bench.fail(config, depth, f"load: {type(exc).__name__}: {exc}")
        return
    config.loads.setdefault(depth, []).append(statistics.median(samples) / 1000)


def read_back(bench: Bench) -> None:
    """Every subject's counter, read from its storage, must equal the steps it took."""
    for config, depth in bench.live():
        for subject in config.subjects[depth]:
            try:
                stored = subject.stored()
            except Exception as exc:
                bench.fail(config, depth, f"reading back: {type(exc).__name__}: {exc}")
                break
            if stored != subject.depth:
                error = f"storage holds counter {stored}, {subject.depth} steps were taken"
                bench.fail(config, depth, error)
                break


def rounds(bench: Bench, args: argparse.Namespace, log: Log) -> None:
    """Warm-up, then interleaved rounds over every configuration at every depth."""
    k = args.batch
    log("warm-up: one untimed batch per configuration and depth")
    for config, depth in bench.live():
        batch(bench, config, depth, bench.subject(config, depth, 0), k)
    shift = max(1, len(bench.live()) // args.rounds)  # each round starts elsewhere
    for r in range(args.rounds):
        log(f"round {r + 1}/{args.rounds}")
        for config, depth in rotated(bench.live(), r * shift):
            values = []
            for _ in range(args.batches):
                if depth not in config.subjects:  # it failed
                    break
                subject = bench.subject(config, depth, r)
                config.starts.setdefault(depth, []).append(subject.depth)
                value = batch(bench, config, depth, subject, k)
                if value is not None:
                    values.append(value)
            if depth in config.subjects and values:
                config.rounds.setdefault(depth, []).append(statistics.median(values))
        for config, depth in rotated(bench.live(), r * shift):
            if config.loader is not None and depth in config.subjects:
                time_loads(bench, config, depth, bench.subject(config, depth, r), args.loads)
    read_back(bench)


def spawn(bench: Bench, resume: Resume, depth: int, cwd: Path) -> float | None:
    """One fresh process; its wall-clock ms, or None if it failed (recorded)."""
    pool = resume.config.subjects.get(depth) if resume.config else None
    if resume.config is not None and not pool:
        return None  # failed in this process: nothing to resume
    subject = pool[-1] if pool else None
    args = [] if subject is None else [*subject.resume_args(), resume.mode]
    command = [sys.executable, "-c", resume.code or "pass", *args]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
    elapsed = time.perf_counter() - started
    expected = None if subject is None else subject.depth + resume.steps
    printed = done.stdout.split()
    got = printed[-1] if printed else ""
    if done.returncode != 0 or (expected is not None and got != str(expected)):
        tail = (done.stderr.strip().splitlines() or [""])[-1]
        bench.failed[f"{resume.name} at {depth:,}"] = (
            f"exit {done.returncode}, printed {got!r}, expected {expected}: {tail}"
        )
        return None
    if subject is not None and resume.steps:
        subject.depth += resume.steps
        subject.refresh()
    return elapsed * 1000


def measure_resume(bench: Bench, args: argparse.Namespace, log: Log) -> None:
    cwd = Path(tempfile.mkdtemp(prefix="skillstate-bench-resume-"))
    try:
        for depth in bench.resume_depths:
            for run in range(args.resume_runs + 1):  # run 0: untimed warm-up
                log(f"resume at depth {depth:,}: {'warm-up' if run == 0 else f'run {run}'}")
                for resume in rotated(bench.resumes, run):
                    ms = spawn(bench, resume, depth, cwd)
                    if run and ms is not None:
                        resume.runs.setdefault(depth, []).append(ms)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    read_back(bench)


def measure(args: argparse.Namespace, log: Log) -> Bench:
    workdir = Path(tempfile.mkdtemp(prefix="skillstate-bench-runtime-"))
    bench = Bench(depths=args.depths, resume_depths=args.resume_depths)
    try:
        setup_skillstate(bench, args.backends, workdir)
        setup_langgraph(bench, workdir)
        setup_burr(bench, workdir)
        bench.resumes.insert(0, Resume("python -c pass", None))
        bench.versions = environment(args.backends, bench.skipped)
        log(f"{len(bench.configs)} configurations x {len(args.depths)} depths")
        grow(bench, args, log)
        rounds(bench, args, log)
        measure_resume(bench, args, log)
    finally:
        for subject in bench.created:
            with contextlib.suppress(Exception):
                subject.close()
        for store in bench.stores:
            with contextlib.suppress(Exception):
                store.close()
        for place in bench.places:
            try:
                place.drop()
            except Exception as exc:
                bench.failed[f"cleanup {place.backend}"] = f"{type(exc).__name__}: {exc}"
        shutil.rmtree(workdir, ignore_errors=True)
    return bench


# ----------------------------------------------------------------------- reporting

SQLITE = "skillstate sqlite"
SQLITE_STEP = "skillstate sqlite, step() per call"
MEMORY = "skillstate memory"
MEMORY_STEP = "skillstate memory, step() per call"
LG_INVOKE = "langgraph + SqliteSaver, invoke per step"
LG_LOOP = "langgraph + SqliteSaver, K-step loop"
LG_NORMAL_INVOKE = "langgraph + SqliteSaver sync=NORMAL, invoke per step"
LG_NORMAL_LOOP = "langgraph + SqliteSaver sync=NORMAL, K-step loop"
LG_BARE_INVOKE = "langgraph bare, invoke per step"
LG_BARE_LOOP = "langgraph bare, K-step loop"
BURR_BARE = "burr bare, step()"
BURR_SAVED = "burr + SQLitePersister, step()"

TARGET_PAIRS = [
    # (our row, their row, limit, which reading)
    (SQLITE, LG_INVOKE, 0.5, "as briefed: our K-step run(), their invoke per step"),
    (SQLITE, LG_LOOP, 0.5, "like for like, K steps per call: their K-step loop"),
    (SQLITE_STEP, LG_INVOKE, 0.5, "like for like, 1 step per call: step() vs invoke"),
    (MEMORY, LG_BARE_INVOKE, 2.0, "as briefed: our K-step run(), their invoke per step"),
    (MEMORY, LG_BARE_LOOP, 2.0, "like for like, K steps per call: their K-step loop"),
    (MEMORY_STEP, LG_BARE_INVOKE, 2.0, "like for like, 1 step per call: step() vs invoke"),
]
INFO_PAIRS = [
    (SQLITE, LG_NORMAL_INVOKE),
    (SQLITE, LG_NORMAL_LOOP),
    (SQLITE_STEP, LG_NORMAL_INVOKE),
    (SQLITE_STEP, BURR_SAVED),
    (MEMORY_STEP, BURR_BARE),
]


def fmt_us(us: float | None) -> str:
    if us is None:
        return "-"
    return f"{us:,.1f}" if us < 100 else f"{us:,.0f}"


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def med(values: Sequence[float] | None) -> float | None:
    return statistics.median(values) if values else None


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or not theirs:
        return None
    return ours / theirs


def table(
    title: str,
    columns: list[str],
    rows: list[list[str]],
    notes: Sequence[str] = (),
    *,
    left: int = 1,
) -> str:
    """A markdown table; the first ``left`` columns are text, the others numbers."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    align = ["---"] * left + ["---:"] * (len(columns) - left)
    lines = [f"### {title}", ""]
    lines.append("| " + " | ".join(cell(c) for c in columns) + " |")
    lines.append("| " + " | ".join(align) + " |")
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    if notes:
        lines.append("")
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines)


def label(depth: int) -> str:
    return f"{depth:,}"


@dataclass
class Check:
    target: str
    measured: str
    passed: bool | None

    def line(self) -> str:
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[self.passed]
        return f"    {verdict}  {self.target}: {self.measured}"


@dataclass
class Report:
    bench: Bench
    args: argparse.Namespace
    parts: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)

    @property
    def depths(self) -> list[int]:
        return self.bench.depths

    @property
    def heads(self) -> list[str]:
        return [label(d) for d in self.depths]

    def step(self, name: str, depth: int) -> float | None:
        for row in self.bench.configs:
            if row.name == name:
                return med(row.rounds.get(depth))
        return None

    def ratios(self, ours: str, theirs: str) -> list[float | None]:
        return [ratio(self.step(ours, d), self.step(theirs, d)) for d in self.depths]

    def header(self, command: str) -> None:
        bench, args = self.bench, self.args
        now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        env = ", ".join(f"{k} {v}" for k, v in bench.versions.items())
        self.parts.append(
            "\n".join(
                [
                    "## Runtime step (issue 13)",
                    "",
                    "```bash",
                    f".venv/bin/{command}",
                    "```",
                    "",
                    f"Run {now}; {env}.",
                    "",
                    f"{args.rounds} interleaved round(s) x {args.batches} batch(es) of "
                    f"{args.batch} steps per configuration and depth; {args.loads} head loads "
                    f"per round; {args.resume_runs} fresh-process run(s) per configuration "
                    "and depth.",
                ]
            )
        )

    def steps(self) -> None:
        bench, depths, heads = self.bench, self.depths, self.heads
        rows, spread = [], []
        for config in bench.configs:
            values = [med(config.rounds.get(d)) for d in depths]
            deep = ratio(values[-1], values[0]) if len(depths) > 1 else None
            rows.append(
                [config.name, config.per_call, *(fmt_us(v) for v in values), fmt_ratio(deep)]
            )
            cells = []
            for d in depths:
                got = config.rounds.get(d)
                cells.append(f"{fmt_us(min(got))}-{fmt_us(max(got))}" if got else "-")
            spread.append([config.name, *cells])
        notes = [
            f"steps per call K = {self.args.batch}: run(max_steps=K), or one invoke looping K "
            "supersteps, timed whole and divided by K; 1: one call per step, K calls timed "
            "together and divided by K.",
            "every depth column is its own task / thread / app, all measured in the same "
            "interleaved rounds; bare LangGraph keeps nothing between invokes, so its "
            "columns repeat one measurement.",
        ]
        for d in depths:
            seen = [s for c in bench.configs for s in c.starts.get(d, [])]
            if seen:
                notes.append(
                    f"depth {d:,}: the timed batches started at depths {min(seen):,}-{max(seen):,}"
                )
        self.parts.append(
            table(
                "Whole step, µs per step (median over rounds)",
                ["configuration", "steps per call", *heads, f"{heads[-1]} / {heads[0]}"],
                rows,
                notes,
            )
        )
        self.parts.append(
            table(
                "Round-to-round spread, µs per step (min-max over rounds)",
                ["configuration", *heads],
                spread,
            )
        )

    def ratio_table(self) -> None:
        depths, heads = self.depths, self.heads
        rows = []
        for ours, theirs, limit, reading in TARGET_PAIRS:
            values = self.ratios(ours, theirs)
            rows.append([ours, theirs, *(fmt_ratio(v) for v in values)])
            known = [v for v in values if v is not None]
            family = "sqlite" if limit < 1 else "no-persistence (memory)"
            self.checks.append(
                Check(
                    f"{family} step ≤ {limit:g}x LangGraph's at every depth "
                    f"({' / '.join(heads)}; {reading})",
                    " / ".join(fmt_ratio(v) for v in values),
                    all(v <= limit for v in known) if len(known) == len(depths) else None,
                )
            )
        for ours, theirs in INFO_PAIRS:
            rows.append([ours, theirs, *(fmt_ratio(v) for v in self.ratios(ours, theirs))])
        self.parts.append(
            table(
                "Ratios, ours / theirs (same run, per depth)",
                ["ours", "theirs", *heads],
                [r for r in rows if any(c != "-" for c in r[2:])],
                [
                    "sync=NORMAL rows: LangGraph threads whose connection is set to our SQLite "
                    "store's durability (no fsync per commit)."
                ],
                left=2,
            )
        )
        if len(depths) > 1:
            deep, shallow = self.step(SQLITE, depths[-1]), self.step(SQLITE, depths[0])
            r = ratio(deep, shallow)
            self.checks.append(
                Check(
                    f"sqlite step at {heads[-1]} deep ≤ 1.5x the step at {heads[0]} deep",
                    f"{fmt_us(deep)} / {fmt_us(shallow)} µs = {fmt_ratio(r)}",
                    None if r is None else r <= 1.5,
                )
            )

    def loads(self) -> None:
        rows = [
            [f"{c.name}: {c.loader}", *(fmt_us(med(c.loads.get(d))) for d in self.depths)]
            for c in self.bench.configs
            if c.loads
        ]
        self.parts.append(
            table(
                "Warm head load, µs (median over rounds of each round's median)",
                ["configuration", *self.heads],
                rows,
            )
        )
        ours = next((c for c in self.bench.configs if c.name == SQLITE), None)
        if ours is not None:
            warm = med(ours.loads.get(self.depths[-1]))
            self.checks.append(
                Check(
                    f"warm head load (Runtime.load, sqlite) at {self.heads[-1]} steps ≤ 2 ms",
                    "-" if warm is None else f"{warm / 1000:.3f} ms",
                    None if warm is None else warm <= 2000,
                )
            )

    def resumes(self) -> None:
        bench = self.bench
        if not bench.resume_depths:
            return
        bare = bench.resumes[0]
        rows = []
        for resume in bench.resumes:
            if not resume.runs:
                continue
            cells = []
            for d in bench.resume_depths:
                ms, base = med(resume.runs.get(d)), med(bare.runs.get(d))
                if ms is None:
                    cells.append("-")
                elif base is None or resume is bare:
                    cells.append(f"{ms:,.0f}")
                else:
                    cells.append(f"{ms:,.0f} ({ms - base:,.0f})")
            rows.append([resume.name, *cells])
        self.parts.append(
            table(
                "Fresh-process resume, ms wall-clock from spawn to exit (median; in brackets: "
                "minus python -c pass)",
                ["configuration", *(label(d) for d in bench.resume_depths)],
                rows,
            )
        )
        loads = [r for r in bench.resumes if r.code is not None and not r.steps]
        ours = next((r for r in loads if r.name.startswith(f"{SQLITE}:")), None)
        theirs = next((r for r in loads if r.name.startswith("langgraph")), None)
        if ours is None:
            return
        for d in bench.resume_depths:
            a = med(ours.runs.get(d))
            b = med(theirs.runs.get(d)) if theirs else None
            r = ratio(a, b)
            self.checks.append(
                Check(
                    f"fresh process resumes a {d:,}-step task (sqlite) ≤ 0.5x LangGraph's time",
                    "-"
                    if r is None or a is None or b is None
                    else f"{a:,.0f} / {b:,.0f} ms = {fmt_ratio(r)}",
                    None if r is None else r <= 0.5,
                )
            )

    def growth(self) -> None:
        rows = []
        for config in self.bench.configs:
            if config.name.startswith("langgraph bare") or not config.growth:
                continue
            cells = []
            for d in self.depths:
                chunks = config.growth.get(d, [])
                steps = sum(c.end - c.start for c in chunks)
                seconds = sum(c.seconds for c in chunks)
                cells.append(fmt_us(seconds * 1e6 / steps) if steps else "-")
            last = config.growth.get(self.depths[-1], [])
            tail = last[-1] if last else None
            deepest = "-"
            if tail is not None and tail.end > tail.start:
                deepest = fmt_us(tail.seconds * 1e6 / (tail.end - tail.start))
            rows.append([config.name, *cells, deepest])
        if not rows:
            return
        self.parts.append(
            table(
                "Growing the depth: µs per step of the untimed calls that build each task "
                "(not a target)",
                [
                    "configuration",
                    *(f"0 to {h}" for h in self.heads),
                    f"last {GROW_CHUNK:,} before {self.heads[-1]}",
                ],
                rows,
                [
                    f"one run(max_steps=...) / invoke / loop of up to {GROW_CHUNK:,} steps per "
                    "call; the last column shows a long run's pace near the deepest depth. "
                    "LangGraph and Burr SQLite files grow with synchronous=OFF; ours as "
                    "measured. The first task grown also pays first-use costs (imports).",
                ],
            )
        )

    def problems(self) -> None:
        rows = [[k, "skipped", v] for k, v in self.bench.skipped.items()]
        rows += [[k, "FAILED", v] for k, v in self.bench.failed.items()]
        if rows:
            self.parts.append(
                table("Skipped or failed", ["what", "status", "reason"], rows, left=3)
            )

    def targets(self) -> None:
        self.parts.append("\n".join(["### Targets", "", *(c.line() for c in self.checks)]))


def report(bench: Bench, args: argparse.Namespace, command: str) -> str:
    out = Report(bench, args)
    out.header(command)
    out.steps()
    out.ratio_table()
    out.loads()
    out.resumes()
    out.growth()
    out.problems()
    out.targets()
    return "\n\n".join(out.parts) + "\n"


def environment(backends: Sequence[str], skipped: dict[str, str]) -> dict[str, str]:
    found = {
        "Python": platform.python_version(),
        "SQLite": sqlite3.sqlite_version,
        "CPUs": str(os.cpu_count()),
        "OS": platform.system(),
    }
    for package in (
        "skillstate",
        "pydantic",
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "apache-burr",
        "psycopg",
        "redis",
    ):
        with contextlib.suppress(PackageNotFoundError):
            found[package] = version(package)
    with contextlib.suppress(Exception):
        root = Path(__file__).resolve().parent.parent
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        found["commit"] = head + (" (src/ modified)" if dirty else "")
    if "postgres" in backends and "skillstate postgres" not in skipped:
        with contextlib.suppress(Exception):
            import psycopg

            with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
                found["PostgreSQL"] = conn.execute("SHOW server_version").fetchone()[0]
    if "redis" in backends and "skillstate redis" not in skipped:
        with contextlib.suppress(Exception):
            import redis

            client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
            found["Redis"] = str(client.info("server")["redis_version"])
            client.close()
    return found


# ----------------------------------------------------------------------- main


def ints(text: str) -> list[int]:
    return [int(part.replace("_", "")) for part in text.split(",") if part.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--depths", default=None, help="default 100,1000,10000")
    parser.add_argument(
        "--backends",
        default="memory,sqlite,postgres,redis",
        help=f"our backends (known: {', '.join(BACKENDS)}); LangGraph and Burr always run",
    )
    parser.add_argument("--rounds", type=int, default=None, help="default 15")
    parser.add_argument("--batch", type=int, default=None, help="steps per timed batch (20)")
    parser.add_argument("--batches", type=int, default=1, help="timed batches per round (1)")
    parser.add_argument("--loads", type=int, default=50, help="head loads timed per round")
    parser.add_argument(
        "--resume-depths",
        default="1000,10000",
        help="depths (among --depths) to time a fresh-process resume at",
    )
    parser.add_argument("--resume-runs", type=int, default=None, help="default 5")
    parser.add_argument("--markdown", type=Path, default=None, help="also write markdown here")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    args = parser.parse_args(argv)
    args.depths = sorted(set(ints(args.depths or ("50,200" if args.quick else "100,1000,10000"))))
    args.rounds = max(1, args.rounds or (1 if args.quick else 15))
    args.batch = max(1, args.batch or (10 if args.quick else 20))
    args.batches = max(1, args.batches)
    args.loads = max(1, args.loads if not args.quick else min(args.loads, 10))
    args.resume_runs = max(1, args.resume_runs or (1 if args.quick else 5))
    wanted = [d for d in ints(args.resume_depths) if d in args.depths]
    args.resume_depths = wanted or [args.depths[-1]]
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(BACKENDS)}")
    if min(args.depths) < 1:
        parser.error("depths must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f}s] {message}", file=sys.stderr, flush=True)

    command = "python benchmarks/runtime_step.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    bench = measure(args, log)
    text = report(bench, args, command.strip())
    print(text)
    if args.markdown:
        args.markdown.write_text(text, encoding="utf-8")
        log(f"markdown written to {args.markdown}")
    log("done")
    return 1 if bench.failed else 0


if __name__ == "__main__":
    sys.exit(main())
