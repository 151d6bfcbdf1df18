"""Store overhead: our stores against LangGraph's ``SqliteSaver``, same workloads, one run.

    .venv/bin/python benchmarks/store_overhead.py [--steps 10,100,1000]
        [--backends sqlite,sqlite-full,files,postgres,redis,memory] [--history-steps 200]
        [--writers 8] [--seconds 5] [--repeat 3] [--markdown PATH] [--quick]

The LangGraph side needs the ``bench`` extra (``pip install -e '.[bench]'``); without
it the LangGraph rows are skipped and no ratio is printed. A backend whose module is
not registered in ``skillstate.store._BACKENDS``, whose driver is missing or whose
server does not answer is reported as skipped, with the reason. Servers:
``$SKILLSTATE_BENCH_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``;
every measurement gets a fresh ``?schema=``, dropped at the end) and
``$SKILLSTATE_BENCH_REDIS`` (default ``redis://127.0.0.1:6379/0``; a fresh ``?prefix=``
whose keys are deleted at the end). SQLite and files stores live in a temp dir.
``--quick`` is a smoke run (steps 10,50; 1 s of concurrency) that takes seconds.

Workloads (identical documents on every side, generated deterministically):

* ``explicit``: a fixed-size state card (an ``AgentState`` as ``to_json()`` gives it,
  about 2.3 KB of JSON: goal, constraints, a bounded plan, 8 facts, a 4-entry evidence
  window, last decision). Each step writes ``version``, ``last_decision`` and one
  ``facts`` entry; every 10th step also moves ``current_step`` and ``active_skill`` and
  rolls the evidence window. The card's size stays constant.
* ``history``: the same card plus a ``history`` list that grows by one message of
  about 500 characters per step (the transcript shape).

What is timed, per step (``time.perf_counter_ns``, garbage collector left on):

* ours ("commit per step"): ``Differ.diff(prev, new)`` (the runtime's patch) +
  building the ``Event`` (skill,
  verdict, one tool call summary, the patch) + ``store.commit(task, v - 1, new, event)``.
  This is exactly what ``Runtime._commit`` does once the new document exists; building
  the document (``AgentState.evolve``/``to_json``) is not timed on either side.
* LangGraph: what one superstep of a compiled graph asks of its checkpointer, with
  the call shapes read from ``langgraph/pregel/_loop.py`` and checked against a real
  graph: ``put_writes`` of the node's writes (the fields it returned, plus the
  ``branch:to:policy`` routing write) against the previous checkpoint, then building
  the next checkpoint (``create_checkpoint``, new channel versions from
  ``get_next_version``, ``versions_seen``) and ``put``. Every top-level field is a
  channel; ``history`` is an ``operator.add`` channel, so a node writes only the new
  message while the checkpoint holds the whole list, as in a real graph. The saver
  runs as shipped (``SqliteSaver(sqlite3.connect(path))``: WAL, ``synchronous=FULL``).

Why this is fair: both sides persist the same documents, one committed transaction per
step (LangGraph: two, ``put_writes`` and ``put``), and both include their own
serialization and the bookkeeping their framework needs to record a step (our diff and
event; LangGraph's writes and checkpoint dict). The pregel machinery around
LangGraph's checkpointer (channels, task scheduling) is *not* timed, which favours
LangGraph; the "real StateGraph" table times a compiled graph end to end as a sanity
check. Our SQLite store runs with ``synchronous=NORMAL`` (safe from corruption in WAL
mode, may lose the last commits on power loss) while LangGraph's saver fsyncs every
commit, so the same saver with ``synchronous=NORMAL`` is also measured (``langgraph
(sync=NORMAL)``) and its ratio printed next to the as-shipped one. ``sqlite3 INSERT``
is the floor: ``json.dumps`` of the full document and one INSERT per step, WAL,
``synchronous=NORMAL``.

Bytes stored (``bytes/step`` = (bytes after the run - bytes of the same empty store
before the first commit) / steps; every measurement uses a fresh store):

* sqlite and every LangGraph row: the database file after
  ``PRAGMA wal_checkpoint(TRUNCATE)`` (includes free pages and fixed pages).
* files: the sum of the sizes of the files under the store directory.
* postgres: ``pg_total_relation_size`` summed over the tables of the fresh schema
  (indexes and TOAST included; dead tuples not yet vacuumed count). The "storage
  note" column gives the size after ``VACUUM FULL`` (taken after the loads), and for
  SQLite files how much of the file is free pages.
* redis: ``MEMORY USAGE`` summed over the keys under the fresh prefix.
* memory: UTF-8 bytes of the strings the store keeps (head, snapshots, patches, events).

Load head: ``store.load(task)`` at the end of the run (LangGraph: ``get_tuple`` of the
thread), median of 50 calls on the open store ("warm"), and median of 5 of opening a
new store from its URL plus one load ("cold").

Concurrency: ``--writers`` processes (``multiprocessing`` spawn), each committing the
explicit workload to its own task as fast as it can for ``--seconds``; the table gives
the sum of the writers' commits per second (memory is per process: not measured).

Targets (from the issue) are printed as PASS/FAIL from this run's numbers, never
tuned: "bytes per step flat" is read as the largest history bytes/step over the step
counts being at most twice the smallest. Timings on a shared 2-core machine move by
tens of percent between runs; bytes are deterministic.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import multiprocessing
import operator
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table as RichTable

from skillstate.events import Event, ToolCall, Verdict
from skillstate.state.diff import Differ, make_patch
from skillstate.state.model import AgentState, Decision, Evidence, StepRecord, TaskStatus
from skillstate.store import _BACKENDS, Store, open_store

Doc = dict[str, Any]

POSTGRES_URL = os.environ.get(
    "SKILLSTATE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("SKILLSTATE_BENCH_REDIS", "redis://127.0.0.1:6379/0")
WARM_LOADS = 50
COLD_LOADS = 5
BRANCH = "branch:to:policy"
"""The routing channel a looping LangGraph node writes every step."""

# ---------------------------------------------------------------------------- workloads

FACT_KEYS = (
    "order_id",
    "customer_tier",
    "amount_eur",
    "currency",
    "carrier",
    "eta_days",
    "refund_policy",
    "risk_score",
)
SKILLS = ("lookup_order", "check_policy", "quote_refund", "notify_customer")
PLAN = ("collect", "verify", "decide", "act", "report")
TEXT = (
    "the order shipped from the Lisbon warehouse on Monday and the carrier reports a delay "
    "because customs asked for an updated invoice with the corrected VAT number before "
    "release customer wrote twice asking for a refund of the shipping fee policy allows "
    "a partial refund when delivery is late by more than five business days tool returned "
    "three candidate refunds with amounts in EUR and the tracking history of each parcel"
)
WORDS = tuple(TEXT.split())


@dataclass(frozen=True)
class Step:
    """One step of a workload: the new document and what the step wrote."""

    version: int
    doc: Doc
    written: dict[str, Any]
    """Field -> value as a LangGraph node returns it (``history``: only the new message)."""
    skill: str
    tool_call: ToolCall


def _text(seed: int, length: int) -> str:
    rng = random.Random(seed)
    words = [f"[{seed}]"]
    size = len(words[0])
    while size < length:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length]


def _ref(seed: int) -> str:
    return "sha256:" + f"{seed:08x}" * 8


def _evidence(seed: int) -> Doc:
    return Evidence(
        kind="tool_output",
        source=SKILLS[seed % len(SKILLS)],
        summary=_text(seed, 80),
        ref=_ref(seed),
    ).model_dump(mode="json")


def _fact(key: str, version: int) -> str:
    return f"{key}:{version:07d}"


class Workload:
    """The explicit workload: a fixed-size card, 3 fields written per step."""

    name = "explicit"

    def initial(self, task_id: str) -> Doc:
        card = AgentState(
            task_id=task_id,
            status=TaskStatus.RUNNING,
            goal="Refund the late-delivery fee of order A-1042 if the policy allows it, "
            "and tell the customer what was decided.",
            constraints=(
                "Never refund more than 150 EUR without a human approval.",
                "Only contact the customer through the ticket thread.",
                "Quote the policy clause for every refund decision.",
            ),
            current_step=PLAN[0],
            completed_steps=tuple(
                StepRecord(
                    id=f"{i:04d}-{skill}",
                    step=PLAN[0],
                    action="call_skill",
                    skill=skill,
                    summary=f"{skill} done",
                )
                for i, skill in enumerate(SKILLS[:3], start=1)
            ),
            pending_steps=PLAN[1:],
            facts={key: _fact(key, 1) for key in FACT_KEYS},
            evidence=tuple(Evidence.model_validate(_evidence(i)) for i in range(4)),
            last_decision=Decision(action="call_skill", target=SKILLS[0], reason="start"),
            active_skill=SKILLS[0],
            agent="skillstate.examples.orders:agent",
            version=1,
        )
        return card.to_json()

    def next(self, prev: Doc, version: int) -> Step:
        """The document of ``version`` (copy on write: ``prev`` is left untouched)."""
        doc = dict(prev)
        skill = SKILLS[version % len(SKILLS)]
        key = FACT_KEYS[version % len(FACT_KEYS)]
        facts = {**prev["facts"], key: _fact(key, version)}
        decision = {
            "action": "call_skill",
            "target": skill,
            "reason": f"step {version:05d}: {key} is needed before the next decision",
        }
        written: dict[str, Any] = {"version": version, "facts": facts, "last_decision": decision}
        if version % 10 == 0:
            written["current_step"] = PLAN[(version // 10) % len(PLAN)]
            written["active_skill"] = skill
            written["evidence"] = [*prev["evidence"][1:], _evidence(version)]
        doc.update(written)
        tool_call = ToolCall(
            tool=f"orders.{skill}",
            args={"order_id": "A-1042", "field": key},
            summary=f"{key} = {facts[key]}",
            ref=_ref(version),
            duration_ms=12.5,
        )
        return Step(version, doc, written, skill, tool_call)


class HistoryWorkload(Workload):
    """The history-shaped workload: the card plus one ~500-character message per step."""

    name = "history"

    def initial(self, task_id: str) -> Doc:
        return {**super().initial(task_id), "history": []}

    def next(self, prev: Doc, version: int) -> Step:
        step = super().next(prev, version)
        role = ("assistant", "tool", "user")[version % 3]
        message = {"role": role, "content": _text(version, 480)}
        step.doc["history"] = [*prev["history"], message]
        step.written["history"] = [message]
        return step


WORKLOADS: dict[str, Workload] = {"explicit": Workload(), "history": HistoryWorkload()}
VERDICT = Verdict.passed("the step's outputs satisfy its postconditions")


def build_event(task_id: str, prev: Doc, step: Step, differ: Differ) -> tuple[Event, Doc]:
    """The event and document the runtime commits with ``step`` (timed with the commit).

    The patch comes from the runtime's :class:`Differ`, which also returns the
    document with its JSON text attached so the store does not serialize it twice.
    """
    patch, stored = differ.diff(prev, step.doc)
    return Event(
        task_id=task_id,
        version=step.version,
        actor="policy",
        action={
            "kind": "call_skill",
            "skill": step.skill,
            "params": {"order_id": "A-1042"},
            "reason": step.doc["last_decision"]["reason"],
        },
        step_id=f"{step.version:04d}-{step.skill}",
        skill=step.skill,
        skill_version="1.2.0",
        verdict=VERDICT,
        attempts=1,
        tool_calls=(step.tool_call,),
        patch=patch,
        view_tokens=850,
    ), stored


def first_event(task_id: str, doc: Doc) -> Event:
    return Event(
        task_id=task_id,
        version=1,
        actor="runtime",
        action={"kind": "start"},
        patch=make_patch({}, doc),
    )


# ---------------------------------------------------------------------------- results


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 10 samples is their maximum)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class Cell:
    """One system x workload x steps measurement."""

    system: str
    workload: str
    steps: int
    commit_ns: list[int] = field(default_factory=list)
    total_bytes: int | None = None
    empty_bytes: int | None = None
    load_warm_ns: float | None = None
    load_cold_ns: float | None = None
    note: str = ""

    @property
    def p50_us(self) -> float:
        return statistics.median(self.commit_ns) / 1000

    @property
    def p99_us(self) -> float:
        return percentile(self.commit_ns, 99) / 1000

    @property
    def stored(self) -> int | None:
        """Bytes the run added to the empty store."""
        if self.total_bytes is None:
            return None
        return self.total_bytes - (self.empty_bytes or 0)

    @property
    def bytes_per_step(self) -> float | None:
        stored = self.stored
        return None if stored is None else stored / self.steps


@dataclass
class Throughput:
    system: str
    writers: int
    seconds: float
    commits: int
    per_second: float
    slowest: float
    fastest: float


# ---------------------------------------------------------------------------- backends


class Target(Protocol):
    """A fresh, empty place for one store: its URL, how to size it, how to remove it."""

    url: str

    def bytes_stored(self, store: Store) -> int: ...

    def detail(self) -> str:
        """Anything the bytes figure hides (free pages, dead tuples), once the run is over."""
        ...

    def drop(self) -> None: ...


@dataclass(frozen=True)
class Backend:
    """One of our backends. ``make(workdir, tag)`` gives a fresh target; one line each."""

    name: str
    scheme: str
    make: Callable[[Path, str], Target]
    probe: Callable[[], str | None] = lambda: None
    """A reason the backend cannot run here, or None."""
    shared: bool = True
    """Whether separate processes (and reopening the URL) see the same data."""

    def unavailable(self) -> str | None:
        if self.scheme not in _BACKENDS:
            return f"no {self.scheme}:// backend registered in skillstate.store._BACKENDS"
        return self.probe()


def sqlite_file_bytes(path: Path) -> int:
    """The file's size once the WAL is checkpointed into it and truncated."""
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=30.0)
    try:
        # Our store checkpoints the WAL from a background thread; if it is mid-pass,
        # wait for it rather than measure a half-checkpointed file.
        for _ in range(50):
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"could not checkpoint {path} (busy)")
    finally:
        conn.close()
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def sqlite_free_pages(path: Path) -> str:
    """How much of the file is free pages (left by rewriting the head row in place)."""
    conn = sqlite3.connect(str(path))
    try:
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    return f"{fmt_bytes(free * page)} of free pages" if free else ""


