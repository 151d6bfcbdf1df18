"""Fingerprint kinds beyond files (issue 26): SQL query results, HTTP resources, probes.

Each kind must see a change, see no change when there is none, and never call an
unreachable or failing resource "unchanged".
"""

from __future__ import annotations

import socket
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from skillstate import (
    Action,
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
    View,
)
from skillstate.errors import FingerprintUnavailable, UsageError
from skillstate.state.fingerprint import (
    ABSENT,
    current_digest,
    register_fingerprint_kind,
    same,
    sql_digest,
    sqlite_target,
    take,
)
from skillstate.store.memory import MemoryStore

# ---------------------------------------------------------------- SQL


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE prices (sku TEXT PRIMARY KEY, cents INTEGER)")
        conn.executemany("INSERT INTO prices VALUES (?, ?)", [("a", 100), ("b", 250)])
    return path


def _set_price(db: Path, sku: str, cents: int) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE prices SET cents = ? WHERE sku = ?", (cents, sku))


class TestSQL:
    QUERY = "SELECT sku, cents FROM prices ORDER BY sku"

    def test_sqlite_kind_sees_a_change_and_no_change(self, db: Path) -> None:
        target = sqlite_target(str(db), self.QUERY)
        first = take(target, kind="sqlite")
        assert first.digest.startswith("sha256:")
        assert same(first.digest, current_digest("sqlite", target))
        _set_price(db, "b", 260)
        assert not same(first.digest, current_digest("sqlite", target))
        _set_price(db, "b", 250)  # back as it was: the same rows, the same digest
        assert same(first.digest, current_digest("sqlite", target))

    def test_a_row_outside_the_query_is_not_a_change(self, db: Path) -> None:
        target = sqlite_target(str(db), "SELECT cents FROM prices WHERE sku = 'a'")
        before = current_digest("sqlite", target)
        _set_price(db, "b", 999)
        assert same(before, current_digest("sqlite", target))

    def test_a_missing_database_is_never_unchanged(self, tmp_path: Path) -> None:
        target = sqlite_target(str(tmp_path / "gone.db"), self.QUERY)
        digest = current_digest("sqlite", target)
        assert digest.startswith("error:")
        assert not same(digest, current_digest("sqlite", target))  # not even to itself
        assert not (tmp_path / "gone.db").exists()  # read-only: nothing was created
        with pytest.raises(FingerprintUnavailable, match="cannot fingerprint sqlite"):
            take(target, kind="sqlite")

    def test_sql_digest_takes_any_dbapi_connection(self, db: Path) -> None:
        register_fingerprint_kind("shop_db", sql_digest(lambda: sqlite3.connect(db)))
        before = take(self.QUERY, kind="shop_db")
        assert same(before.digest, current_digest("shop_db", self.QUERY))
        _set_price(db, "a", 101)
        assert not same(before.digest, current_digest("shop_db", self.QUERY))
        assert current_digest("shop_db", "SELECT nope FROM nowhere").startswith("error:")

    def test_a_bad_target_is_an_error_not_a_digest(self) -> None:
        assert current_digest("sqlite", "no separator here").startswith("error:")
        with pytest.raises(ValueError, match="cannot contain"):
            sqlite_target("a::b.db", "SELECT 1")


# ---------------------------------------------------------------- HTTP


class _Resource(BaseHTTPRequestHandler):
    """Serves ``/etag`` (ETag), ``/modified`` (Last-Modified), ``/plain`` (neither),
    ``/nohead`` (405 on HEAD), ``/gone`` (404) and ``/broken`` (500)."""

    body: ClassVar[bytes] = b"v1"
    version: ClassVar[str] = "1"
    seen: ClassVar[list[str]] = []

    def _answer(self, method: str) -> None:
        type(self).seen.append(f"{method} {self.path}")
        if self.path == "/gone":
            self.send_error(404)
            return
        if self.path == "/broken":
            self.send_error(500)
            return
        if self.path == "/nohead" and method == "HEAD":
            self.send_error(405)
            return
        self.send_response(200)
        if self.path == "/etag":
            self.send_header("ETag", f'"{self.version}"')
        if self.path == "/modified":
            self.send_header("Last-Modified", f"Mon, 0{self.version} Jan 2024 00:00:00 GMT")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        if method == "GET":
            self.wfile.write(self.body)

    def do_HEAD(self) -> None:
        self._answer("HEAD")

    def do_GET(self) -> None:
        self._answer("GET")

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    _Resource.body, _Resource.version, _Resource.seen = b"v1", "1", []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Resource)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class TestHTTP:
    def test_an_etag_is_asked_with_head_only(self, server: str) -> None:
        url = f"{server}/etag"
        first = take(url, kind="http")
        assert first.digest == 'etag:"1"'
        assert same(first.digest, current_digest("http", url))
        assert _Resource.seen == ["HEAD /etag", "HEAD /etag"]  # never the body
        _Resource.version = "2"
        assert not same(first.digest, current_digest("http", url))

    def test_last_modified_when_there_is_no_etag(self, server: str) -> None:
        url = f"{server}/modified"
        first = current_digest("http", url)
        assert first.startswith("modified:")
        assert same(first, current_digest("http", url))
        _Resource.version = "2"
        assert not same(first, current_digest("http", url))

    def test_the_body_when_there_is_no_validator(self, server: str) -> None:
        url = f"{server}/plain"
        first = current_digest("http", url)
        assert first.startswith("sha256:")
        assert same(first, current_digest("http", url))
        _Resource.body = b"v2"
        assert not same(first, current_digest("http", url))

    def test_a_server_without_head_is_asked_with_get(self, server: str) -> None:
        url = f"{server}/nohead"
        first = current_digest("http", url)
        assert first.startswith("sha256:")
        assert "GET /nohead" in _Resource.seen
        _Resource.body = b"v2"
        assert not same(first, current_digest("http", url))

    def test_gone_is_absent_and_errors_are_never_unchanged(self, server: str) -> None:
        assert current_digest("http", f"{server}/gone") == ABSENT
        broken = current_digest("http", f"{server}/broken")
        assert broken == "error:HTTPError"
        assert not same(broken, current_digest("http", f"{server}/broken"))

    def test_an_unreachable_server_is_never_unchanged(self) -> None:
        url = _nothing_listens()
        digest = current_digest("http", url)
        assert digest.startswith("error:")
        assert not same(digest, current_digest("http", url))
        with pytest.raises(FingerprintUnavailable):
            take(url, kind="http")

    def test_only_http_urls(self, tmp_path: Path) -> None:
        (tmp_path / "x").write_text("x")
        assert current_digest("http", f"file://{tmp_path / 'x'}") == "error:ValueError"


