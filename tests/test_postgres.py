"""PostgreSQL-specific tests; the Store contract itself runs in ``tests/contract``.

Tests that need the server take the ``pg_url`` fixture: a fresh schema on the
contract suite's server (``SKILLSTATE_TEST_POSTGRES_URL``), dropped afterwards,
skipped (or failed, with ``SKILLSTATE_REQUIRE_SERVICES=1``) when it is down.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import InvalidStoreURL, StateCorrupted, StoreError, StoreUnavailable
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store import open_store
from skillstate.store.chain import encode_commit, take_snapshot
from skillstate.store.memory import MemoryStore
from skillstate.store.postgres import DEFAULT_SCHEMA, MIGRATIONS, PostgresStore, parse_url
from tests.contract.backends import POSTGRES_URL, drop_postgres_schemas, postgres_url_for


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    """A store URL with a schema of this test's own, dropped after the test."""
    yield postgres_url_for(tmp_path)
    drop_postgres_schemas()


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(pg_url)
    yield store
    store.close()


def _event(task_id: str, version: int, **extra: Any) -> Event:
    return Event(
        task_id=task_id, version=version, actor="runtime", action={"kind": "test"}, **extra
    )


def _sql(store: PostgresStore, query: str) -> list[tuple[Any, ...]]:
    """Run raw SQL on the store's own pool (to inspect or damage what it wrote)."""
    with store._connection() as conn:
        cur = conn.execute(query)
        return cur.fetchall() if cur.description else []


# ---------------------------------------------------------------- URLs (no server)