def _unlink_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class MemoryTarget:
    url = "memory://"

    def __init__(self, workdir: Path, tag: str) -> None:
        pass

    def bytes_stored(self, store: Store) -> int:
        total = 0
        for task in getattr(store, "_tasks", {}).values():
            total += len(task.head.encode())
            for row in task.rows.values():
                total += len((row.snapshot or "").encode()) + len((row.patch or "").encode())
            total += sum(len(text.encode()) for _, text in task.events)
        return total

    def detail(self) -> str:
        return ""

    def drop(self) -> None:
        pass


class SQLiteTarget:
    def __init__(self, workdir: Path, tag: str) -> None:
        self.path = workdir / f"{tag}.db"
        self.url = f"sqlite:///{self.path}"

    def bytes_stored(self, store: Store) -> int:
        return sqlite_file_bytes(self.path)

    def detail(self) -> str:
        return sqlite_free_pages(self.path)

    def drop(self) -> None:
        _unlink_sqlite(self.path)


class SQLiteFullTarget(SQLiteTarget):
    """Our SQLite store with ``synchronous=FULL``: the durability LangGraph ships with."""

    def __init__(self, workdir: Path, tag: str) -> None:
        super().__init__(workdir, tag)
        self.url += "?synchronous=full"


class FilesTarget:
    def __init__(self, workdir: Path, tag: str) -> None:
        self.path = workdir / tag
        self.url = f"file://{self.path}"

    def bytes_stored(self, store: Store) -> int:
        if not self.path.exists():
            return 0
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def detail(self) -> str:
        return ""

    def drop(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _with_query(url: str, key: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{key}={value}"


class PostgresTarget:
    def __init__(self, workdir: Path, tag: str) -> None:
        self.schema = f"skillstate_bench_{tag.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        self.url = _with_query(POSTGRES_URL, "schema", self.schema)

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)

    def bytes_stored(self, store: Store) -> int:
        with self._connect() as conn:
            return self._size(conn)

    def _size(self, conn: Any) -> int:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'm')",
            (self.schema,),
        ).fetchone()
        return int(row[0])

    def detail(self) -> str:
        """The size once dead tuples (old heads rewritten by every commit) are vacuumed."""
        from psycopg import sql

        with self._connect() as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (self.schema,)
            ).fetchall()
            for (table,) in tables:
                name = sql.Identifier(self.schema, table)
                conn.execute(sql.SQL("VACUUM FULL {}").format(name))
            return f"{fmt_bytes(self._size(conn))} after VACUUM FULL"

    def drop(self) -> None:
        from psycopg import sql

        with self._connect() as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
            )


