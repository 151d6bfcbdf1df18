"""Effect helpers: SQL keys in the change's transaction, keyed files, idempotent HTTP, read-back.

SQL tests run on SQLite (in every transaction mode of the sqlite3 module) and on
PostgreSQL (``@pytest.mark.services``; a schema per test, dropped afterwards). The
process-level tests synchronise on what they can observe (a barrier, a counter,
``pg_stat_activity``, lines in a file), never on fixed sleeps.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    UsageError,
    Verdict,
    View,
    open_store,
)
from skillstate.effects import files, http, read_back, sql
from skillstate.engine.actions import Action
from tests.contract.backends import drop_postgres_schemas, postgres_url_for

DOCS = Path(__file__).resolve().parents[1] / "docs" / "effects.md"


class Crash(BaseException):
    """Stands in for kill -9 inside one process: nothing in the runtime catches it."""


# ---------------------------------------------------------------- SQL databases


@dataclass(frozen=True)
class Spec:
    """How to open one test database (plain data, so it crosses a process boundary)."""

    kind: str  # "sqlite" or "postgres"
    target: str  # a file path or a libpq conninfo
    options: tuple[tuple[str, Any], ...] = ()
    schema: str = ""

    @property
    def table(self) -> str:
        return f"{self.schema}.{sql.DEFAULT_TABLE}" if self.schema else sql.DEFAULT_TABLE

    @property
    def ledger(self) -> str:
        return f"{self.schema}.ledger" if self.schema else "ledger"

    @property
    def always_in_transaction(self) -> bool:
        """sqlite3's ``autocommit=False`` (3.12+) keeps a transaction open at all times."""
        return dict(self.options).get("autocommit") is False and self.kind == "sqlite"

    def q(self, text: str) -> str:
        """``text`` with ``?`` parameters in the driver's style."""
        return text.replace("?", "%s") if self.kind == "postgres" else text


def connect(spec: Spec, **extra: Any) -> Any:
    """A new connection of its own to the database ``spec`` describes."""
    options = {**dict(spec.options), **extra}
    if spec.kind == "sqlite":
        return sqlite3.connect(spec.target, timeout=60, **options)
    import psycopg

    return psycopg.connect(spec.target, connect_timeout=10, **options)


@dataclass
class Database:
    """A test database, the connections opened on it (closed at teardown), and queries."""

    spec: Spec
    opened: list[Any] = field(default_factory=list)

    def connect(self, **extra: Any) -> Any:
        conn = connect(self.spec, **extra)
        self.opened.append(conn)
        return conn

    def insert(self, conn: Any, n: int) -> None:
        conn.execute(self.spec.q(f"INSERT INTO {self.spec.ledger} (n) VALUES (?)"), (n,))

    def ledger(self) -> list[int]:
        """The ledger as a fresh connection sees it: committed rows only."""
        with closing(connect(self.spec)) as conn:
            rows = conn.execute(f"SELECT n FROM {self.spec.ledger} ORDER BY n").fetchall()
            return [row[0] for row in rows]

    def lookup(self, key: str) -> sql.Recorded | None:
        """What a fresh connection (another process, say) finds recorded under ``key``."""
        with closing(connect(self.spec)) as conn:
            return sql.lookup(conn, key, table=self.spec.table)


SQLITE_MODES: dict[str, tuple[tuple[str, Any], ...]] = {
    "sqlite-deferred": (),  # the default: isolation_level="" (implicit BEGIN before DML)
    "sqlite-isolation-none": (("isolation_level", None),),  # every statement commits alone
    "sqlite-immediate": (("isolation_level", "IMMEDIATE"),),
}
if sys.version_info >= (3, 12):
    SQLITE_MODES["sqlite-autocommit-true"] = (("autocommit", True),)
    SQLITE_MODES["sqlite-autocommit-false"] = (("autocommit", False),)

POSTGRES_MODES: dict[str, tuple[tuple[str, Any], ...]] = {
    "postgres": (),
    "postgres-autocommit": (("autocommit", True),),
}