class TestURL:
    def test_schema_is_taken_out_of_the_conninfo(self) -> None:
        """``schema`` selects the Postgres schema; every other parameter goes to libpq."""
        parsed = parse_url("postgresql://u@db.example:6543/app?sslmode=require&schema=tenant_a")
        assert parsed.schema == "tenant_a"
        assert parsed.conninfo == "postgresql://u@db.example:6543/app?sslmode=require"

    def test_default_schema_and_postgres_scheme(self) -> None:
        """Without ``schema`` the store uses the default one; ``postgres://`` works too."""
        parsed = parse_url("postgres://u@localhost/app")
        assert parsed.schema == DEFAULT_SCHEMA
        assert parsed.conninfo == "postgres://u@localhost/app"

    def test_password_is_masked(self) -> None:
        """The password never shows, whether in the user info or a query parameter."""
        assert (
            parse_url("postgresql://user:s3cr%40t@host:5432/db?schema=x").masked
            == "postgresql://user:***@host:5432/db?schema=x"
        )
        masked = parse_url("postgresql://user@host/db?password=s3cret&sslmode=disable").masked
        assert "s3cret" not in masked
        assert masked == "postgresql://user@host/db?password=***&sslmode=disable"
        assert parse_url("postgresql://user@host/db").masked == "postgresql://user@host/db"

    @pytest.mark.parametrize(
        "url",
        [
            "mysql://u@h/db",
            "postgresql://u@h/db?schema=",
            "postgresql://u@h/db?schema=a&schema=b",
            "postgresql://u@h/db?schema=" + "x" * 64,
            "postgresql://u@h/db?schema=pg_catalog",
        ],
    )
    def test_unusable_urls_are_refused(self, url: str) -> None:
        """A URL that cannot name one schema safely is InvalidStoreURL, before connecting."""
        with pytest.raises(InvalidStoreURL):
            parse_url(url)

    def test_bad_connection_option_is_invalid_url(self) -> None:
        """A parameter libpq does not know is the URL's fault, reported before connecting."""
        with pytest.raises(InvalidStoreURL, match="bogus_option"):
            PostgresStore("postgresql://u@127.0.0.1:1/db?bogus_option=1")

    def test_unreachable_server_is_one_line_and_fast(self) -> None:
        """A server that refuses connections gives a one-line StoreError at once."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(StoreError) as info:
            open_store(f"postgresql://someone:hunter2@127.0.0.1:{port}/test")
        assert time.monotonic() - started < 5
        message = str(info.value)
        assert "\n" not in message
        assert "hunter2" not in message
        assert str(port) in message

    def test_psycopg_is_imported_only_when_opened(self) -> None:
        """``import skillstate.store`` (even the postgres module) never needs psycopg."""
        code = (
            "import sys, skillstate.store, skillstate.store.postgres\n"
            "assert 'psycopg' not in sys.modules, 'psycopg imported'\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True)

    def test_missing_driver_names_the_extra(self) -> None:
        """Without psycopg, opening a postgresql:// URL says which extra to install."""
        code = (
            "import sys\n"
            "sys.modules['psycopg'] = None\n"
            "from skillstate.errors import MissingExtra\n"
            "from skillstate.store import open_store\n"
            "try:\n"
            "    open_store('postgresql://u@127.0.0.1/db')\n"
            "except MissingExtra as exc:\n"
            "    print(exc)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        assert "skillstate[postgres]" in result.stdout


# ---------------------------------------------------------------- with a server


@pytest.mark.services
class TestSchema:
    def test_open_store_and_masked_url(self, pg_url: str) -> None:
        """open_store() picks this backend for both schemes; ``url`` hides the password."""
        for scheme in ("postgresql", "postgres"):
            url = pg_url.replace("postgresql://postgres@", f"{scheme}://postgres:pw@", 1)
            store = open_store(url)
            try:
                assert isinstance(store, PostgresStore)
                assert ":pw@" not in store.url
            finally:
                store.close()

    def test_setup_is_idempotent_and_recorded(self, pg: PostgresStore, pg_url: str) -> None:
        """Every migration is recorded once; setup() and reopening change nothing."""
        latest = [version for version, _ in MIGRATIONS]
        assert pg.schema_versions() == latest
        pg.commit("t", 0, {"task_id": "t", "version": 1}, _event("t", 1))
        pg.setup()
        pg.setup()
        again = PostgresStore(pg_url)
        try:
            assert again.schema_versions() == latest
            assert again.load("t").version == 1
        finally:
            again.close()
        assert _sql(pg, f"SELECT count(*) FROM {pg.schema}.schema_migrations") == [(len(latest),)]

    def test_concurrent_first_opens_do_not_race(self, pg_url: str) -> None:
        """Several stores opening one new schema at once all succeed (advisory lock)."""
        barrier = threading.Barrier(6)
        opened: list[PostgresStore] = []
        errors: list[BaseException] = []

        def open_one() -> None:
            barrier.wait()
            try:
                opened.append(PostgresStore(pg_url))
            except BaseException as exc:  # reported below, with the others
                errors.append(exc)

        threads = [threading.Thread(target=open_one) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for store in opened:
            store.close()
        assert errors == []
        assert len(opened) == 6

    def test_close_then_use_is_a_store_error(self, pg_url: str) -> None:
        """A closed store refuses work with a StoreError, not a pool exception."""
        store = PostgresStore(pg_url)
        store.close()
        with pytest.raises(StoreError, match="closed"):
            store.load("t")

    def test_driver_errors_are_wrapped_on_one_line(self, pg: PostgresStore) -> None:
        """A failing query surfaces as StoreError with a one-line message."""
        _sql(pg, f"DROP TABLE {pg.schema}.events")
        with pytest.raises(StoreError) as info:
            pg.commit("t", 0, {"task_id": "t", "version": 1}, _event("t", 1))
        assert "\n" not in str(info.value)
        assert isinstance(info.value.__cause__, Exception)


@pytest.mark.services
class TestData:
    def test_tasks_sort_like_python(self, pg: PostgresStore) -> None:
        """tasks() is in code-point order whatever the database collation says."""
        ids = ["b", "B", "a", "_x", "é", "Z", "a-1", "a1"]
        for task_id in ids:
            pg.commit(task_id, 0, {"task_id": task_id, "version": 1}, _event(task_id, 1))
        assert pg.tasks() == sorted(ids)

    @pytest.mark.parametrize("max_chain", [1, 3, 100])
    def test_snapshot_rule_matches_the_memory_store(self, pg_url: str, max_chain: int) -> None:
        """The snapshot decision made in SQL is chain.take_snapshot's, version for version."""
        pg = PostgresStore(pg_url, max_chain=max_chain)
        memory = MemoryStore(max_chain=max_chain)
        task_id = f"t{max_chain}"
        try:
            previous: dict[str, Any] = {}
            for v in range(1, 80):
                log = [*previous.get("log", []), f"line {v} " + "x" * (v % 5)]
                state = {"task_id": task_id, "version": v, "log": log[-12:], "n": v}
                patch = make_patch(previous, state) if v % 17 else []  # some without a patch
                for store in (pg, memory):
                    store.commit(task_id, v - 1, state, _event(task_id, v, patch=patch))
                previous = state
            flags = [(i.version, i.snapshot, i.size) for i in pg.checkpoints(task_id)]
            assert flags == [(i.version, i.snapshot, i.size) for i in memory.checkpoints(task_id)]
            for v in (1, 2, 17, 40, 78):
                assert pg.checkpoint(task_id, v).state == memory.checkpoint(task_id, v).state
        finally:
            pg.close()
            memory.close()

    def test_snapshot_thresholds_match_take_snapshot(self, pg_url: str) -> None:
        """At and around each threshold, the SQL decides exactly as take_snapshot does."""
        max_chain = 5
        pg = PostgresStore(pg_url, max_chain=max_chain)
        try:
            cases = [
                (with_patch, chain_len, offset)
                for with_patch in (True, False)
                for chain_len in (0, max_chain - 1, max_chain)
                for offset in (None, -1, 0, 1)  # None: an empty chain; else bytes vs room
            ]
            for n, (with_patch, chain_len, offset) in enumerate(cases):
                task_id = f"t{n:03d}"
                first = {"task_id": task_id, "version": 1, "text": "z" * 300, "n": 1}
                second = {**first, "version": 2, "n": 2}
                event = _event(task_id, 2, patch=make_patch(first, second) if with_patch else [])
                enc = encode_commit(task_id, 1, second, event)
                # The bytes of deltas at which this commit's patch fills the chain up.
                room = len(enc.state) - len(enc.patch or "")
                chain_bytes = 0 if offset is None else max(0, room + offset)
                pg.commit(task_id, 0, first, _event(task_id, 1))
                _sql(
                    pg,
                    f"UPDATE {pg.schema}.tasks SET chain_len = {chain_len}, "
                    f"chain_bytes = {chain_bytes} WHERE task_id = '{task_id}'",
                )
                pg.commit(task_id, 1, second, event)
                expected = take_snapshot(chain_len, chain_bytes, enc, max_chain)
                assert pg.checkpoints(task_id)[-1].snapshot is expected, cases[n]
                assert pg.checkpoint(task_id, 2).state == second
        finally:
            pg.close()

    def test_large_bodies_and_head_are_stored_compressed(self, pg: PostgresStore) -> None:
        """Long bodies and a large head are zlib bytes in the BYTEA columns; reads are exact."""
        words = [f"w{i % 97}" for i in range(9000)]
        first = {"task_id": "big", "version": 1, "words": words}  # ~40 K characters
        second = {**first, "version": 2, "extra": "y" * 1500}  # a ~1.5 K patch
        action = {"kind": "test", "note": "n" * 2000}
        events = [
            Event(task_id="big", version=1, actor="runtime", action=action),
            Event(
                task_id="big",
                version=2,
                actor="runtime",
                action=action,
                patch=make_patch(first, second),
            ),
        ]
        pg.commit("big", 0, first, events[0])
        pg.commit("big", 1, second, events[1])
        small = {"task_id": "small", "version": 1, "n": 1}
        pg.commit("small", 0, small, _event("small", 1))

        schema = pg.schema
        heads = {
            row[0]: row[1:] for row in _sql(pg, f"SELECT task_id, head, head_z FROM {schema}.tasks")
        }
        assert heads["big"][0] is None
        assert json.loads(zlib.decompress(heads["big"][1])) == second
        assert heads["small"] == (encode_commit("small", 0, small, _event("small", 1)).state, None)

        rows = _sql(
            pg,
            f"SELECT version, snapshot, snapshot_z, patch, patch_z, octet_length(snapshot_z), "
            f"octet_length(patch_z) FROM {schema}.checkpoints WHERE task_id = 'big' "
            "ORDER BY version",
        )
        (v1, snap1, snap1_z, _, _, snap1_len, _), (v2, snap2, snap2_z, patch2, patch2_z, _, p2) = (
            rows
        )
        assert (v1, snap1, v2, snap2, snap2_z, patch2) == (1, None, 2, None, None, None)
        assert json.loads(zlib.decompress(snap1_z)) == first
        assert json.loads(zlib.decompress(patch2_z)) == events[1].patch
        assert [(i.version, i.snapshot, i.size) for i in pg.checkpoints("big")] == [
            (1, True, snap1_len),
            (2, False, p2),
        ]
        stored = _sql(pg, f"SELECT event, event_z FROM {schema}.events WHERE task_id = 'big'")
        assert all(text is None and z is not None for text, z in stored)

        assert pg.load("big").state == second
        assert pg.checkpoint("big", 1).state == first
        assert pg.checkpoint("big", 2).state == second
        assert pg.events("big") == events
        assert pg.load("small").state == small
        # TOAST does not try to compress the zlib bytes again.
        storage = _sql(
            pg,
            "SELECT attname, attstorage FROM pg_attribute WHERE attrelid IN "
            f"('{schema}.tasks'::regclass, '{schema}.checkpoints'::regclass, "
            f"'{schema}.events'::regclass) AND attname LIKE '%\\_z'",
        )
        assert sorted(storage) == [(n, "e") for n in ("event_z", "head_z", "patch_z", "snapshot_z")]

    def test_mid_size_state_snapshot_is_compressed_even_on_a_stale_guess(
        self, pg: PostgresStore
    ) -> None:
        """A 768..16 K state: text head, compressed snapshot; a stale guess still reads exact."""
        state = {"task_id": "t", "version": 1, "pad": "p" * 2000}
        pg.commit("t", 0, state, _event("t", 1))
        row = _sql(pg, f"SELECT head, head_z FROM {pg.schema}.tasks")[0]
        assert row[0] is not None
        assert row[1] is None
        snap = _sql(pg, f"SELECT snapshot, snapshot_z FROM {pg.schema}.checkpoints")[0]
        assert snap[0] is None
        assert json.loads(zlib.decompress(snap[1])) == state
        # The counters change behind the store's back: it expects a delta, the server
        # takes a snapshot, and stores the head text as that snapshot.
        _sql(pg, f"UPDATE {pg.schema}.tasks SET chain_bytes = 10000000")
        second = {**state, "version": 2}
        pg.commit("t", 1, second, _event("t", 2, patch=make_patch(state, second)))
        assert pg.checkpoints("t")[-1].snapshot
        assert pg.checkpoint("t", 2).state == second
        pg.commit("t", 2, {**second, "version": 3}, _event("t", 3))
        assert pg.checkpoint("t", 2).state == second

    def test_corrupt_head_is_state_corrupted(self, pg: PostgresStore) -> None:
        """A head that is not a JSON object stops the task instead of loading garbage."""
        pg.commit("t", 0, {"task_id": "t", "version": 1}, _event("t", 1))
        _sql(pg, f"UPDATE {pg.schema}.tasks SET head = '[1, 2' WHERE task_id = 't'")
        with pytest.raises(StateCorrupted):
            pg.load("t")

    def test_lease_expiry_uses_the_database_clock(self, pg: PostgresStore) -> None:
        """expires_at is the server's now() plus the ttl."""
        before = _sql(pg, "SELECT now()")[0][0]
        lease = pg.claim("t", "w1", 30)
        after = _sql(pg, "SELECT now()")[0][0]
        assert before.timestamp() + 30 <= lease.expires_at.timestamp() <= after.timestamp() + 30
        assert lease.expires_at.utcoffset() is not None

    def test_prune_takes_turns_with_commits(self, pg_url: str) -> None:
        """Pruning while another thread commits never leaves a kept version unloadable."""
        pg = PostgresStore(pg_url, max_chain=8)
        states: dict[int, dict[str, Any]] = {}
        done = threading.Event()

        def writer() -> None:
            previous: dict[str, Any] = {}
            for v in range(1, 301):
                state = {"task_id": "t", "version": v, "n": v, "pad": "y" * 200}
                pg.commit("t", v - 1, state, _event("t", v, patch=make_patch(previous, state)))
                states[v] = previous = state
            done.set()

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            while not done.is_set():
                if states:
                    pg.prune("t", keep_last=3, keep_every=25)
            thread.join()
            pg.prune("t", keep_last=3, keep_every=25)
            kept = [info.version for info in pg.checkpoints("t")]
            assert {25, 50, 300} <= set(kept)
            for v in kept:
                assert pg.checkpoint("t", v).state == states[v]
            assert [e.version for e in pg.events("t")] == list(range(1, 301))
        finally:
            done.set()
            thread.join()
            pg.close()


class TestConnections:
    """The store's own connection: used while no other thread is, never more than needed."""

    @staticmethod
    def commit_next(store: PostgresStore, task_id: str, version: int) -> int:
        before = {"task_id": task_id, "version": version - 1} if version > 1 else {}
        state = {"task_id": task_id, "version": version}
        step = _event(task_id, version, patch=make_patch(before, state))
        return store.commit(task_id, version - 1, state, step)

    def test_a_sequential_worker_holds_one_connection(self, pg: PostgresStore) -> None:
        """Commits, loads, leases and reads share the one connection a pool alone would use."""
        for v in range(1, 6):
            self.commit_next(pg, "t", v)
            assert pg.load("t").version == v
        pg.claim("t", "w", 30)
        pg.checkpoints("t")
        pg.events("t")
        pg.release("t", "w")
        assert pg._pool.get_stats()["pool_size"] == 1
        assert pg._own is not None

    def test_threads_take_pooled_connections_meanwhile(self, pg: PostgresStore) -> None:
        errors: list[BaseException] = []

        def writer(task_id: str) -> None:
            try:
                for v in range(1, 31):
                    assert self.commit_next(pg, task_id, v) == v
                    assert pg.load(task_id).version == v
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(f"t{i}",)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert [pg.load(f"t{i}").version for i in range(6)] == [30] * 6

    def test_a_connection_left_in_a_transaction_goes_back_to_the_pool(
        self, pg: PostgresStore
    ) -> None:
        """Not idle after a use (here: a transaction left open): the pool rolls it back."""
        self.commit_next(pg, "t", 1)
        with pg._connection() as conn:
            conn.execute("BEGIN")
            conn.execute(f"DELETE FROM {pg._sql.schema}.events")
        assert pg._own is None
        assert len(pg.events("t")) == 1  # rolled back
        self.commit_next(pg, "t", 2)
        assert pg.load("t").version == 2

    def test_a_failed_statement_keeps_the_store_usable(self, pg: PostgresStore) -> None:
        self.commit_next(pg, "t", 1)
        with pytest.raises(StoreError, match="division by zero"):
            _sql(pg, "SELECT 1 / 0")
        assert self.commit_next(pg, "t", 2) == 2

    def test_a_killed_connection_is_replaced(self, pg: PostgresStore) -> None:
        """The server ends the session: that call fails (as with a pooled connection), the
        next gets a new connection."""
        self.commit_next(pg, "t", 1)
        pid = _sql(pg, "SELECT pg_backend_pid()")[0][0]
        with psycopg_connect(pg) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        try:
            self.commit_next(pg, "t", 2)
        except StoreUnavailable:
            assert self.commit_next(pg, "t", 2) == 2
        assert pg.load("t").version == 2
        assert _sql(pg, "SELECT pg_backend_pid()")[0][0] != pid

    def test_a_one_connection_pool_is_shared_by_threads(self, pg_url: str) -> None:
        """``max_connections=1``: no connection is kept aside; threads take turns."""
        store = PostgresStore(pg_url, max_connections=1)
        try:
            done: list[int] = []

            def writer(task_id: str) -> None:
                for v in range(1, 11):
                    self.commit_next(store, task_id, v)
                done.append(store.load(task_id).version)

            threads = [threading.Thread(target=writer, args=(f"t{i}",)) for i in range(3)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert done == [10, 10, 10]
            assert store._own is None
        finally:
            store.close()


def psycopg_connect(store: PostgresStore) -> Any:
    """A separate plain connection to the contract suite's server."""
    import psycopg

    return psycopg.connect(POSTGRES_URL, autocommit=True)