class RedisTarget:
    def __init__(self, workdir: Path, tag: str) -> None:
        self.prefix = f"skillstate-bench-{tag}-{uuid.uuid4().hex[:8]}"
        self.url = _with_query(REDIS_URL, "prefix", self.prefix)

    def _keys(self) -> Iterator[Any]:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        try:
            yield from ((client, key) for key in client.scan_iter(match=f"{self.prefix}:*"))
        finally:
            client.close()

    def bytes_stored(self, store: Store) -> int:
        return sum(int(client.memory_usage(key, samples=0) or 0) for client, key in self._keys())

    def detail(self) -> str:
        return ""

    def drop(self) -> None:
        keys = list(self._keys())
        if keys:
            import redis

            client = redis.Redis.from_url(REDIS_URL)
            try:
                for start in range(0, len(keys), 500):
                    client.delete(*(key for _, key in keys[start : start + 500]))
            finally:
                client.close()


def probe_postgres() -> str | None:
    """Why the PostgreSQL benchmarks cannot run (no driver, no server), or ``None``."""
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (the postgres extra)"
    import psycopg

    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"{POSTGRES_URL} not reachable: {str(exc).strip().splitlines()[0]}"
    return None


def probe_redis() -> str | None:
    """Why the Redis benchmarks cannot run (no driver, no server), or ``None``."""
    if importlib.util.find_spec("redis") is None:
        return "redis is not installed (the redis extra)"
    import redis

    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
        client.ping()
        client.close()
    except redis.RedisError as exc:
        return f"{REDIS_URL} not reachable: {exc}"
    return None