@pytest.fixture(
    params=[
        *SQLITE_MODES,
        *(pytest.param(name, marks=pytest.mark.services) for name in POSTGRES_MODES),
    ]
)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """An empty database with the effects table and a ``ledger (n)`` table to change."""
    mode: str = request.param
    if mode in SQLITE_MODES:
        spec = Spec("sqlite", str(tmp_path / "effects.db"), SQLITE_MODES[mode])
    else:
        from skillstate.store.postgres import parse_url

        parsed = parse_url(postgres_url_for(tmp_path))
        spec = Spec("postgres", parsed.conninfo, POSTGRES_MODES[mode], schema=parsed.schema)
    database = Database(spec)
    with closing(connect(spec)) as conn:
        if spec.schema:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {spec.schema}")
        conn.execute(f"CREATE TABLE {spec.ledger} (n INTEGER NOT NULL)")
        conn.commit()
        sql.ensure_table(conn, table=spec.table)
    try:
        yield database
    finally:
        for conn in database.opened:
            conn.close()
        drop_postgres_schemas()


class TestSqlOnce:
    def test_change_and_key_commit_together(self, db: Database) -> None:
        """Until ``once`` commits, others see neither the change nor the key; then both."""
        conn = db.connect()
        with sql.once(conn, "task:1", table=db.spec.table) as effect:
            assert effect.fresh
            db.insert(conn, 1)
            effect.result = {"n": 1}
            assert db.ledger() == []
            assert db.lookup("task:1") is None
        assert db.ledger() == [1]
        assert db.lookup("task:1") == sql.Recorded({"n": 1})

    def test_exception_inside_leaves_neither(self, db: Database) -> None:
        """An exception in the block rolls back the change and the key; a retry is fresh."""
        conn = db.connect()

        def fail_inside() -> None:
            with sql.once(conn, "k", table=db.spec.table):
                db.insert(conn, 1)
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            fail_inside()
        assert db.ledger() == []
        assert db.lookup("k") is None
        with sql.once(conn, "k", table=db.spec.table) as effect:
            assert effect.fresh
            db.insert(conn, 2)
            effect.result = "second try"
        assert db.ledger() == [2]

    def test_result_json_cannot_encode_rolls_back(self, db: Database) -> None:
        """A result that is not JSON fails the effect as a whole: no change, no key."""
        conn = db.connect()

        def unencodable() -> None:
            with sql.once(conn, "k", table=db.spec.table) as effect:
                db.insert(conn, 1)
                effect.result = {"when": object()}

        with pytest.raises(UsageError, match="not JSON"):
            unencodable()
        assert db.ledger() == []
        assert db.lookup("k") is None

    def test_second_once_does_not_repeat(self, db: Database) -> None:
        """The same key again: not fresh, the first result, and the block leaves no trace."""
        conn = db.connect()
        with sql.once(conn, "k", table=db.spec.table) as effect:
            db.insert(conn, 1)
            effect.result = {"payment": 7}
        other = db.connect()
        with sql.once(other, "k", table=db.spec.table) as again:
            assert not again.fresh
            assert again.result == {"payment": 7}
            db.insert(other, 2)  # a careless block: rolled back, since the key was there
            with pytest.raises(UsageError, match="already recorded"):
                again.result = {"payment": 8}
        assert db.ledger() == [1]
        assert db.lookup("k") == sql.Recorded({"payment": 7})

    def test_recorded_none_differs_from_unknown_key(self, db: Database) -> None:
        """``lookup`` wraps a recorded ``None`` result, and answers ``None`` for a new key."""
        conn = db.connect()
        with sql.once(conn, "k", table=db.spec.table):
            db.insert(conn, 1)
        assert sql.lookup(conn, "k", table=db.spec.table) == sql.Recorded(None)
        assert sql.lookup(conn, "other", table=db.spec.table) is None

    def test_open_transaction_is_refused(self, db: Database) -> None:
        """A connection already in a transaction is refused, unless sqlite3 always has one."""
        conn = db.connect()
        if db.spec.kind == "postgres" and dict(db.spec.options).get("autocommit"):
            conn.execute("BEGIN")
        db.insert(conn, 1)  # uncommitted work of the caller's own
        if db.spec.always_in_transaction:
            # Documented: autocommit=False cannot tell, and commits it with the effect.
            with sql.once(conn, "k", table=db.spec.table) as effect:
                db.insert(conn, 2)
                effect.result = 2
            assert db.ledger() == [1, 2]
            return
        if db.spec.options == (("isolation_level", None),):
            conn.execute("BEGIN")  # that insert committed alone; open a transaction by hand
        with pytest.raises(UsageError, match="inside a transaction"):
            sql.once(conn, "k", table=db.spec.table).__enter__()
        conn.rollback()
        assert db.lookup("k") is None

    def test_lookup_leaves_the_connection_idle(self, db: Database) -> None:
        """A probe's lookup does not leave a transaction open for the skill's ``once``."""
        conn = db.connect()
        assert sql.lookup(conn, "k", table=db.spec.table) is None
        with sql.once(conn, "k", table=db.spec.table) as effect:
            assert effect.fresh
            db.insert(conn, 1)
        assert db.ledger() == [1]

    def test_missing_table_holds_no_keys(self, db: Database) -> None:
        """``lookup`` on a table nobody created answers ``None``; ``ensure_table`` is idempotent."""
        conn = db.connect()
        table = f"{db.spec.schema}.later" if db.spec.schema else "later"
        assert sql.lookup(conn, "k", table=table) is None
        sql.ensure_table(conn, table=table)
        sql.ensure_table(conn, table=table)
        with sql.once(conn, "k", table=table) as effect:
            effect.result = 1
        assert sql.lookup(conn, "k", table=table) == sql.Recorded(1)

    def test_racing_processes_apply_the_change_once(self, db: Database) -> None:
        """Four processes with connections of their own race one key: one change, one result."""
        results = race(db.spec, "race:1", workers=4)
        fresh = [r for r in results if r["fresh"]]
        assert len(fresh) == 1
        winner = fresh[0]
        assert {json.dumps(r["result"]) for r in results} == {json.dumps({"pid": winner["pid"]})}
        if db.spec.kind == "postgres":
            assert winner["waiting"] == 3, "the losers were not blocked on the key's row lock"
        assert db.ledger() == [winner["pid"]]


