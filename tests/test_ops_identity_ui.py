"""Named inspector tokens (issue 29): read or write rights, and the token's name as the
``by`` of every write it makes. Over HTTP, in process (Starlette's TestClient), and one
``skillstate ui --token-file`` server in a subprocess.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")

from starlette.testclient import TestClient

from skillstate.errors import UsageError
from skillstate.store import open_store
from skillstate.ui.access import NamedToken, parse_tokens
from tests.ui_support import KEY_ENV, DemoStore, copy_store, demo_store, ui_client

WRITE = "write-token-for-alice-5f2a9c"
READ = "read-token-for-dashboard-77b1"
TOKENS_TOML = f"""
alice = {{ sha256 = "{hashlib.sha256(WRITE.encode()).hexdigest()}", rights = "write" }}
dashboard = {{ token = "{READ}", rights = "read" }}
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    return demo_store(tmp_path_factory.mktemp("ui-identity"))


@pytest.fixture
def url(demo: DemoStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    monkeypatch.setenv(KEY_ENV, demo.env[KEY_ENV])
    return copy_store(demo.root / "state.db", tmp_path)


def _tokens() -> tuple[NamedToken, ...]:
    return parse_tokens(TOKENS_TOML, "tokens.toml")


@pytest.fixture
def client(url: str) -> Iterator[TestClient]:
    with ui_client(url, allow_edit=True, tokens=_tokens()) as opened:
        yield opened


def _events(url: str, task_id: str) -> list[object]:
    store = open_store(url)
    try:
        return list(store.events(task_id))
    finally:
        store.close()


class TestReads:
    def test_reads_need_a_token(self, client: TestClient) -> None:
        """No token, or an unknown one: 401 (JSON for the API, the login form for a page)."""
        for headers in ({}, {"X-Skillstate-Token": "not-a-token-at-all-1234"}):
            api = client.get("/api/tasks", headers=headers)
            assert api.status_code == 401
            assert api.json()["kind"] == "TokenRequired"
            page = client.get("/", headers=headers)
            assert page.status_code == 401
            assert 'action="/login"' in page.text

    @pytest.mark.parametrize("token", [READ, WRITE])
    def test_a_read_or_write_token_reads(self, client: TestClient, token: str) -> None:
        assert client.get("/api/tasks", headers={"X-Skillstate-Token": token}).status_code == 200
        bearer = {"Authorization": f"Bearer {token}"}
        assert client.get("/tasks/t1", headers=bearer).status_code == 200

    def test_the_login_page_sets_a_cookie_pages_then_read_with(self, client: TestClient) -> None:
        refused = client.post("/login", data={"token": "wrong-token-0000000000"})
        assert refused.status_code == 401
        done = client.post("/login", data={"token": READ}, follow_redirects=False)
        assert done.status_code == 303
        assert "httponly" in done.headers["set-cookie"].lower()
        assert client.get("/tasks/t1").status_code == 200  # the cookie, no header

    def test_without_named_tokens_pages_stay_open(self, url: str) -> None:
        with ui_client(url) as opened:
            assert opened.get("/api/tasks").status_code == 200
            assert opened.get("/login").status_code == 404


class TestWrites:
    def test_a_read_token_cannot_write(self, client: TestClient, url: str) -> None:
        before = len(_events(url, "t1"))
        refused = client.post(
            "/api/actions/set/t1",
            json={"assignments": "resolution=nope"},
            headers={"X-Skillstate-Token": READ},
        )
        assert refused.status_code == 403
        assert refused.json()["kind"] == "ReadToken"
        assert len(_events(url, "t1")) == before

    def test_an_unknown_token_cannot_write(self, client: TestClient, url: str) -> None:
        before = len(_events(url, "t1"))
        for token in ("", "write-token-for-alice-5f2a9d"):  # one character off
            refused = client.post(
                "/api/actions/set/t1",
                json={"assignments": "resolution=nope"},
                headers={"X-Skillstate-Token": token} if token else {},
            )
            assert refused.status_code == 401, refused.text
        assert len(_events(url, "t1")) == before

    def test_the_write_tokens_name_lands_in_the_event(self, client: TestClient, url: str) -> None:
        done = client.post(
            "/api/actions/set/t1",
            json={"assignments": "resolution=by hand", "reason": "customer called back"},
            headers={"X-Skillstate-Token": WRITE},
        )
        assert done.status_code == 200, done.text
        event = _events(url, "t1")[-1]
        assert (event.by, event.reason) == ("alice", "customer called back")  # type: ignore[attr-defined]
        assert WRITE not in str(event.model_dump())  # type: ignore[attr-defined]
        page = client.get("/tasks/t1", headers={"X-Skillstate-Token": READ})
        assert "by alice" in page.text
        assert "customer called back" in page.text

    def test_a_forms_write_records_the_name_too(self, client: TestClient, url: str) -> None:
        """A browser: logged in (the cookie lets it read), the form carries the write token."""
        client.post("/login", data={"token": READ}, follow_redirects=False)
        done = client.post(
            "/actions/rollback/t1",
            data={"token": WRITE, "to": "1"},
            follow_redirects=False,
        )
        assert done.status_code == 303, done.text
        event = _events(url, "t1")[-1]
        assert (event.action["kind"], event.by) == ("rollback", "alice")  # type: ignore[attr-defined]

    def test_a_bad_reason_is_refused(self, client: TestClient, url: str) -> None:
        before = len(_events(url, "t1"))
        refused = client.post(
            "/api/actions/set/t1",
            json={"assignments": "resolution=x", "reason": "one\ntwo"},
            headers={"X-Skillstate-Token": WRITE},
        )
        assert refused.status_code == 400
        assert "--reason refused" in refused.json()["error"]
        assert len(_events(url, "t1")) == before

    def test_the_single_token_still_records_inspector(self, url: str) -> None:
        with ui_client(url, allow_edit=True, token=WRITE) as opened:
            done = opened.post(
                "/api/actions/set/t1",
                json={"assignments": "resolution=single"},
                headers={"X-Skillstate-Token": WRITE},
            )
            assert done.status_code == 200, done.text
        assert _events(url, "t1")[-1].by == "inspector"  # type: ignore[attr-defined]


class TestTokenFile:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ('a = { token = "short", rights = "write" }', "at least 16 printable characters"),
            ('a = { sha256 = "abc", rights = "read" }', "sha256 must be 64 hex digits"),
            ('a = { token = "long-enough-token-xx", rights = "admin" }', "rights must be"),
            ('"a\\nb" = { token = "long-enough-token-xx", rights = "read" }', "token name"),
            (
                'a = { token = "long-enough-token-xx", rights = "read" }\n'
                'b = { token = "long-enough-token-xx", rights = "write" }',
                "two names share one token",
            ),
            ("", "names no token"),
        ],
    )
    def test_a_bad_tokens_file_is_one_line(self, text: str, message: str) -> None:
        with pytest.raises(UsageError, match=message) as raised:
            parse_tokens(text, "tokens.toml")
        assert "\n" not in str(raised.value)
        assert "long-enough-token-xx" not in str(raised.value)

    def test_the_server_never_prints_a_token(self, url: str, tmp_path: Path) -> None:
        """``skillstate ui --token-file``: names on stdout, never tokens; reads need one."""
        import subprocess
        import sys
        import time

        from tests.cli_support import cli_env
        from tests.test_cli import ENTRY
        from tests.ui_support import free_port

        (tmp_path / "tokens.toml").write_text(TOKENS_TOML, encoding="utf-8")
        port = free_port()
        args = ["ui", "--port", str(port), "--token-file", str(tmp_path / "tokens.toml")]
        log = tmp_path / "ui.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", ENTRY, *args],
                cwd=tmp_path,
                env=cli_env(tmp_path) | {"SKILLSTATE_STORE": url},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        base = f"http://127.0.0.1:{port}/api/tasks"
        try:
            deadline = time.monotonic() + 60
            while True:  # until it answers the read token (observed, not slept for)
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "skillstate ui did not answer in 60 s"
                try:
                    opened = urllib.request.Request(base, headers={"X-Skillstate-Token": READ})
                    with urllib.request.urlopen(opened, timeout=2) as answered:
                        assert answered.status == 200
                        break
                except (OSError, urllib.error.URLError):
                    time.sleep(0.05)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(base, timeout=10)
            assert refused.value.code == 401
            refused.value.close()  # an HTTPError holds the response's socket open
        finally:
            process.terminate()
            process.wait(timeout=10)
        output = log.read_text()
        assert "2 named token(s); writers: alice" in output
        assert WRITE not in output
        assert READ not in output