def _nothing_listens() -> str:
    """A URL on a port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/x"


# ---------------------------------------------------------------- user probes


class TestProbe:
    def test_a_probe_that_raises_is_stale_not_trusted(self) -> None:
        versions = {"doc-1": "7"}

        def version_of(target: str) -> str:
            return f"v:{versions[target]}"  # KeyError once the document is gone

        register_fingerprint_kind("doc_version", version_of)
        first = take("doc-1", kind="doc_version")
        assert same(first.digest, current_digest("doc_version", "doc-1"))
        versions["doc-1"] = "8"
        assert not same(first.digest, current_digest("doc_version", "doc-1"))
        del versions["doc-1"]
        assert current_digest("doc_version", "doc-1") == "error:KeyError"

    def test_a_kind_must_be_an_identifier_and_known(self) -> None:
        with pytest.raises(UsageError, match="identifier"):
            register_fingerprint_kind("not ok", lambda t: t)
        with pytest.raises(UsageError, match="unknown fingerprint kind 'nope'"):
            current_digest("nope", "x")


# ---------------------------------------------------------------- through a task


class PriceState(AgentState):
    db: str = ""
    url: str = ""
    quote: int | None = None
    page: str | None = None


def price_agent(runs: list[str]) -> Agent[PriceState]:
    """quote reads a price row (sqlite kind); fetch_page reads an HTTP resource (http kind)."""
    skills: SkillRegistry = SkillRegistry()

    @skills.skill(reads=["db"], outputs=["quote"])
    def quote(state: PriceState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Quote the price of sku a."""
        runs.append("quote")
        query = "SELECT cents FROM prices WHERE sku = 'a'"
        with sqlite3.connect(state.db) as conn:
            (cents,) = conn.execute(query).fetchone()
        ctx.fingerprint(sqlite_target(state.db, query), kind="sqlite")
        return Outcome(writes={"quote": cents})

    quote.verifier(lambda s, o: s.quote is not None)

    @skills.skill(reads=["url"], outputs=["page"])
    def fetch_page(state: PriceState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Note the page's version."""
        runs.append("fetch_page")
        taken = ctx.fingerprint(state.url, kind="http")
        return Outcome(writes={"page": taken.digest})

    fetch_page.verifier(lambda s, o: s.page is not None)

    def decide(view: View[PriceState]) -> Action:
        pending = view.state.pending_steps
        return CallSkill(skill=pending[0]) if pending else Finish()

    return Agent(
        name="prices",
        state_type=PriceState,
        machine=StateMachine({"init": ["init"]}, final=["init"]),
        skills=skills,
        policy=ScriptedPolicy(decide),
        plan=("quote", "fetch_page"),
    )


def test_a_task_redoes_only_the_step_whose_resource_changed(db: Path, server: str) -> None:
    runs: list[str] = []
    agent = price_agent(runs)
    store = MemoryStore()
    runtime = Runtime(agent, store)
    runtime.start("t", db=str(db), url=f"{server}/etag")
    runtime.run("t", max_steps=2)
    assert Runtime(agent, store).recheck("t") == []  # nothing changed: nothing stale
    _set_price(db, "a", 120)
    assert [r.skill for r in Runtime(agent, store).recheck("t")] == ["quote"]
    _Resource.version = "2"
    result = Runtime(agent, store).run("t")
    assert result.stopped == "completed"
    assert runs[:2] == ["quote", "fetch_page"]
    assert sorted(runs[2:]) == ["fetch_page", "quote"]  # each redone once
    assert result.state.quote == 120
    assert result.state.page == 'etag:"2"'