BACKENDS: dict[str, Backend] = {
    "sqlite": Backend("sqlite", "sqlite", SQLiteTarget),
    "sqlite-full": Backend("sqlite-full", "sqlite", SQLiteFullTarget),
    "files": Backend("files", "file", FilesTarget),
    "postgres": Backend("postgres", "postgresql", PostgresTarget, probe_postgres),
    "redis": Backend("redis", "redis", RedisTarget, probe_redis),
    "memory": Backend("memory", "memory", MemoryTarget, shared=False),
}


# ---------------------------------------------------------------------------- our stores


def _median_ns(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter_ns()
        action()
        samples.append(time.perf_counter_ns() - started)
    return statistics.median(samples)


def run_store(backend: Backend, workload: Workload, steps: int, workdir: Path) -> Cell:
    """Commit ``steps`` steps to a fresh store, then size it and time loading the head."""
    tag = f"{backend.name}-{workload.name}-{steps}"
    task_id = f"bench-{workload.name}-{steps}"
    cell = Cell(backend.name, workload.name, steps)
    target = backend.make(workdir, tag)
    try:
        store = open_store(target.url)
        try:
            cell.empty_bytes = target.bytes_stored(store)
            doc = workload.initial(task_id)
            store.commit(task_id, 0, doc, first_event(task_id, doc))
            differ = Differ()
            for version in range(2, steps + 2):
                step = workload.next(doc, version)
                started = time.perf_counter_ns()
                event, stored = build_event(task_id, doc, step, differ)  # patch + Event
                store.commit(task_id, version - 1, stored, event)
                cell.commit_ns.append(time.perf_counter_ns() - started)
                doc = stored
            cell.total_bytes = target.bytes_stored(store)
            head = store.load(task_id)
            if head.version != steps + 1 or head.state != doc:
                raise RuntimeError(f"{backend.name}: the loaded head is not the last commit")
            cell.load_warm_ns = _median_ns(lambda: store.load(task_id), WARM_LOADS)
        finally:
            store.close()
        if backend.shared:
            cold: list[int] = []
            for _ in range(COLD_LOADS):
                started = time.perf_counter_ns()
                reopened = open_store(target.url)
                reopened.load(task_id)
                cold.append(time.perf_counter_ns() - started)
                reopened.close()
            cell.load_cold_ns = statistics.median(cold)
        cell.note = target.detail()
    finally:
        target.drop()
    return cell


# ---------------------------------------------------------------------------- LangGraph


def langgraph_missing() -> str | None:
    for module in ("langgraph.graph", "langgraph.checkpoint.sqlite"):
        try:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (the bench extra)"
        except ModuleNotFoundError:
            return f"{module} is not installed (the bench extra)"
    return None


@dataclass(frozen=True)
class SaverVariant:
    name: str
    synchronous: str | None
    """``PRAGMA synchronous`` to set on the saver's connection; None keeps the default."""


LANGGRAPH_VARIANTS = (
    SaverVariant("langgraph", None),
    SaverVariant("langgraph (sync=NORMAL)", "NORMAL"),
)


def _thread_config(thread_id: str) -> Any:
    """A ``RunnableConfig`` naming the thread's head."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


class SaverThread:
    """One LangGraph thread driven through a checkpointer the way the pregel loop does."""

    def __init__(self, saver: Any, thread_id: str) -> None:
        self.saver = saver
        self.config: Any = _thread_config(thread_id)
        self.checkpoint: dict[str, Any] = {}

    def start(self, doc: Doc) -> None:
        """The input checkpoint (step -1), then the first loop checkpoint (step 0)."""
        from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

        saver = self.saver
        first: dict[str, Any] = dict(empty_checkpoint())
        start = saver.get_next_version(None, None)
        first.update(
            channel_values={"__start__": doc},
            channel_versions={"__start__": start},
            versions_seen={"__input__": {}},
        )
        self.config = saver.put(
            self.config, first, {"source": "input", "step": -1, "parents": {}}, {"__start__": start}
        )
        versions = {"__start__": start}
        for channel in (*doc, BRANCH):
            versions[channel] = saver.get_next_version(None, None)
        first.update(
            channel_values={**doc, BRANCH: None},
            channel_versions=versions,
            versions_seen={"__input__": {}, "__start__": {"__start__": start}},
        )
        self.checkpoint = dict(create_checkpoint(first, None, 0))  # type: ignore[arg-type]
        self.config = saver.put(
            self.config, self.checkpoint, {"source": "loop", "step": 0, "parents": {}}, versions
        )

    def step(self, step: Step, superstep: int, task_id: str) -> None:
        """What one superstep persists: the node's writes, then the new checkpoint."""
        from langgraph.checkpoint.base import create_checkpoint

        saver, previous = self.saver, self.checkpoint
        saver.put_writes(self.config, [*step.written.items(), (BRANCH, None)], task_id)
        versions = dict(previous["channel_versions"])
        new_versions: dict[str, Any] = {}
        for channel in (*step.written, BRANCH):
            versions[channel] = new_versions[channel] = saver.get_next_version(
                versions.get(channel), None
            )
        seen = {
            **previous["versions_seen"],
            "policy": {BRANCH: previous["channel_versions"][BRANCH]},
        }
        following = {
            **previous,
            "channel_values": {**step.doc, BRANCH: None},
            "channel_versions": versions,
            "versions_seen": seen,
        }
        self.checkpoint = dict(create_checkpoint(following, None, superstep))  # type: ignore[arg-type]
        self.config = saver.put(
            self.config,
            self.checkpoint,
            {"source": "loop", "step": superstep, "parents": {}},
            new_versions,
        )


def run_langgraph(variant: SaverVariant, workload: Workload, steps: int, workdir: Path) -> Cell:
    """The same steps through ``SqliteSaver``, as one graph superstep each persists them."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = workdir / f"lg-{variant.synchronous or 'default'}-{workload.name}-{steps}.db"
    thread_id = f"bench-{workload.name}-{steps}"
    cell = Cell(variant.name, workload.name, steps)
    conn = sqlite3.connect(str(path), check_same_thread=False)  # as from_conn_string does
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        if variant.synchronous:
            conn.execute(f"PRAGMA synchronous={variant.synchronous}")
        cell.empty_bytes = sqlite_file_bytes(path)
        thread = SaverThread(saver, thread_id)
        doc = workload.initial(thread_id)
        thread.start(doc)  # untimed, like our first commit
        for version in range(2, steps + 2):
            step = workload.next(doc, version)
            task_id = str(uuid.uuid4())  # pregel derives it before running the node
            started = time.perf_counter_ns()
            thread.step(step, version - 1, task_id)
            cell.commit_ns.append(time.perf_counter_ns() - started)
            doc = step.doc
        cell.total_bytes = sqlite_file_bytes(path)
        cell.note = sqlite_free_pages(path)
        head = saver.get_tuple(_thread_config(thread_id))
        if head is None or head.checkpoint["channel_values"] != {**doc, BRANCH: None}:
            raise RuntimeError("LangGraph: the loaded head is not the last checkpoint")
        cell.load_warm_ns = _median_ns(
            lambda: saver.get_tuple(_thread_config(thread_id)), WARM_LOADS
        )
    finally:
        conn.close()

    def cold_load() -> None:
        fresh = sqlite3.connect(str(path), check_same_thread=False)
        try:
            SqliteSaver(fresh).get_tuple(_thread_config(thread_id))
        finally:
            fresh.close()

    cell.load_cold_ns = _median_ns(cold_load, COLD_LOADS)
    _unlink_sqlite(path)
    return cell


def run_bare_insert(workload: Workload, steps: int, workdir: Path) -> Cell:
    """The floor: ``json.dumps`` of the whole document and one INSERT per step."""
    path = workdir / f"bare-{workload.name}-{steps}.db"
    task_id = f"bench-{workload.name}-{steps}"
    cell = Cell("sqlite3 INSERT (full JSON)", workload.name, steps)
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(
            "CREATE TABLE states (task_id TEXT, version INTEGER, doc TEXT, "
            "PRIMARY KEY (task_id, version)) WITHOUT ROWID"
        )
        cell.empty_bytes = sqlite_file_bytes(path)
        insert = "INSERT INTO states VALUES (?, ?, ?)"
        doc = workload.initial(task_id)
        conn.execute(insert, (task_id, 1, json.dumps(doc)))
        for version in range(2, steps + 2):
            step = workload.next(doc, version)
            started = time.perf_counter_ns()
            conn.execute(insert, (task_id, version, json.dumps(step.doc)))
            cell.commit_ns.append(time.perf_counter_ns() - started)
            doc = step.doc
        cell.total_bytes = sqlite_file_bytes(path)
        cell.note = sqlite_free_pages(path)
        query = "SELECT doc FROM states WHERE task_id = ? ORDER BY version DESC LIMIT 1"
        cell.load_warm_ns = _median_ns(
            lambda: json.loads(conn.execute(query, (task_id,)).fetchone()[0]), WARM_LOADS
        )
    finally:
        conn.close()
    _unlink_sqlite(path)
    return cell


def run_langgraph_graph(workload: Workload, steps: int, workdir: Path) -> Cell:
    """A compiled one-node ``StateGraph`` looping ``steps`` times on a ``SqliteSaver``.

    Timed: the interval between consecutive superstep updates of ``graph.stream`` with
    ``durability="sync"`` (each step's checkpoint is written before the next step).
    """
    from typing import Annotated, TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    thread_id = f"graph-{workload.name}-{steps}"
    doc = workload.initial(thread_id)
    fields: dict[str, Any] = dict.fromkeys(doc, Any)
    if "history" in fields:
        fields["history"] = Annotated[list, operator.add]
    card = TypedDict("Card", fields)  # type: ignore[misc]  # one channel per field
    last = steps + 1

    def policy(state: Any) -> dict[str, Any]:
        return workload.next(dict(state), state["version"] + 1).written

    def route(state: Any) -> str:
        return END if state["version"] >= last else "policy"

    builder = StateGraph(card)
    builder.add_node("policy", policy)
    builder.add_edge(START, "policy")
    builder.add_conditional_edges("policy", route)
    path = workdir / f"graph-{workload.name}-{steps}.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    cell = Cell("langgraph StateGraph", workload.name, steps)
    try:
        graph = builder.compile(checkpointer=SqliteSaver(conn))
        config: Any = {"configurable": {"thread_id": thread_id}, "recursion_limit": steps + 10}
        # The first update also covers the input checkpoint: start timing after it.
        previous: int | None = None
        initial: Any = doc
        for _ in graph.stream(initial, config, stream_mode="updates", durability="sync"):
            now = time.perf_counter_ns()
            if previous is not None:
                cell.commit_ns.append(now - previous)
            previous = now
        if graph.get_state(config).values["version"] != last:
            raise RuntimeError("StateGraph did not reach the last version")
    finally:
        conn.close()
    cell.total_bytes = sqlite_file_bytes(path)
    _unlink_sqlite(path)
    cell.steps = len(cell.commit_ns)
    return cell


# ---------------------------------------------------------------------------- concurrency


def _writer(url: str, task_id: str, seconds: float, barrier: Any, results: Any) -> None:
    """One writer process: commit the explicit workload to its own task until time is up."""
    try:
        workload = WORKLOADS["explicit"]
        store = open_store(url)
        doc = workload.initial(task_id)
        store.commit(task_id, 0, doc, first_event(task_id, doc))
        differ = Differ()
        barrier.wait(timeout=120)
        version, commits = 2, 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            step = workload.next(doc, version)
            event, stored = build_event(task_id, doc, step, differ)
            store.commit(task_id, version - 1, stored, event)
            doc, version, commits = stored, version + 1, commits + 1
        elapsed = time.perf_counter() - started
        store.close()
        results.put((commits, elapsed, None))
    except Exception as exc:
        barrier.abort()
        results.put((0, 0.0, f"{type(exc).__name__}: {exc}"))


def run_concurrency(backend: Backend, writers: int, seconds: float, workdir: Path) -> Throughput:
    ctx = multiprocessing.get_context("spawn")
    target = backend.make(workdir, f"{backend.name}-concurrency")
    try:
        open_store(target.url).close()  # create the schema once, not in 8 racing processes
        barrier = ctx.Barrier(writers + 1)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=_writer,
                args=(target.url, f"writer-{i}", seconds, barrier, results),
                daemon=True,
            )
            for i in range(writers)
        ]
        for proc in procs:
            proc.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=180)
        outcomes = [results.get(timeout=seconds + 180) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
    finally:
        target.drop()
    errors = [error for _, _, error in outcomes if error]
    if errors:
        raise RuntimeError(f"{len(errors)} writer(s) failed: {errors[0]}")
    rates = [commits / elapsed for commits, elapsed, _ in outcomes]
    return Throughput(
        backend.name,
        writers,
        seconds,
        sum(commits for commits, _, _ in outcomes),
        sum(rates),
        min(rates),
        max(rates),
    )


# ---------------------------------------------------------------------------- reporting


@dataclass
class Table:
    """A table printed with rich and written as markdown from the same cells."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    right: set[int] = field(default_factory=set)
    """Indices of right-aligned (numeric) columns."""

    def rich(self) -> RichTable:
        table = RichTable(title=self.title, title_justify="left", title_style="bold")
        for i, column in enumerate(self.columns):
            table.add_column(column, justify="right" if i in self.right else "left")
        for row in self.rows:
            table.add_row(*row)
        return table

    def markdown(self) -> str:
        def cell(text: str) -> str:
            return text.replace("|", "\\|")

        align = ["---:" if i in self.right else "---" for i in range(len(self.columns))]
        lines = [f"### {self.title}", ""]
        lines.append("| " + " | ".join(cell(c) for c in self.columns) + " |")
        lines.append("| " + " | ".join(align) + " |")
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        if self.notes:
            lines.append("")
            lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines)


def fmt_us(ns: float | None) -> str:
    if ns is None:
        return "-"
    us = ns / 1000
    return f"{us:,.1f}" if us < 100 else f"{us:,.0f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.3f}x" if ratio < 10 else f"{ratio:.1f}x"


SYSTEM_ORDER = [
    *BACKENDS,
    *(v.name for v in LANGGRAPH_VARIANTS),
    "sqlite3 INSERT (full JSON)",
    "langgraph StateGraph",
]


def cells_table(title: str, cells: list[Cell]) -> Table:
    table = Table(
        title,
        [
            "system",
            "steps",
            "commit p50 (µs)",
            "commit p99 (µs)",
            "bytes/step",
            "bytes total",
            "load head warm (µs)",
            "load head cold (µs)",
        ],
        right={1, 2, 3, 4, 5, 6, 7},
    )
    notes = any(c.note for c in cells)
    if notes:
        table.columns.append("storage note")
    order = {name: i for i, name in enumerate(SYSTEM_ORDER)}
    for c in sorted(cells, key=lambda c: (order.get(c.system, 99), c.steps)):
        per_step = c.bytes_per_step
        row = [
            c.system,
            str(c.steps),
            fmt_us(c.p50_us * 1000),
            fmt_us(c.p99_us * 1000),
            "-" if per_step is None else f"{per_step:,.0f}",
            fmt_bytes(c.total_bytes),
            fmt_us(c.load_warm_ns),
            fmt_us(c.load_cold_ns),
        ]
        table.rows.append([*row, c.note] if notes else row)
    return table


@dataclass
class Check:
    target: str
    measured: str
    passed: bool | None


def find(cells: list[Cell], system: str, workload: str, steps: int) -> Cell | None:
    for c in cells:
        if (c.system, c.workload, c.steps) == (system, workload, steps):
            return c
    return None


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs == 0:
        return None
    return ours / theirs


def ratios_table(cells: list[Cell], backends: list[str], top: int, history: int) -> Table:
    table = Table(
        "Ours / LangGraph (same run)",
        [
            "metric",
            "backend",
            "ours",
            "langgraph",
            "ratio",
            "langgraph (sync=NORMAL)",
            "ratio vs sync=NORMAL",
        ],
        right={2, 3, 4, 5, 6},
    )
    lg, lg_normal = (v.name for v in LANGGRAPH_VARIANTS)
    metrics: list[tuple[str, str, int, Callable[[Cell], float | None], Callable[[float], str]]] = [
        ("commit p50 (µs)", "explicit", top, lambda c: c.p50_us * 1000, fmt_us),
        ("commit p99 (µs)", "explicit", top, lambda c: c.p99_us * 1000, fmt_us),
        ("commit p50 (µs)", "history", top, lambda c: c.p50_us * 1000, fmt_us),
        ("bytes stored", "history", history, lambda c: c.stored, fmt_bytes),
        ("bytes stored", "explicit", top, lambda c: c.stored, fmt_bytes),
        ("load head warm (µs)", "history", top, lambda c: c.load_warm_ns, fmt_us),
        ("load head cold (µs)", "history", top, lambda c: c.load_cold_ns, fmt_us),
    ]
    for label, workload, steps, get, fmt in metrics:
        base = find(cells, lg, workload, steps)
        normal = find(cells, lg_normal, workload, steps)
        theirs = get(base) if base else None
        theirs_normal = get(normal) if normal else None
        for name in backends:
            cell = find(cells, name, workload, steps)
            if cell is None:
                continue
            ours = get(cell)
            table.rows.append(
                [
                    f"{label}, {workload}, {steps} steps",
                    name,
                    "-" if ours is None else fmt(ours),
                    "-" if theirs is None else fmt(theirs),
                    fmt_ratio(ratio(ours, theirs)),
                    "-" if theirs_normal is None else fmt(theirs_normal),
                    fmt_ratio(ratio(ours, theirs_normal)),
                ]
            )
    return table


def targets(
    cells: list[Cell],
    throughput: dict[str, Throughput],
    *,
    backends: list[str],
    steps: list[int],
    history: int,
    writers: int,
) -> list[Check]:
    checks: list[Check] = []
    top = max(steps)
    lg = find(cells, LANGGRAPH_VARIANTS[0].name, "explicit", top)
    ours = find(cells, "sqlite", "explicit", top)
    if ours is not None:
        r = ratio(ours.p50_us, lg.p50_us) if lg else None
        checks.append(
            Check(
                f"sqlite commit p50 ≤ 0.25x LangGraph's (explicit, {top} steps)",
                "LangGraph not measured" if r is None else f"{r:.3f}x",
                None if r is None else r <= 0.25,
            )
        )
        checks.append(
            Check(
                f"sqlite commit p99 ≤ 2 ms (explicit, {top} steps)",
                f"{ours.p99_us / 1000:.2f} ms",
                ours.p99_us <= 2000,
            )
        )
    lg_hist = find(cells, LANGGRAPH_VARIANTS[0].name, "history", history)
    for name in backends:
        cell = find(cells, name, "history", history)
        if cell is None or cell.stored is None:
            continue
        theirs = lg_hist.stored if lg_hist else None
        r = ratio(cell.stored, theirs)
        checks.append(
            Check(
                f"{name}: bytes after {history} history steps ≤ 1/20 of LangGraph's",
                "LangGraph not measured"
                if r is None
                else f"{fmt_bytes(cell.stored)} vs {fmt_bytes(theirs)} = 1/{1 / r:.1f}",
                None if r is None else r <= 1 / 20,
            )
        )
    for name in [*backends, LANGGRAPH_VARIANTS[0].name]:
        per_step = [
            (n, c.bytes_per_step)
            for n in steps
            if (c := find(cells, name, "history", n)) and c.bytes_per_step
        ]
        if len(per_step) < 2:
            continue
        values = [v for _, v in per_step if v is not None]
        spread = max(values) / min(values)
        checks.append(
            Check(
                f"{name}: history bytes/step flat from {min(steps)} to {top} steps (max/min ≤ 2)",
                " / ".join(f"{v:,.0f}" for _, v in per_step) + f" (max/min {spread:.2f})",
                spread <= 2,
            )
        )
    for name in backends:
        for workload in WORKLOADS:
            cell = find(cells, name, workload, top)
            if cell is None or cell.load_warm_ns is None:
                continue
            checks.append(
                Check(
                    f"{name}: load head of a {top}-step {workload} task ≤ 2 ms (warm)",
                    f"{cell.load_warm_ns / 1e6:.3f} ms",
                    cell.load_warm_ns <= 2e6,
                )
            )
    for name, floor in (("postgres", 1000), ("redis", 3000)):
        if name in throughput:
            t = throughput[name]
            checks.append(
                Check(
                    f"{name}: ≥ {floor:,} commits/s with {writers} concurrent writers",
                    f"{t.per_second:,.0f}/s",
                    t.per_second >= floor,
                )
            )
    return checks


# ---------------------------------------------------------------------------- main


def warm_up() -> None:
    """Import and exercise every code path once so the first measured step is not cold."""
    store = open_store("memory://")
    for workload in WORKLOADS.values():
        task_id = f"warm-{workload.name}"
        doc = workload.initial(task_id)
        store.commit(task_id, 0, doc, first_event(task_id, doc))
        differ = Differ()
        for version in range(2, 30):
            step = workload.next(doc, version)
            event, stored = build_event(task_id, doc, step, differ)
            store.commit(task_id, version - 1, stored, event)
            doc = stored
        store.load(task_id)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--steps", default=None, help="step counts (default 10,100,1000)")
    parser.add_argument(
        "--backends",
        default="sqlite,sqlite-full,files,postgres,redis,memory",
        help="our backends to measure (LangGraph always runs as the baseline)",
    )
    parser.add_argument("--history-steps", type=int, default=None, help="default 200")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=None, help="default 5")
    parser.add_argument("--markdown", type=Path, default=None, help="also write markdown here")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="runs per cell, keeping the run with the median commit p50 (default 3)",
    )
    args = parser.parse_args(argv)
    args.repeat = max(1, args.repeat or (1 if args.quick else 3))
    args.steps = [
        int(s) for s in (args.steps or ("10,50" if args.quick else "10,100,1000")).split(",")
    ]
    args.history_steps = args.history_steps or (50 if args.quick else 200)
    args.seconds = args.seconds or (1.0 if args.quick else 5.0)
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(BACKENDS)}")
    return args


