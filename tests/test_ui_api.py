"""The web inspector's JSON API and pages, in process (Starlette's TestClient).

The store is filled by real ``skillstate demo`` runs; the browser tests
(``test_ui_browser.py``) drive the same pages through a real Chromium.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")
pytest.importorskip("jinja2", reason="the ui extra is not installed: pip install '.[ui]'")

from starlette.testclient import TestClient

from skillstate.ui import UIConfig, create_app
from tests.cli_support import run_env
from tests.contract.backends import URLS, drop_postgres_schemas, drop_redis_data
from tests.ui_support import KEY_ENV, SECRET, DemoStore, demo_store

TOKEN = "test-token-0123456789"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    """t1 completed, t2 waiting for a reply, o1 with a sealed token (real demo runs)."""
    return demo_store(tmp_path_factory.mktemp("ui-demo"))


@pytest.fixture
def key(demo: DemoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server knows the store's key (so it can mask the plaintext as well)."""
    monkeypatch.setenv(KEY_ENV, demo.env[KEY_ENV])


def client(url: str, **options: Any) -> TestClient:
    config = UIConfig(store_url=url, hosts=(), **options)
    return TestClient(create_app(config))


@pytest.fixture
def reader(demo: DemoStore, key: None) -> Iterator[TestClient]:
    with client(demo.url) as opened:
        yield opened


def _copy(demo: DemoStore, tmp_path: Path) -> str:
    """A private copy of the demo store, for tests that write."""
    import sqlite3

    target = tmp_path / "state.db"
    with sqlite3.connect(demo.root / "state.db") as source, sqlite3.connect(target) as copy:
        source.backup(copy)
    return f"sqlite:///{target}"


@pytest.fixture
def writer(demo: DemoStore, key: None, tmp_path: Path) -> Iterator[TestClient]:
    with client(_copy(demo, tmp_path), allow_edit=True, token=TOKEN) as opened:
        yield opened


class TestTaskList:
    def test_lists_every_task_with_its_columns(self, reader: TestClient) -> None:
        """One row per task, with status, agent, step, version, steps, tokens and lease."""
        data = reader.get("/api/tasks").json()
        rows = {row["task_id"]: row for row in data["rows"]}
        assert set(rows) == {"t1", "t2", "o1"}
        assert rows["t2"]["status"] == "waiting_user"
        assert rows["t1"]["agent"] == "skillstate.examples.ticket:agent"
        assert rows["t1"]["steps"] > 0
        assert rows["t1"]["version"] == 10
        assert {"tokens", "lease", "lease_text", "updated_at", "current_step"} <= set(rows["t1"])

    def test_filters_search_and_pages(self, reader: TestClient) -> None:
        """Status, agent and id filters narrow the list; size splits it into pages."""
        assert [
            r["task_id"] for r in reader.get("/api/tasks?status=waiting_user").json()["rows"]
        ] == ["t2"]
        orders = reader.get("/api/tasks?agent=skillstate.examples.orders:agent").json()
        assert [r["task_id"] for r in orders["rows"]] == ["o1"]
        assert [r["task_id"] for r in reader.get("/api/tasks?q=T&sort=id").json()["rows"]] == [
            "t1",
            "t2",
        ]
        paged = reader.get("/api/tasks?size=2&page=2&sort=id").json()
        assert (paged["pages"], [r["task_id"] for r in paged["rows"]]) == (2, ["t2"])
        assert "completed" in paged["statuses"]

    def test_html_list(self, reader: TestClient) -> None:
        """The page renders the rows and links each task."""
        page = reader.get("/?status=completed").text
        assert 'href="/tasks/t1"' in page
        assert 'href="/tasks/t2"' not in page


