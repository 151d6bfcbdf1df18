"""SkillstateSaver against LangGraph's own savers, same workloads, one run.

    .venv/bin/python benchmarks/langgraph_saver.py [--steps 100,1000] [--history-steps 200]
        [--backends sqlite,postgres] [--repeat 3] [--markdown PATH] [--quick]

Both sides are LangGraph checkpointers driven exactly alike: the workloads and the
superstep driver are ``benchmarks/store_overhead.py``'s (``explicit``: a fixed-size
2.3 KB card, 3 fields written per step; ``history``: the same card plus a message
list that grows by one ~500-character message per step, an ``operator.add`` channel).
Each superstep is ``put_writes`` of the node's writes, then ``put`` of the next
checkpoint, as a compiled graph's loop calls them.

Pairs, each on a fresh database:

* ``sqlite``: ``SkillstateSaver.from_url("sqlite:///...")`` against LangGraph's
  ``SqliteSaver`` as shipped (``sqlite3.connect``; WAL, ``synchronous=FULL``) and the same
  saver with ``synchronous=NORMAL``, our store's setting. Bytes: the database file
  after ``PRAGMA wal_checkpoint(TRUNCATE)``.
* ``postgres``: ``SkillstateSaver.from_url("postgresql://...?schema=...")`` against
  ``PostgresSaver`` (``langgraph-checkpoint-postgres``) on its own fresh schema. Bytes:
  ``pg_total_relation_size`` over the schema's tables. Server:
  ``$SKILLSTATE_BENCH_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
  skipped, with the reason, when it does not answer.

Timed per step (``perf_counter_ns``): ``put_writes`` + ``put`` ("step"), and ``put``
alone. ``get``: median of 50 ``get_tuple`` of the thread's latest checkpoint at the end
(warm). ``old first`` / ``old middle`` / ``old latest``: median of 50 ``get_tuple`` naming
a checkpoint by its id (the first superstep's, the middle one's, the last one's),
read in turn (so no position is read twice in a row), each checked to return that
checkpoint's values. Ratios are ours / LangGraph's from the same run; below 1 is
better for us. Repeats run the systems in interleaved rounds (ours, theirs, ours,
...), and the median run is kept.

Issue 30's targets, printed PASS/FAIL per SQLite cell against ``SqliteSaver
(sync=NORMAL)`` (the same durability as our store): ``put`` p50 ≤ 1.5x; reading an
old checkpoint (the worst of the three positions) ≤ 2x; bytes ≤ 0.7x. The load
average is printed at the start and the end: on a busy machine the timings move
by tens of percent between runs, the bytes never do. ``--quick`` (20 steps, one
run) finishes in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rich.console import Console
from store_overhead import (  # the workloads and the superstep driver, shared
    POSTGRES_URL,
    WORKLOADS,
    PostgresTarget,
    SaverThread,
    Table,
    Workload,
    fmt_bytes,
    fmt_ratio,
    fmt_us,
    probe_postgres,
    sqlite_file_bytes,
)

GETS = 50
POSITIONS = ("first", "middle", "latest")
"""Where the old checkpoints read by id sit in the thread."""
TARGETS = {"put": 1.5, "old read": 2.0, "bytes": 0.7}
"""Issue 30: skillstate / SqliteSaver (sync=NORMAL), at most."""
TARGET_PEER = "SqliteSaver (sync=NORMAL)"


@dataclass
class Run:
    """One saver on one workload at one step count."""

    system: str
    backend: str
    workload: str
    steps: int
    step_ns: list[int] = field(default_factory=list)
    put_ns: list[int] = field(default_factory=list)
    get_ns: float = 0.0
    old_ns: dict[str, float] = field(default_factory=dict)
    """``get_tuple`` by checkpoint id, per position (:data:`POSITIONS`)."""
    stored: int = 0
    vacuumed: int | None = None
    """PostgreSQL: the bytes once dead tuples are gone (``VACUUM FULL``)."""

    @property
    def worst_old(self) -> float:
        return max(self.old_ns.values(), default=0.0)

    @property
    def per_checkpoint(self) -> float:
        return self.stored / self.steps

    @property
    def per_checkpoint_vacuumed(self) -> float | None:
        return None if self.vacuumed is None else self.vacuumed / self.steps


def vacuumed_bytes(target: PostgresTarget, empty: int) -> int:
    """The schema's bytes after ``VACUUM FULL``, less those of the empty schema."""
    target.detail()  # runs VACUUM FULL on every table of the schema
    return target.bytes_stored(None) - empty  # type: ignore[arg-type]