@dataclass
class Results:
    """Everything one run measured, and what it could not."""

    backends: list[str]
    """Our backends that ran (in the order asked)."""
    langgraph: bool
    cells: list[Cell] = field(default_factory=list)
    graph_cells: list[Cell] = field(default_factory=list)
    throughput: dict[str, Throughput] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    """Unavailable here (no module, driver or server): not an error."""
    failed: dict[str, str] = field(default_factory=dict)
    """Raised while measuring: the run exits 1."""


def available(names: Sequence[str]) -> Results:
    """Which of our backends and whether LangGraph can run here (and why not)."""
    results = Results(backends=[], langgraph=True)
    for name in names:
        reason = BACKENDS[name].unavailable()
        if reason:
            results.skipped[name] = reason
        else:
            results.backends.append(name)
    lg_reason = langgraph_missing()
    if lg_reason:
        results.langgraph = False
        results.skipped["langgraph"] = lg_reason
    return results


def measure(args: argparse.Namespace, log: Console) -> Results:
    results = available(args.backends)
    warm_up()
    workdir = Path(tempfile.mkdtemp(prefix="skillstate-bench-"))
    try:
        for workload in WORKLOADS.values():
            counts = set(args.steps)
            if workload.name == "history":
                counts.add(args.history_steps)
            for steps in sorted(counts):
                measure_steps(results, workload, steps, workdir, log, repeat=args.repeat)
        if results.langgraph:
            for workload in WORKLOADS.values():
                log.print(f"[dim]langgraph StateGraph {workload.name} {max(args.steps)} steps[/]")
                results.graph_cells.append(run_langgraph_graph(workload, max(args.steps), workdir))
        measure_concurrency(results, args.writers, args.seconds, workdir, log)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def measure_concurrency(
    results: Results, writers: int, seconds: float, workdir: Path, log: Console
) -> None:
    for name in results.backends:
        if not BACKENDS[name].shared:
            continue
        log.print(f"[dim]{name}: {writers} writers for {seconds:g} s[/]")
        try:
            results.throughput[name] = run_concurrency(BACKENDS[name], writers, seconds, workdir)
        except Exception as exc:
            results.failed[f"{name} (concurrency)"] = f"{type(exc).__name__}: {exc}"