class TestSqlArguments:
    def test_bad_arguments_are_refused(self, tmp_path: Path) -> None:
        """Unknown connection types, unsafe table names and empty keys are usage errors."""
        with closing(sqlite3.connect(tmp_path / "x.db")) as conn:
            with pytest.raises(UsageError, match="unsupported connection"):
                sql.lookup(object(), "k")
            with pytest.raises(UsageError, match="identifier"):
                sql.ensure_table(conn, table="effects; DROP TABLE x")
            with pytest.raises(UsageError, match="non-empty"), sql.once(conn, ""):
                pass


@dataclass(frozen=True)
class Race:
    """What every racing process gets: the database, the key, how many race, their tag."""

    spec: Spec
    key: str
    workers: int
    tag: str  # PostgreSQL application_name of the racers, to find them in pg_stat_activity


def race(spec: Spec, key: str, *, workers: int) -> list[dict[str, Any]]:
    """Start ``workers`` processes that run ``once`` on ``key`` together; their reports."""
    ctx = multiprocessing.get_context("spawn")
    job = Race(spec, key, workers, tag=f"effects-race-{os.getpid()}-{random.randrange(1 << 30)}")
    barrier, started, reports = ctx.Barrier(workers), ctx.Value("i", 0), ctx.Queue()
    args = (job, barrier, started, reports)
    procs = [ctx.Process(target=_race_worker, args=args) for _ in range(workers)]
    try:
        for proc in procs:
            proc.start()
        results = [reports.get(timeout=240) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
    finally:
        for proc in procs:
            if proc.is_alive():  # a hung worker must not outlive the test
                proc.terminate()
                proc.join()
    errors = [r["error"] for r in results if "error" in r]
    assert not errors, "\n".join(errors)
    assert [proc.exitcode for proc in procs] == [0] * workers
    return results


def _race_worker(job: Race, barrier: Any, started: Any, reports: Any) -> None:
    """One racer: wait for all, then ``once``; the winner holds its claim until all came in."""
    spec = job.spec
    try:
        extra = {"application_name": job.tag} if spec.kind == "postgres" else {}
        with closing(connect(spec, **extra)) as conn:
            barrier.wait(timeout=120)
            with started.get_lock():
                started.value += 1
            waiting = 0
            with sql.once(conn, job.key, table=spec.table) as effect:
                if effect.fresh:
                    waiting = _hold_claim(job, started)
                    insert = spec.q(f"INSERT INTO {spec.ledger} (n) VALUES (?)")
                    conn.execute(insert, (os.getpid(),))
                    effect.result = {"pid": os.getpid()}
            report = {"fresh": effect.fresh, "result": effect.result, "waiting": waiting}
            reports.put({"pid": os.getpid(), **report})
    except BaseException:
        reports.put({"error": traceback.format_exc()})
        raise


def _hold_claim(job: Race, started: Any) -> int:
    """Keep the claim open until every racer is on its way in (on PostgreSQL: blocked on it)."""
    deadline = time.monotonic() + 120
    while started.value < job.workers and time.monotonic() < deadline:
        time.sleep(0.002)
    if job.spec.kind != "postgres":
        return 0  # SQLite's waiters sit in the busy handler, which nothing can observe
    query = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = %s AND wait_event_type = 'Lock'"
    )
    with closing(connect(job.spec, autocommit=True)) as watcher:
        waiting = 0
        while waiting < job.workers - 1 and time.monotonic() < deadline:
            waiting = watcher.execute(query, (job.tag,)).fetchone()[0]
            time.sleep(0.002)
    return int(waiting)