class TestTask:
    def test_card_timeline_and_decisions(self, reader: TestClient) -> None:
        """The card at the head and every step, with decisions numbered and skills named."""
        data = reader.get("/api/tasks/t1").json()
        assert data["card"]["status"] == "completed"
        assert data["version"] == 10
        rows = data["timeline"]["rows"]
        assert [r["version"] for r in rows] == list(range(1, 11))
        skill = next(r for r in rows if r["skill"] == "record_ticket_type")
        assert skill["verdict"] == "ok"
        assert skill["decision"] == 2
        assert skill["tool_calls"][0]["tool"] == "classify_ticket"
        assert {r["actor"] for r in rows} == {"runtime", "policy", "user"}

    def test_step_diff_before_after(self, reader: TestClient) -> None:
        """A step's JSON Patch and each changed field before and after."""
        data = reader.get("/api/steps/4/t1").json()
        fields = {f["name"]: f for f in data["diff"]["fields"]}
        assert json.loads(fields["ticket_type"]["after"]) == "network"
        assert fields["ticket_type"]["before"] == "null"
        assert any(op["path"] == "/ticket_type" for op in data["diff"]["patch"])
        page = reader.get("/steps/4/t1").text
        assert 'class="field-diff" data-field="ticket_type"' in page

    def test_state_at_any_version(self, reader: TestClient) -> None:
        """The card as it was at an earlier version."""
        assert reader.get("/api/versions/3/t1").json()["state"]["ticket_type"] is None
        assert reader.get("/api/versions/10/t1").json()["state"]["ticket_type"] == "network"
        assert reader.get("/versions/3/t1").status_code == 200

    def test_artifact_of_a_tool_call(self, reader: TestClient) -> None:
        """A tool call's raw output opens from its ref."""
        rows = reader.get("/api/tasks/o1").json()["timeline"]["rows"]
        ref = next(c["ref"] for r in rows for c in r["tool_calls"] if c["ref"])
        data = reader.get(f"/api/artifacts/{ref}/o1").json()
        assert data["size"] > 0
        assert data["text"]
        assert data["ref"] == ref
        assert reader.get(f"/artifacts/{ref}/o1").status_code == 200
        assert reader.get("/api/artifacts/sha256:nothex/o1").status_code == 400

    def test_token_curve_compares_view_and_history(self, reader: TestClient) -> None:
        """The chart's data: per decision, the state view against the full history."""
        data = reader.get("/api/tokens/t1").json()
        assert data["compared"] is True
        last = data["points"][-1]
        assert last["history"] > last["state_view"] > 0
        chart = reader.get("/chart/t1").text
        assert "<svg" in chart
        assert 'data-series="state view"' in chart
        assert 'data-series="full history"' in chart

    def test_first_bad_step_with_expectations(
        self, reader: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With an expectations file, the first step that diverged is named and highlighted."""
        monkeypatch.chdir(tmp_path)  # the inspector reads expectations under its cwd only
        expect = tmp_path / "expected.json"
        expect.write_text(json.dumps({"facts": [{}, {"ticket_type": "hardware"}]}))
        data = reader.get(f"/api/tasks/t1?expect={expect}").json()
        assert data["first_bad"]["decision"] == 2
        assert data["first_bad"]["version"] == 4
        assert "hardware" in data["first_bad"]["reason"]
        page = reader.get(f"/tasks/t1?expect={expect}").text
        assert 'id="v4" class="step actor-policy bad' in page
        assert reader.get("/api/tasks/t1").json()["first_bad"] is None

    def test_expectations_only_from_where_the_operator_keeps_files(
        self, reader: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """?expect= cannot make the server read an arbitrary file."""
        inside = tmp_path / "cwd"
        inside.mkdir()
        monkeypatch.chdir(inside)
        outside = tmp_path / "expected.json"
        outside.write_text(json.dumps({"facts": [{}, {"ticket_type": "hardware"}]}))
        for path in (str(outside), "/etc/passwd", f"{inside}/../expected.json"):
            response = reader.get("/api/tasks/t1", params={"expect": path})
            assert response.status_code == 400, path
            assert "working directory" in response.json()["error"]

    def test_long_timeline_is_paged(self, demo: DemoStore, key: None) -> None:
        """A timeline longer than a page shows the latest page, with links to the others."""
        with client(demo.url, page_size=3) as small:
            data = small.get("/api/tasks/t1").json()["timeline"]
            assert (data["page"], data["pages"], len(data["rows"])) == (4, 4, 1)
            first = small.get("/api/tasks/t1?page=1").json()["timeline"]["rows"]
            assert [r["version"] for r in first] == [1, 2, 3]
            assert 'rel="prev"' in small.get("/tasks/t1").text

    def test_unknown_task_is_404(self, reader: TestClient) -> None:
        """A missing task is a 404 page and a 404 JSON error."""
        assert reader.get("/tasks/nope").status_code == 404
        assert reader.get("/api/tasks/nope").json()["kind"] == "TaskNotFound"


class TestMasking:
    def test_secret_is_masked_everywhere(self, reader: TestClient) -> None:
        """The orders token shows as *** and its plaintext is in no page or response."""
        data = reader.get("/api/tasks/o1").json()
        assert data["card"]["api_token"] == "***"
        bodies = [json.dumps(data)]
        for row in data["timeline"]["rows"]:
            version = row["version"]
            for path in (f"/api/steps/{version}/o1", f"/steps/{version}/o1"):
                bodies.append(reader.get(path).text)
            for path in (f"/api/versions/{version}/o1", f"/versions/{version}/o1"):
                bodies.append(reader.get(path).text)
            for call in row["tool_calls"]:
                if call["ref"]:
                    bodies.append(reader.get(f"/api/artifacts/{call['ref']}/o1").text)
        bodies += [reader.get(p).text for p in ("/tasks/o1", "/chart/o1", "/api/tokens/o1", "/")]
        assert all(SECRET not in body for body in bodies)
        assert all("enc:v1:" not in body for body in bodies)
        assert '<tr data-field="api_token"><th>api_token</th><td>***</td>' in bodies[-4]


class TestWrites:
    def test_read_only_refuses_every_write(self, reader: TestClient) -> None:
        """Without --allow-edit, a write is 403 even with a token."""
        for name in ("reply", "rollback", "fork", "set"):
            response = reader.post(
                f"/api/actions/{name}/t2", json={"text": "x"}, headers={"X-Skillstate-Token": "x"}
            )
            assert response.status_code == 403, name
            assert "read-only" in response.json()["error"]
        assert reader.post("/actions/reply/t2", data={"text": "x"}).status_code == 403

    def test_write_without_or_with_a_wrong_token_is_refused(self, writer: TestClient) -> None:
        """--allow-edit still needs the token on every write."""
        before = writer.get("/api/head/t2").json()["version"]
        for headers in ({}, {"X-Skillstate-Token": "wrong"}, {"Authorization": "Bearer nope"}):
            response = writer.post("/api/actions/reply/t2", json={"text": "x"}, headers=headers)
            assert response.status_code == 401
        assert writer.get("/api/head/t2").json()["version"] == before
        assert 'id="reply-form"' in writer.get("/tasks/t2").text

    def test_reply_advances_the_task(self, writer: TestClient) -> None:
        """A reply with the token is committed as the CLI's, then the task keeps running."""
        response = writer.post(
            "/api/actions/reply/t2",
            json={"text": "The VPN keeps dropping"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert response.status_code == 200, response.text
        deadline = time.monotonic() + 60
        while writer.get("/api/head/t2").json()["version"] < 5:
            assert time.monotonic() < deadline, "the task did not advance"
            time.sleep(0.05)
        rows = writer.get("/api/tasks/t2?page=1").json()["timeline"]["rows"]
        reply = next(r for r in rows if r["kind"] == "reply")
        assert reply["actor"] == "user"
        assert "VPN" in reply["detail"]

    def test_reply_into_needs_a_sensitive_field(self, writer: TestClient) -> None:
        """``into`` is ``skillstate reply --into``: a field that is not Sensitive is a 400
        that does not echo the reply, and nothing is committed."""
        before = writer.get("/api/head/t2").json()["version"]
        response = writer.post(
            "/api/actions/reply/t2",
            json={"text": "4556 7375 8689 9855", "into": "priority"},
            headers={"X-Skillstate-Token": TOKEN},
        )
        assert response.status_code == 400, response.text
        assert "not a Sensitive field" in response.json()["error"]
        assert "8689" not in response.text
        assert writer.get("/api/head/t2").json()["version"] == before
        refused = writer.post(
            "/api/actions/reply/t2",
            json={"text": "x", "into": 3},
            headers={"X-Skillstate-Token": TOKEN},
        )
        assert refused.status_code == 400

    def test_set_rollback_fork_are_human_events(self, writer: TestClient) -> None:
        """The form writes go through the CLI's code and are logged with actor human."""
        auth = {"X-Skillstate-Token": TOKEN}
        ok = writer.post(
            "/api/actions/set/t1", json={"assignments": "resolution=by hand"}, headers=auth
        )
        assert ok.status_code == 200, ok.text
        refused = writer.post(
            "/api/actions/set/t1", json={"assignments": "status=running"}, headers=auth
        )
        assert refused.status_code == 400
        assert "--force" in refused.json()["error"]
        back = writer.post(
            "/actions/rollback/t1", data={"to": "4", "token": TOKEN}, follow_redirects=False
        )
        assert back.status_code == 303
        assert "rolled back" in writer.get(back.headers["location"]).text
        fork = writer.post("/api/actions/fork/t1", json={"at": 4, "new_id": "t1b"}, headers=auth)
        assert fork.status_code == 200, fork.text
        rows = writer.get("/api/tasks/t1").json()["timeline"]["rows"]
        assert [r["kind"] for r in rows if r["actor"] == "human"] == ["set", "rollback"]
        assert writer.get("/api/tasks/t1b").json()["timeline"]["rows"][0]["kind"] == "fork"

    def test_a_sensitive_value_never_comes_back(self, writer: TestClient) -> None:
        """Setting the sensitive field is masked in the log, the card and an error."""
        auth = {"X-Skillstate-Token": TOKEN}
        new = "tok-NEW-SECRET-4242"
        ok = writer.post(
            "/api/actions/set/o1", json={"assignments": f"api_token={new}"}, headers=auth
        )
        assert ok.status_code == 200, ok.text
        bad = writer.post(
            "/api/actions/set/o1", json={"assignments": f"api_token=[{new}]"}, headers=auth
        )
        assert bad.status_code == 400
        texts = [ok.text, bad.text, writer.get("/api/tasks/o1").text, writer.get("/tasks/o1").text]
        assert all(new not in text for text in texts)

    def test_an_agent_that_is_not_allowed_is_never_imported(
        self, writer: TestClient, demo: DemoStore, tmp_path: Path
    ) -> None:
        """A stored reference off the allow-list: pages still show the card; writes refuse."""
        from skillstate.store import open_store

        store = open_store(writer.app.state.ui.config.store_url)  # type: ignore[attr-defined]
        try:
            from skillstate.engine.edits import set_agent_reference

            set_agent_reference(store, "t2", "tests.ui_never_imported:agent")
        finally:
            store.close()
        page = writer.get("/tasks/t2").text
        assert "not an allowed agent" in page
        refused = writer.post(
            "/api/actions/reply/t2", json={"text": "x"}, headers={"X-Skillstate-Token": TOKEN}
        )
        assert refused.status_code == 403
        assert "not an allowed agent" in refused.json()["error"]
        assert "tests.ui_never_imported" not in sys.modules


@pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.services),
        pytest.param("redis", marks=pytest.mark.services),
    ],
)
def test_task_list_from_every_server_store(backend: str, tmp_path: Path) -> None:
    """The tasks page lists the tasks of SQLite, PostgreSQL and Redis stores alike."""
    from skillstate.engine.agent import load_agent
    from skillstate.engine.runtime import Runtime
    from skillstate.store import open_store

    url = URLS[backend](tmp_path)
    agent = load_agent("skillstate.examples.ticket:agent")
    store = open_store(url)
    try:
        Runtime(agent, store).run("done-1", inputs=list(agent.sample_inputs), create=True)
        Runtime(agent, store).run("waits-2", create=True)
        with client(url) as reader:
            rows = {r["task_id"]: r for r in reader.get("/api/tasks").json()["rows"]}
            assert rows["done-1"]["status"] == "completed"
            assert rows["waits-2"]["status"] == "waiting_user"
            assert 'href="/tasks/waits-2"' in reader.get("/").text
            assert reader.get("/api/tasks/done-1").json()["card"]["priority"] == "P1"
    finally:
        store.close()
        drop_redis_data()
        drop_postgres_schemas()