class Timed:
    """The saver, with ``put`` timed (the driver sees the saver's own methods)."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver
        self.put_ns: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.saver, name)

    def put(self, *args: Any) -> Any:
        started = time.perf_counter_ns()
        result = self.saver.put(*args)
        self.put_ns.append(time.perf_counter_ns() - started)
        return result


def drive(run: Run, saver: Any, size: Callable[[], int], workload: Workload) -> Run:
    """Run the workload through ``saver``; ``size()`` is the bytes stored so far."""
    empty = size()
    thread_id = f"bench-{workload.name}-{run.steps}"
    timed = Timed(saver)
    thread = SaverThread(timed, thread_id)
    doc = workload.initial(thread_id)
    thread.start(doc)  # the input and first loop checkpoints: untimed on both sides
    timed.put_ns.clear()
    wanted = {0: "first", run.steps // 2: "middle", run.steps - 1: "latest"}
    marks: dict[str, tuple[Any, dict[str, Any]]] = {}
    for version in range(2, run.steps + 2):
        step = workload.next(doc, version)
        started = time.perf_counter_ns()
        thread.step(step, version - 1, str(uuid.uuid4()))
        run.step_ns.append(time.perf_counter_ns() - started)
        doc = step.doc
        if version - 2 in wanted:
            marks[wanted[version - 2]] = (thread.config, doc)
    run.put_ns = timed.put_ns
    run.stored = size() - empty
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    head = saver.get_tuple(config)
    # Compared on the workload's channels: PostgresSaver also returns the input's
    # ``__start__`` value, which the other savers drop once it is consumed.
    values = head.checkpoint["channel_values"] if head else {}
    if any(values.get(k) != v for k, v in doc.items()):
        raise RuntimeError(f"{run.system}: the latest checkpoint is not the last one put")
    samples = []
    for _ in range(GETS):
        started = time.perf_counter_ns()
        saver.get_tuple(config)
        samples.append(time.perf_counter_ns() - started)
    run.get_ns = statistics.median(samples)
    run.old_ns = read_old(run.system, saver, marks)
    return run


def read_old(
    system: str, saver: Any, marks: dict[str, tuple[Any, dict[str, Any]]]
) -> dict[str, float]:
    """Median ``get_tuple`` time of each marked checkpoint, named by its id."""
    for position, (config, doc) in marks.items():
        found = saver.get_tuple(config)
        values = found.checkpoint["channel_values"] if found else {}
        if any(values.get(k) != v for k, v in doc.items()):
            raise RuntimeError(f"{system}: the {position} checkpoint does not read back as put")
    samples: dict[str, list[int]] = {position: [] for position in marks}
    for _ in range(GETS):
        for position, (config, _doc) in marks.items():
            started = time.perf_counter_ns()
            saver.get_tuple(config)
            samples[position].append(time.perf_counter_ns() - started)
    return {position: statistics.median(times) for position, times in samples.items()}


# ---------------------------------------------------------------------------- systems


def ours_sqlite(workdir: Path, workload: Workload, steps: int) -> Run:
    from skillstate.integrations.langgraph import SkillstateSaver

    path = workdir / f"ours-{workload.name}-{steps}-{uuid.uuid4().hex[:6]}.db"
    with SkillstateSaver.from_url(f"sqlite:///{path}") as saver:
        run = Run("skillstate", "sqlite", workload.name, steps)
        return drive(run, saver, lambda: sqlite_file_bytes(path), workload)


def langgraph_sqlite(workdir: Path, workload: Workload, steps: int, sync: str | None) -> Run:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = workdir / f"lg-{workload.name}-{steps}-{uuid.uuid4().hex[:6]}.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)  # as from_conn_string does
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        if sync:
            conn.execute(f"PRAGMA synchronous={sync}")
        name = "SqliteSaver" + (f" (sync={sync})" if sync else "")
        run = Run(name, "sqlite", workload.name, steps)
        return drive(run, saver, lambda: sqlite_file_bytes(path), workload)
    finally:
        conn.close()


def ours_postgres(workdir: Path, workload: Workload, steps: int) -> Run:
    from skillstate.integrations.langgraph import SkillstateSaver

    target = PostgresTarget(workdir, f"lgsaver-{workload.name}-{steps}")
    try:
        with SkillstateSaver.from_url(target.url) as saver:
            run = Run("skillstate", "postgres", workload.name, steps)
            empty = target.bytes_stored(saver.store)
            drive(run, saver, lambda: target.bytes_stored(saver.store), workload)
        run.vacuumed = vacuumed_bytes(target, empty)
        return run
    finally:
        target.drop()


def langgraph_postgres(workdir: Path, workload: Workload, steps: int) -> Run:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import sql
    from psycopg.rows import dict_row

    target = PostgresTarget(workdir, f"lgpg-{workload.name}-{steps}")
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(target.schema)))
    try:
        with psycopg.connect(
            POSTGRES_URL,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options=f"-c search_path={target.schema}",
        ) as conn:
            saver = PostgresSaver(conn)  # type: ignore[arg-type]
            saver.setup()
            run = Run("PostgresSaver", "postgres", workload.name, steps)
            empty = target.bytes_stored(None)  # type: ignore[arg-type]
            drive(run, saver, lambda: target.bytes_stored(None), workload)  # type: ignore[arg-type]
        run.vacuumed = vacuumed_bytes(target, empty)
        return run
    finally:
        target.drop()


@dataclass(frozen=True)
class Pair:
    backend: str
    ours: Callable[[Path, Workload, int], Run]
    theirs: tuple[Callable[[Path, Workload, int], Run], ...]
    probe: Callable[[], str | None]


def _module_missing(*modules: str) -> str | None:
    for module in modules:
        try:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (the bench extra)"
        except ModuleNotFoundError:
            return f"{module} is not installed (the bench extra)"
    return None


PAIRS = {
    "sqlite": Pair(
        "sqlite",
        ours_sqlite,
        (
            lambda w, wl, n: langgraph_sqlite(w, wl, n, None),
            lambda w, wl, n: langgraph_sqlite(w, wl, n, "NORMAL"),
        ),
        lambda: _module_missing("langgraph.checkpoint.sqlite"),
    ),
    "postgres": Pair(
        "postgres",
        ours_postgres,
        (langgraph_postgres,),
        lambda: _module_missing("langgraph.checkpoint.postgres") or probe_postgres(),
    ),
}


# ---------------------------------------------------------------------------- report


def median_run(runs: Sequence[Run]) -> Run:
    """Of repeated runs, the one whose step p50 is the median (bytes are identical)."""
    return sorted(runs, key=lambda r: statistics.median(r.step_ns))[len(runs) // 2]


def p50(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def results_table(runs: list[Run]) -> Table:
    table = Table(
        "LangGraph savers, same workloads",
        ["backend", "workload", "steps", "system", "bytes/checkpoint", "after VACUUM FULL",
         "step p50 (µs)", "put p50 (µs)", "get p50 (µs)",
         *(f"old {p} (µs)" for p in POSITIONS)],
        right=set(range(4, 9 + len(POSITIONS))) | {2},
    )  # fmt: skip
    for r in runs:
        table.rows.append(
            [
                r.backend,
                r.workload,
                str(r.steps),
                r.system,
                fmt_bytes(r.per_checkpoint),
                fmt_bytes(r.per_checkpoint_vacuumed),
                fmt_us(p50(r.step_ns)),
                fmt_us(p50(r.put_ns)),
                fmt_us(r.get_ns),
                *(fmt_us(r.old_ns.get(p)) for p in POSITIONS),
            ]
        )
    table.notes.append("step = put_writes + put of one superstep; get = get_tuple of the latest")
    table.notes.append(
        "old POSITION = get_tuple naming that checkpoint by id (first, middle, last)"
    )
    table.notes.append(
        "postgres bytes count dead tuples until vacuumed: skillstate rewrites the thread's "
        "head row on every commit (the head is stored whole), LangGraph's saver only inserts"
    )
    return table


def ratios_table(runs: list[Run]) -> Table:
    table = Table(
        "skillstate / LangGraph (same run; below 1 is better for skillstate)",
        [
            "backend",
            "workload",
            "steps",
            "vs",
            "bytes/checkpoint",
            "after VACUUM FULL",
            "step p50",
            "put p50",
            "get p50",
            *(f"old {p}" for p in POSITIONS),
        ],
        right=set(range(4, 9 + len(POSITIONS))) | {2},
    )
    ours = {(r.backend, r.workload, r.steps): r for r in runs if r.system == "skillstate"}
    for r in runs:
        mine = ours.get((r.backend, r.workload, r.steps))
        if mine is None or r is mine:
            continue
        table.rows.append(
            [
                r.backend,
                r.workload,
                str(r.steps),
                r.system,
                fmt_ratio(mine.per_checkpoint / r.per_checkpoint if r.per_checkpoint else None),
                fmt_ratio(
                    mine.vacuumed / r.vacuumed if mine.vacuumed is not None and r.vacuumed else None
                ),
                fmt_ratio(p50(mine.step_ns) / p50(r.step_ns)),
                fmt_ratio(p50(mine.put_ns) / p50(r.put_ns)),
                fmt_ratio(mine.get_ns / r.get_ns),
                *(
                    fmt_ratio(mine.old_ns[p] / r.old_ns[p]) if r.old_ns.get(p) else "-"
                    for p in POSITIONS
                ),
            ]
        )
    return table


def targets_table(runs: list[Run]) -> Table:
    """Issue 30's targets, PASS or FAIL per SQLite cell."""
    table = Table(
        f"Issue 30 targets (skillstate / {TARGET_PEER}, same run)",
        ["workload", "steps", "target", "skillstate", "SqliteSaver", "ratio", "limit", "result"],
        right={1, 3, 4, 5, 6},
    )
    ours = {(r.workload, r.steps): r for r in runs if r.system == "skillstate"}
    for peer in (r for r in runs if r.system == TARGET_PEER):
        mine = ours.get((peer.workload, peer.steps))
        if mine is None:
            continue
        worst = max(POSITIONS, key=lambda p: mine.old_ns[p] / peer.old_ns[p])
        cells = {
            "put": (p50(mine.put_ns), p50(peer.put_ns), fmt_us),
            f"old read ({worst})": (mine.old_ns[worst], peer.old_ns[worst], fmt_us),
            "bytes": (mine.per_checkpoint, peer.per_checkpoint, fmt_bytes),
        }
        for name, (value, theirs, fmt) in cells.items():
            ratio = value / theirs if theirs else float("inf")
            limit = TARGETS[name.split(" (")[0]]
            table.rows.append(
                [
                    peer.workload,
                    str(peer.steps),
                    name,
                    fmt(value),
                    fmt(theirs),
                    fmt_ratio(ratio),
                    f"≤ {limit}x",
                    "PASS" if ratio <= limit else "FAIL",
                ]
            )
    table.notes.append("put and old reads in µs (p50), bytes per checkpoint")
    table.notes.append("old read: the position (first, middle, latest) with the worst ratio")
    return table