# ---------------------------------------------------------------- files: lines


class TestAppendOnce:
    def test_appends_once_per_key(self, tmp_path: Path) -> None:
        """A key's line is written by the first call only; ``appended`` and ``entries`` see it."""
        path = tmp_path / "ledger.txt"
        assert not files.appended(path, "t:1")
        assert files.append_once(path, "entry 1", "t:1")
        assert not files.append_once(path, "entry 1 again", "t:1")
        assert files.append_once(path, "entry 2", "t:2")
        assert files.appended(path, "t:1")
        assert files.entries(path) == [("t:1", "entry 1"), ("t:2", "entry 2")]
        assert path.read_text() == "t:1\tentry 1\nt:2\tentry 2\n"

    def test_torn_record_is_not_counted_and_is_cut_off(self, tmp_path: Path) -> None:
        """A record without its newline (a writer died mid-write) is ignored, then replaced."""
        path = tmp_path / "ledger.txt"
        path.write_text("t:1\tentry 1\nt:2\tentr")
        assert files.entries(path) == [("t:1", "entry 1")]
        assert not files.appended(path, "t:2")
        assert files.append_once(path, "entry 2", "t:2")
        assert path.read_text() == "t:1\tentry 1\nt:2\tentry 2\n"

    def test_threads_racing_one_key_append_once(self, tmp_path: Path) -> None:
        """Eight threads append the same key at once: the flock lets exactly one through."""
        path = tmp_path / "ledger.txt"
        barrier = threading.Barrier(8)
        wins: list[bool] = []

        def append() -> None:
            barrier.wait(timeout=60)
            wins.append(files.append_once(path, "the one", "t:1"))

        threads = [threading.Thread(target=append) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(wins) == [False] * 7 + [True]
        assert files.entries(path) == [("t:1", "the one")]

    def test_bad_keys_and_lines_are_refused(self, tmp_path: Path) -> None:
        """Keys with tabs or breaks, and lines with breaks, would corrupt the record format."""
        path = tmp_path / "ledger.txt"
        for key in ("", "a\tb", "a\nb"):
            with pytest.raises(UsageError):
                files.append_once(path, "x", key)
        with pytest.raises(UsageError, match="line break"):
            files.append_once(path, "two\nlines", "k")
        assert not path.exists()

    def test_kill_9_in_a_loop_of_appends_leaves_every_line_once(self, tmp_path: Path) -> None:
        """SIGKILL at random points of an append loop, then re-runs: every line exactly once."""
        path = tmp_path / "ledger.txt"
        total, kills = 300, 4
        seed = random.randrange(1 << 30)
        rng = random.Random(seed)
        thresholds = sorted(rng.sample(range(1, total * 3 // 4), kills))
        landed = 0
        for threshold in thresholds:
            proc = subprocess.Popen([sys.executable, "-c", APPEND_LOOP, str(path), str(total)])
            try:
                wait_for(lambda t=threshold, p=proc: _line_count(path) >= t or p.poll() is not None)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    landed += 1
            finally:
                proc.wait(timeout=60)
        subprocess.run([sys.executable, "-c", APPEND_LOOP, str(path), str(total)], check=True)
        expected = [(f"t:{i:04d}", f"entry {i}") for i in range(total)]
        assert files.entries(path) == expected, f"seed {seed}"
        assert path.read_bytes().count(b"\n") == total, f"seed {seed}"
        assert landed >= 1, f"every run finished before its kill (seed {seed})"


APPEND_LOOP = """
import sys
from skillstate.effects import files
path, total = sys.argv[1], int(sys.argv[2])
for i in range(total):
    files.append_once(path, f"entry {i}", f"t:{i:04d}")
"""


def _line_count(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def wait_for(condition: Callable[[], bool], timeout: float = 120) -> None:
    """Poll an observable condition (not a fixed sleep), failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(0.001)


# ---------------------------------------------------------------- files: whole files


class TestWriteOnce:
    def test_writes_once_per_key(self, tmp_path: Path) -> None:
        """The first call writes and records the key; the same key again changes nothing."""
        path = tmp_path / "report.txt"
        assert not files.written(path, "t:1")
        assert files.write_once(path, b"v1", "t:1")
        inode = path.stat().st_ino
        assert not files.write_once(path, b"v1", "t:1")
        assert path.stat().st_ino == inode  # not even rewritten
        assert files.written(path, "t:1")
        assert not files.written(path, "t:2")
        assert files.write_once(path, b"v2", "t:2")
        assert path.read_bytes() == b"v2"
        assert files.written(path, "t:1")  # history survives the overwrite
        assert [p.name for p in tmp_path.iterdir()] == sorted(["report.txt", "report.txt.keys"])

    def test_crash_between_rename_and_key_record_is_detected(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Killed after the rename but before ``done``: written, and not written again."""
        path = tmp_path / "report.txt"
        crash_after(monkeypatch, "_publish")
        with pytest.raises(Crash):
            files.write_once(path, b"v1", "t:1")
        monkeypatch.undo()
        assert path.read_bytes() == b"v1"
        assert "done" not in (tmp_path / "report.txt.keys").read_text()
        assert files.written(path, "t:1")
        inode = path.stat().st_ino
        assert not files.write_once(path, b"v1", "t:1")  # finishes the record instead
        assert path.stat().st_ino == inode
        assert "t:1\tdone" in (tmp_path / "report.txt.keys").read_text()

    def test_interrupted_key_survives_a_later_overwrite(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A key cut off after its rename is settled before another key replaces the content."""
        path = tmp_path / "report.txt"
        crash_after(monkeypatch, "_publish")
        with pytest.raises(Crash):
            files.write_once(path, b"v1", "t:1")
        monkeypatch.undo()
        assert files.write_once(path, b"v2", "t:2")
        assert path.read_bytes() == b"v2"
        assert files.written(path, "t:1")
        assert files.written(path, "t:2")

    def test_crash_before_the_rename_is_not_written(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Killed after recording ``pending`` but before the rename: not written; a rerun writes."""
        path = tmp_path / "report.txt"
        path.write_bytes(b"old")
        monkeypatch.setattr(files, "_publish", _crash)
        with pytest.raises(Crash):
            files.write_once(path, b"new", "t:1")
        monkeypatch.undo()
        assert path.read_bytes() == b"old"
        assert "t:1\tpending" in (tmp_path / "report.txt.keys").read_text()
        assert not files.written(path, "t:1")
        assert files.write_once(path, b"new", "t:1")
        assert path.read_bytes() == b"new"
        assert files.written(path, "t:1")
        # the dead writer's temporary file was cleaned up under the lock
        assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt", "report.txt.keys"]


def crash_after(monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Make ``files.<step>`` do its work and then 'die' (raise :class:`Crash`)."""
    real = getattr(files, step)

    def step_then_crash(*args: Any) -> None:
        real(*args)
        raise Crash

    monkeypatch.setattr(files, step, step_then_crash)


def _crash(*args: Any) -> None:
    raise Crash


# ---------------------------------------------------------------- HTTP


@dataclass
class Server:
    """A local payments server that dedupes by ``Idempotency-Key`` and counts effects."""

    url: str = ""
    fail_first: str = ""  # "", "drop" or "503": how the first attempt of a key goes wrong
    always: int = 0  # answer every request with this status instead
    effects: int = 0
    seen: list[str | None] = field(default_factory=list)
    answers: dict[str, bytes] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(state: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            key = self.headers.get("Idempotency-Key")
            with state.lock:
                state.seen.append(key)
                first = key is not None and key not in state.answers
                if first and not state.always:
                    # The effect is applied (and its answer kept) before anything can fail.
                    state.effects += 1
                    amount = json.loads(body)["amount"]
                    answer = {"charge": state.effects, "amount": amount}
                    state.answers[key] = json.dumps(answer).encode()
            if state.always:
                self._answer(state.always, b'{"error": "try later"}')
            elif key is None:
                self._answer(400, b'{"error": "Idempotency-Key required"}')
            elif first and state.fail_first == "drop":
                self.close_connection = True  # close without a single byte of answer
            elif first and state.fail_first == "503":
                self._answer(503, b'{"error": "overloaded"}')
            else:
                self._answer(200, state.answers[key])

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep the test output quiet

    return Handler


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """The payments server on a free port, served by a thread for the test's duration."""
    monkeypatch.setenv("no_proxy", "*")  # never send 127.0.0.1 through a configured proxy
    monkeypatch.setenv("NO_PROXY", "*")
    state = Server()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/charges"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=30)


class TestIdempotentRequest:
    @pytest.mark.parametrize("failure", ["drop", "503"])
    def test_retry_after_applied_failure_reuses_the_key(self, server: Server, failure: str) -> None:
        """The first attempt applies the effect then fails; the retry's same key makes it once."""
        server.fail_first = failure
        key = "task:0002-charge"
        result = http.idempotent_request("POST", server.url, key, json={"amount": 42}, backoff=0)
        assert result.status == 200
        assert result.attempts == 2
        assert result.json() == {"charge": 1, "amount": 42}
        assert result.headers["content-type"] == "application/json"
        assert server.seen == [key, key]
        assert server.effects == 1
        # A resumed step calls again with the same key: the first answer, no new effect.
        again = http.idempotent_request("POST", server.url, key, json={"amount": 42})
        assert again.json() == result.json()
        assert server.effects == 1

    def test_client_error_is_not_retried(self, server: Server) -> None:
        """A 4xx is an answer, not an unknown outcome: raised at once with status and body."""
        server.always = 422
        with pytest.raises(http.HttpStatusError) as caught:
            http.idempotent_request("POST", server.url, "k", json={"amount": 1}, backoff=0)
        assert caught.value.status == 422
        assert caught.value.attempts == 1
        assert b"try later" in caught.value.body
        assert server.seen == ["k"]

    def test_server_errors_exhaust_the_retries(self, server: Server) -> None:
        """A 5xx on every attempt: ``retries + 1`` attempts with the same key, then an error."""
        server.always = 503
        with pytest.raises(http.HttpStatusError, match="503") as caught:
            http.idempotent_request("POST", server.url, "k", json={}, retries=2, backoff=0)
        assert caught.value.attempts == 3
        assert server.seen == ["k", "k", "k"]

    def test_no_answer_is_a_transport_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Nobody listening: every attempt is made, then an error that keeps the cause."""
        monkeypatch.setenv("no_proxy", "*")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = f"http://127.0.0.1:{port}/charges"
        with pytest.raises(http.HttpTransportError, match="no answer") as caught:
            http.idempotent_request("POST", url, "k", data=b"x", retries=1, backoff=0, timeout=5)
        assert caught.value.attempts == 2
        assert caught.value.__cause__ is not None

    def test_bad_arguments_are_refused(self) -> None:
        """Both bodies, a non-HTTP URL, or a conflicting key header are usage errors."""
        url = "http://127.0.0.1:9/x"
        with pytest.raises(UsageError, match="not both"):
            http.idempotent_request("POST", url, "k", json={}, data=b"")
        with pytest.raises(UsageError, match="http"):
            http.idempotent_request("POST", "file:///etc/passwd", "k")
        with pytest.raises(UsageError, match="different Idempotency-Key"):
            http.idempotent_request("POST", url, "k", headers={"idempotency-key": "other"})


# ---------------------------------------------------------------- read-back


def test_read_back_returns_the_outcome_only_when_the_world_shows_it() -> None:
    """``read_back`` gives the outcome when ``matches`` sees the effect, ``None`` otherwise."""
    outbox = ["mail to ana"]
    outcome = Outcome(writes={"sent": True})
    assert read_back(lambda: outbox, lambda mails: "mail to ana" in mails, outcome) is outcome
    assert read_back(lambda: outbox, lambda mails: "mail to bo" in mails, outcome) is None

    def unreachable() -> list[str]:
        raise ConnectionError("outbox down")

    with pytest.raises(ConnectionError):  # "unknown" must not read as "did not happen"
        read_back(unreachable, lambda mails: True, outcome)


# ---------------------------------------------------------------- inside a real skill


class PayState(AgentState):
    payment: int | None = None


class Charge(BaseModel):
    amount: int


@dataclass
class Bank:
    """The world: a SQLite database of payments, and switches to make a step die."""

    path: Path
    crash_after_effect: bool = False
    lose_reply: bool = False
    runs: int = 0
    probes: int = 0

    def payments(self) -> list[tuple[int, int]]:
        with closing(sqlite3.connect(self.path)) as conn:
            return conn.execute("SELECT id, amount FROM payments").fetchall()


def pay_agent(bank: Bank) -> Agent:
    """One effectful skill that pays with ``sql.once`` and probes with ``sql.lookup``."""
    skills = SkillRegistry()

    def paid(result: dict[str, int]) -> Outcome:
        return Outcome(writes={"payment": result["payment"]}, summary=f"payment {result}")

    @skills.skill(outputs=["payment"], step="paying", effects=True)
    def pay(state: PayState, params: Charge, ctx: SkillContext) -> Outcome:
        """Pay once: the payment row and the key commit together."""
        bank.runs += 1
        assert ctx.idempotency_key is not None
        with (
            closing(sqlite3.connect(bank.path)) as conn,
            sql.once(conn, ctx.idempotency_key) as effect,
        ):
            if effect.fresh:
                cur = conn.execute("INSERT INTO payments (amount) VALUES (?)", (params.amount,))
                effect.result = {"payment": cur.lastrowid}
        if bank.crash_after_effect:
            bank.crash_after_effect = False
            raise Crash  # dies after the commit, before the runtime records the outcome
        if bank.lose_reply:
            bank.lose_reply = False
            raise ConnectionError("the reply was lost")
        return paid(effect.result)

    @pay.prober
    def _paid_already(state: PayState, params: Charge, ctx: SkillContext) -> Outcome | None:
        bank.probes += 1
        assert ctx.idempotency_key is not None
        with closing(sqlite3.connect(bank.path)) as conn:
            recorded = sql.lookup(conn, ctx.idempotency_key)
        return None if recorded is None else paid(recorded.result)

    @pay.verifier
    def _one_payment(state: PayState, outcome: Outcome) -> Verdict:
        ids = [row[0] for row in bank.payments()]
        return Verdict(ok=ids == [state.payment], reason=f"payments in the bank: {ids}")

    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, PayState)
        if state.payment is None:
            return CallSkill(skill="pay", params={"amount": 42})
        return Finish(summary=f"paid as payment {state.payment}")

    return Agent(
        name="pay",
        state_type=PayState,
        machine=StateMachine(
            {"init": ["paying"], "paying": ["paying", "done"], "done": []}, initial="init"
        ),
        skills=skills,
        policy=ScriptedPolicy(decide),
    )


@pytest.fixture
def bank(tmp_path: Path) -> Bank:
    """An empty payments database with the effects table."""
    bank = Bank(tmp_path / "bank.db")
    with closing(sqlite3.connect(bank.path)) as conn:
        conn.execute("CREATE TABLE payments (id INTEGER PRIMARY KEY, amount INTEGER)")
        conn.commit()
        sql.ensure_table(conn)
    return bank


class TestInsideASkill:
    def test_crash_after_the_effect_is_resumed_by_the_probe(self, bank: Bank) -> None:
        """Killed between the payment's commit and the step's: resume probes, pays nothing."""
        bank.crash_after_effect = True
        store = open_store("memory://")
        agent = pay_agent(bank)
        with pytest.raises(Crash):
            Runtime(agent, store).run("t", create=True)
        assert bank.payments() == [(1, 42)]
        result = Runtime(agent, store).run("t")
        assert result.stopped == "completed"
        assert result.state.payment == 1
        assert bank.payments() == [(1, 42)]
        assert bank.runs == 1  # the probe found it; the skill did not run again
        assert bank.probes >= 1

    def test_lost_reply_is_retried_without_paying_twice(self, bank: Bank) -> None:
        """An error after the effect: the retry (probe, or ``once`` itself) pays nothing more."""
        bank.lose_reply = True
        result = Runtime(pay_agent(bank), open_store("memory://")).run("t", create=True)
        assert result.stopped == "completed"
        assert result.state.payment == 1
        assert bank.payments() == [(1, 42)]

    def test_uninterrupted_run_pays_once(self, bank: Bank) -> None:
        """Without any failure the skill runs once; the probe, asked first, finds nothing."""
        result = Runtime(pay_agent(bank), open_store("memory://")).run("t", create=True)
        assert result.stopped == "completed"
        assert bank.payments() == [(1, 42)]
        # Keys belong to the logical step, so the runtime asks the probe before every run.
        assert (bank.runs, bank.probes) == (1, 1)


# ---------------------------------------------------------------- the docs


def test_docs_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The python blocks of docs/effects.md run in order and print what the text says."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "effects_docs"}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{DOCS}:block{number}", "exec"), namespace)
    assert capsys.readouterr().out.splitlines() == ["completed 1 True True"]
    assert [line for _, line in files.entries(tmp_path / "orders.log")] == ["order 7 paid"]
    assert (tmp_path / "report.txt").read_text() == "order 7: paid\n"
    assert (tmp_path / "shipped.txt").read_text() == "order 7\n"