def median_run(runs: Sequence[Cell]) -> Cell:
    """Of repeated runs of one cell, the one whose commit p50 is the median.

    This machine's timings drift between runs by tens of percent (a shared 2-core
    VM); every system gets the same number of runs, so the ratios compare like
    with like. Bytes are identical across runs.
    """
    return sorted(runs, key=lambda cell: cell.p50_us)[len(runs) // 2]


def measure_steps(
    results: Results, workload: Workload, steps: int, workdir: Path, log: Console, *, repeat: int
) -> None:
    """Every system on one workload at one step count (each ``repeat`` times)."""
    for name in list(results.backends):
        log.print(f"[dim]{name} {workload.name} {steps} steps[/]")
        try:
            runs = [run_store(BACKENDS[name], workload, steps, workdir) for _ in range(repeat)]
            results.cells.append(median_run(runs))
        except Exception as exc:
            results.failed[name] = f"{type(exc).__name__}: {exc}"
            results.backends.remove(name)
    if not results.langgraph:
        return
    for variant in LANGGRAPH_VARIANTS:
        log.print(f"[dim]{variant.name} {workload.name} {steps} steps[/]")
        runs = [run_langgraph(variant, workload, steps, workdir) for _ in range(repeat)]
        results.cells.append(median_run(runs))
    bare = [run_bare_insert(workload, steps, workdir) for _ in range(repeat)]
    results.cells.append(median_run(bare))


def build_tables(args: argparse.Namespace, results: Results) -> list[Table]:
    cells = results.cells
    tables = [
        cells_table(
            f"Commit latency, bytes stored, load head: {workload} workload",
            [c for c in cells if c.workload == workload],
        )
        for workload in WORKLOADS
    ]
    if results.graph_cells:
        graph = cells_table(
            "Real LangGraph StateGraph on SqliteSaver (sanity check)", results.graph_cells
        )
        graph.notes.append(
            "per-superstep interval of graph.stream(..., durability='sync'), the first "
            "superstep (which also writes the input checkpoint) left out; bytes: the "
            "database file after the run (no separate empty baseline)"
        )
        tables.append(graph)
    conc = Table(
        f"Concurrency: {args.writers} writer processes, {args.seconds:g} s, explicit workload",
        ["backend", "writers", "commits", "commits/s (total)", "per writer min-max"],
        right={1, 2, 3, 4},
    )
    for t in results.throughput.values():
        conc.rows.append(
            [
                t.system,
                str(t.writers),
                f"{t.commits:,}",
                f"{t.per_second:,.0f}",
                f"{t.slowest:,.0f}-{t.fastest:,.0f}",
            ]
        )
    if "memory" in results.backends:
        conc.notes.append("memory: not shared between processes, not measured")
    tables.append(conc)
    if results.langgraph:
        tables.append(ratios_table(cells, results.backends, max(args.steps), args.history_steps))
    checks = targets(
        cells,
        results.throughput,
        backends=results.backends,
        steps=args.steps,
        history=args.history_steps,
        writers=args.writers,
    )
    verdicts = Table("Targets", ["target", "measured", "result"])
    for check in checks:
        result = {True: "PASS", False: "FAIL", None: "n/a"}[check.passed]
        verdicts.rows.append([check.target, check.measured, result])
    tables.append(verdicts)
    problems = [[k, "skipped", v] for k, v in results.skipped.items()]
    problems += [[k, "FAILED", v] for k, v in results.failed.items()]
    if problems:
        tables.append(Table("Skipped or failed", ["what", "status", "reason"], problems))
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Console() if sys.stdout.isatty() else Console(width=200)
    log = Console(stderr=True)
    command = "python benchmarks/store_overhead.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    results = measure(args, log)
    tables = build_tables(args, results)
    for table in tables:
        out.print(table.rich())
        for note in table.notes:
            out.print(f"  [dim]{note}[/]")
        out.print()
    out.print("[bold]Definitions[/]")
    for line in DEFINITIONS:
        out.print(f"  - {line}")
    if args.markdown:
        args.markdown.write_text(render_markdown(command, tables), encoding="utf-8")
        log.print(f"markdown written to {args.markdown}")
    return 1 if results.failed else 0


DEFINITIONS = [
    "commit: ours = Differ.diff + Event(...) + store.commit; LangGraph = put_writes + "
    "create_checkpoint + put (what one superstep persists); sqlite3 INSERT = json.dumps + "
    "one INSERT. p50/p99 are nearest-rank over the run's steps.",
    "bytes/step = (bytes after the run - bytes of the empty store) / steps. sqlite and "
    "LangGraph: database file after PRAGMA wal_checkpoint(TRUNCATE); files: sum of file "
    "sizes; postgres: pg_total_relation_size over the schema's tables; redis: MEMORY USAGE "
    "over the prefix's keys; memory: UTF-8 bytes of the stored strings. Storage note: "
    "free pages inside a SQLite file; a Postgres schema's size after VACUUM FULL.",
    "load head warm: median of 50 loads on the open store (LangGraph: get_tuple); cold: "
    "median of 5 x (open a new store from its URL + load).",
    "langgraph = SqliteSaver as shipped (WAL, synchronous=FULL: fsync per commit); "
    "langgraph (sync=NORMAL) = the same saver with our store's durability setting.",
]


def _environment() -> str:
    parts = [
        f"Python {platform.python_version()}",
        f"SQLite {sqlite3.sqlite_version}",
        f"{os.cpu_count()} CPUs",
        platform.system(),
    ]
    with contextlib.suppress(Exception):
        from importlib.metadata import version

        parts.append(f"langgraph {version('langgraph')}")
        parts.append(f"langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')}")
    return ", ".join(parts)


def render_markdown(command: str, tables: list[Table]) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Store overhead",
        "",
        "```bash",
        f".venv/bin/{command}",
        "```",
        "",
        f"Run {now}; {_environment()}.",
        "",
    ]
    for table in tables:
        lines += [table.markdown(), ""]
    lines.append("Definitions:")
    lines.append("")
    lines += [f"- {line}" for line in DEFINITIONS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