def test_eval_report_links_each_run(tmp_path: Path) -> None:
    """A real `skillstate eval` directory: its tables and plots, and each row's timeline."""
    out = tmp_path / "eval"
    code, _stdout, stderr = run_env(
        tmp_path,
        None,
        "eval", "--suite", "long", "--tasks", "1", "--groups", "short",
        "--variants", "history,skillstate", "--seeds", "1", "--no-recovery", "--out", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    from skillstate.store import open_store

    open_store(f"sqlite:///{tmp_path / 'state.db'}").close()  # the served store: empty
    with client(f"sqlite:///{tmp_path / 'state.db'}", reports=(out,)) as reader:
        report = reader.get("/api/reports/1").json()
        assert {t["variant"] for t in report["tasks"]} == {"history", "skillstate"}
        assert all(t["stored"] for t in report["tasks"])
        page = reader.get("/reports/1").text
        assert 'id="variants"' in page
        assert page.count('class="run-link"') == 2
        run = report["tasks"][0]["run"]
        assert reader.get(f"/r/1/{run}/tasks/task").status_code == 200
        timeline = reader.get(f"/api/r/1/{run}/tasks/task").json()
        assert timeline["expect"].endswith("expected.json")
        assert timeline["timeline"]["steps"] > 1
        if report["plots"]:
            plot = reader.get(f"/reports/1/plots/{report['plots'][0]}")
            assert plot.headers["content-type"] == "image/png"
        assert reader.get("/reports/1/plots/report.json").status_code == 404
        assert reader.get("/r/1/..%2f..%2fx/tasks/task").status_code in {400, 404}


def test_import_skillstate_does_not_load_the_web_stack() -> None:
    """starlette, uvicorn and jinja2 load only with skillstate ui, not with the package."""
    code = (
        "import sys, skillstate, skillstate.cli, skillstate.ui; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'uvicorn', 'jinja2')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