# ---------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", help="explicit workload step counts (default 100,1000)")
    parser.add_argument("--history-steps", type=int, help="history workload steps (default 200)")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres")
    parser.add_argument("--repeat", type=int, help="runs per cell, median kept (default 3)")
    parser.add_argument("--markdown", type=Path, help="also write the tables as markdown here")
    parser.add_argument("--quick", action="store_true", help="20 steps, one run: a smoke run")
    args = parser.parse_args(argv)
    args.steps = [int(s) for s in (args.steps or ("20" if args.quick else "100,1000")).split(",")]
    args.history_steps = args.history_steps or (20 if args.quick else 200)
    args.repeat = max(1, args.repeat or (1 if args.quick else 3))
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in args.backends if b not in PAIRS]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(PAIRS)}")
    return args


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="skillstate-lgsaver-") as path:
        yield Path(path)


def measure(args: argparse.Namespace, log: Console) -> tuple[list[Run], dict[str, str]]:
    runs: list[Run] = []
    skipped: dict[str, str] = {}
    cells = [(WORKLOADS["explicit"], n) for n in args.steps]
    cells.append((WORKLOADS["history"], args.history_steps))
    with workdir() as work:
        for name in args.backends:
            pair = PAIRS[name]
            reason = pair.probe()
            if reason:
                skipped[name] = reason
                continue
            for workload, steps in cells:
                systems = (pair.ours, *pair.theirs)
                # Interleaved rounds: a burst of load hits every system, not one.
                made: list[list[Run]] = [[] for _ in systems]
                for _ in range(args.repeat):
                    for i, system in enumerate(systems):
                        made[i].append(system(work, workload, steps))
                for each in made:
                    best = median_run(each)
                    log.print(f"[dim]{name} {workload.name} {steps}: {best.system}[/]")
                    runs.append(best)
    return runs, skipped


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out = Console() if sys.stdout.isatty() else Console(width=200)
    log = Console(stderr=True)
    load_start = os.getloadavg()
    runs, skipped = measure(args, log)
    load_end = os.getloadavg()
    tables = [results_table(runs), ratios_table(runs), targets_table(runs)]
    load = (
        f"load average (1, 5, 15 min): {_load(load_start)} at the start, "
        f"{_load(load_end)} at the end; {os.cpu_count()} CPUs"
    )
    tables[-1].notes.append(load)
    if skipped:
        tables.append(Table("Skipped", ["backend", "reason"], [[k, v] for k, v in skipped.items()]))
    for table in tables:
        out.print(table.rich())
        for note in table.notes:
            out.print(f"  [dim]{note}[/]")
        out.print()
    verdicts = [row[-1] for row in tables[2].rows]
    out.print(
        f"targets: {verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL "
        f"of {len(verdicts)}; {load}"
    )
    if args.markdown:
        command = "python benchmarks/langgraph_saver.py " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        text = "\n\n".join(["## LangGraph savers", f"```bash\n.venv/bin/{command}\n```"])
        text += "\n\n" + "\n\n".join(t.markdown() for t in tables) + "\n"
        args.markdown.write_text(text, encoding="utf-8")
    return 0


def _load(values: tuple[float, float, float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    sys.exit(main())
