"""The web inspector's tree: a task page's parent link and children, the task list as
a tree (in process, Starlette's TestClient; the cards are written straight into a
store as test_fanout_tree.py writes them)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")
pytest.importorskip("jinja2", reason="the ui extra is not installed: pip install '.[ui]'")

from starlette.testclient import TestClient

from skillstate.store import open_store
from tests.test_cli import store_url
from tests.test_fanout_tree import link, put, record
from tests.ui_support import ui_client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """p with children a (waiting for its own child x) and b (completed, its summary
    holding markup), root r and an orphan."""
    url = store_url(tmp_path)
    store = open_store(url)
    try:
        put(
            store,
            "p",
            "waiting_children",
            children=(
                record("p.2.a", "a"),
                record("p.2.b", "b", "completed", summary="found <b>3</b> issues"),
            ),
        )
        put(
            store,
            "p.2.a",
            "waiting_children",
            parent=link("p", "a"),
            children=(record("p.2.a.2.x", "x"),),
        )
        put(store, "p.2.a.2.x", "running", parent=link("p.2.a", "x", depth=2))
        put(store, "p.2.b", "completed", parent=link("p", "b"))
        put(store, "r", "running")
        put(store, "gone.2.z", "failed", parent=link("gone", "z"))
    finally:
        store.close()
    with ui_client(url) as opened:
        yield opened


def links(html: str) -> list[str]:
    return re.findall(r'class="task-link" href="([^"]+)"', html)


class TestTaskPage:
    def test_a_parent_page_shows_its_children_tree_with_links(self, client: TestClient) -> None:
        page = client.get("/tasks/p")
        assert page.status_code == 200
        html = page.text
        family = html[html.index('id="family"') :]
        assert links(family)[:3] == ["/tasks/p.2.a", "/tasks/p.2.a.2.x", "/tasks/p.2.b"]
        assert "found &lt;b&gt;3&lt;/b&gt; issues" in family  # data, escaped
        assert 'id="parent"' not in html
        for href in links(family)[:3]:  # each child's own timeline page opens
            opened = client.get(href)
            assert opened.status_code == 200
            assert 'id="timeline"' in opened.text

    def test_a_child_page_links_its_parent(self, client: TestClient) -> None:
        html = client.get("/tasks/p.2.a").text
        parent = html[html.index('id="parent"') :]
        assert links(parent)[0] == "/tasks/p"
        assert "spawned at its version 2; kind channel, key a, depth 1" in parent
        assert links(html[html.index('id="children"') :])[0] == "/tasks/p.2.a.2.x"

    def test_an_orphan_says_its_parent_is_gone(self, client: TestClient) -> None:
        html = client.get("/tasks/gone.2.z").text
        assert '<span class="badge gone">gone</span>' in html

    def test_the_api_gives_the_same_family(self, client: TestClient) -> None:
        family = client.get("/api/tasks/p").json()["family"]
        assert family["parent"] is None
        a, b = family["children"]
        assert (a["task_id"], a["status"], a["now"]) == ("p.2.a", "pending", "waiting_children")
        assert [x["task_id"] for x in a["children"]] == ["p.2.a.2.x"]
        summary = "found <b>3</b> issues"
        assert (b["status"], b["now"], b["summary"]) == ("completed", "completed", summary)
        assert client.get("/api/tasks/r").json()["family"] is None


class TestTaskList:
    def test_the_list_as_a_tree(self, client: TestClient) -> None:
        rows = client.get("/api/tasks", params={"tree": "1", "sort": "id"}).json()["rows"]
        assert [(r["task_id"], r["depth"]) for r in rows] == [
            ("gone.2.z", 0),
            ("p", 0),
            ("p.2.a", 1),
            ("p.2.a.2.x", 2),
            ("p.2.b", 1),
            ("r", 0),
        ]
        assert rows[0]["note"] == "orphan: parent gone is gone"

    def test_a_filtered_tree_keeps_a_parents_children(self, client: TestClient) -> None:
        found = client.get("/api/tasks", params={"tree": "1", "status": "waiting_children"})
        assert [r["task_id"] for r in found.json()["rows"]] == ["p", "p.2.a", "p.2.a.2.x", "p.2.b"]

    def test_the_html_list_indents_children(self, client: TestClient) -> None:
        html = client.get("/", params={"tree": "1", "sort": "id"}).text
        assert 'name="tree" value="1" checked' in html
        assert links(html) == [
            "/tasks/gone.2.z",
            "/tasks/p",
            "/tasks/p.2.a",
            "/tasks/p.2.a.2.x",
            "/tasks/p.2.b",
            "/tasks/r",
        ]
        assert 'class="child" style="padding-left: 3.0em"' in html  # p.2.a.2.x, depth 2
        flat = client.get("/", params={"sort": "id"}).text
        assert 'class="child"' not in flat


class TestRollbackFromThePage:
    TOKEN = "fanout-token-5521aa"

    def test_refused_then_detached(self, tmp_path: Path) -> None:
        """The rollback action refuses (400, one line naming the children) until the
        form's ``children`` says detach; the answer says what happened to them."""
        from skillstate.store.sqlite import SQLiteStore
        from tests.tree_support import end, spawn, start_waiting

        store = SQLiteStore(tmp_path / "state.db")
        try:
            before = start_waiting(store, "p")
            children = spawn(store, "p", ["a", "b"])
            end(store, children[1])
        finally:
            store.close()
        auth = {"X-Skillstate-Token": self.TOKEN}
        with ui_client(store_url(tmp_path), allow_edit=True, token=self.TOKEN) as client:
            page = client.get("/tasks/p").text
            assert '<select name="children">' in page
            refused = client.post("/api/actions/rollback/p", json={"to": before}, headers=auth)
            assert refused.status_code == 400
            error = refused.json()["error"]
            assert "\n" not in error
            assert all(child in error for child in children)
            done = client.post(
                "/api/actions/rollback/p",
                json={"to": before, "children": "cascade"},
                headers=auth,
            )
            assert done.status_code == 200, done.text
            said = str(done.json())
            assert f"2 child task(s) detached: {children[0]}, {children[1]}" in said
            assert f"cancel posted to the unfinished ones first: {children[0]}" in said
            family = client.get("/api/tasks/p").json()["family"]
            assert [c["status"] for c in family["children"]] == ["detached", "detached"]
