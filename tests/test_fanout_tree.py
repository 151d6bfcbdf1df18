"""Parents and children on the command line: ``tasks --tree``, ``show`` and ``log``.

The cards are written straight into a store (plain JSON, as the fan-out engine writes
them: a child's ``parent`` link, a parent's ``children`` records), so these tests
exercise the listing and the links on their own; test_fanout_lifecycle.py drives real
tasks. Every command runs in a subprocess, like every CLI test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skillstate.events import Event
from skillstate.state.model import AgentState, ChildRecord, ParentLink
from skillstate.store import open_store
from skillstate.store.base import Store
from tests.test_cli import assert_no_traceback, run_cli, store_url

AGENT = "nowhere_to_import:agent"  # the listing and show never need the agent


def put(store: Store, task_id: str, status: str, **fields: Any) -> None:
    """A card at version 1 (``fields`` are AgentState fields)."""
    state = AgentState(task_id=task_id, goal="g", version=1, **fields)
    document = state.to_json() | {"status": status, "agent": AGENT}
    event = Event(task_id=task_id, version=1, actor="runtime", action={"kind": "create"})
    store.commit(task_id, 0, document, event)


def link(parent: str, key: str, version: int = 2, depth: int = 1) -> ParentLink:
    return ParentLink(task_id=parent, version=version, name="channel", key=key, depth=depth)


def record(task_id: str, key: str, status: str = "pending", **more: Any) -> ChildRecord:
    return ChildRecord(task_id=task_id, name="channel", key=key, version=2, status=status, **more)


@pytest.fixture
def family(tmp_path: Path) -> str:
    """p (waiting for children a and b; a has a child of its own), root r, and an orphan
    whose parent ``gone`` was never written."""
    url = store_url(tmp_path)
    store = open_store(url)
    try:
        put(
            store,
            "p",
            "waiting_children",
            children=(record("p.2.a", "a"), record("p.2.b", "b", "completed", summary="done")),
        )
        put(store, "p.2.a", "waiting_children", parent=link("p", "a"))
        put(store, "p.2.a.2.x", "running", parent=link("p.2.a", "x", depth=2))
        put(store, "p.2.b", "completed", parent=link("p", "b"))
        put(store, "r", "running")
        put(store, "gone.2.z", "failed", parent=link("gone", "z"))
    finally:
        store.close()
    return url


def tree(tmp_path: Path, url: str, *args: str) -> list[str]:
    code, out, err = run_cli(tmp_path, "tasks", "--tree", "--store", url, *args)
    assert code == 0, err
    assert_no_traceback(out, err)
    return out.splitlines()


def first_cells(lines: list[str]) -> list[str]:
    """Each row's TASK cell up to its status (the drawing, the id and any note)."""
    statuses = (" waiting_children ", " running ", " completed ", " failed ")
    cells = []
    for line in lines[1:-1]:
        cut = min(line.find(s) for s in statuses if s in line)
        cells.append(line[:cut].rstrip())
    return cells


class TestTasksTree:
    def test_children_under_their_parents_and_the_orphan_as_a_root(
        self, tmp_path: Path, family: str
    ) -> None:
        """Every task once: children indented under their parent, an orphan a root."""
        lines = tree(tmp_path, family)
        assert lines[0].split()[:2] == ["TASK", "STATUS"]
        assert first_cells(lines) == [
            "gone.2.z  (orphan: parent gone is gone)",
            "p",
            "├─ p.2.a",
            "│  └─ p.2.a.2.x",
            "└─ p.2.b",
            "r",
        ]
        assert lines[-1].startswith("6 tasks in sqlite:///")

    def test_a_filtered_parent_still_lists_all_its_children(
        self, tmp_path: Path, family: str
    ) -> None:
        """--status waiting_children keeps p and p.2.a; p's children show whatever their
        status; p.2.a is shown under p, not again as a root."""
        lines = tree(tmp_path, family, "--status", "waiting_children")
        assert first_cells(lines) == ["p", "├─ p.2.a", "│  └─ p.2.a.2.x", "└─ p.2.b"]
        assert "completed" in lines[4]  # the filtered-out child, with its own status

    def test_a_child_whose_parent_is_filtered_out_is_a_root_with_a_note(
        self, tmp_path: Path, family: str
    ) -> None:
        lines = tree(tmp_path, family, "--status", "completed")
        assert first_cells(lines) == ["p.2.b  (child of p)"]

    def test_depth_limits_the_levels_and_says_what_it_hid(
        self, tmp_path: Path, family: str
    ) -> None:
        lines = tree(tmp_path, family, "--depth", "1")
        cells = first_cells(lines)
        assert "├─ p.2.a  (+1 below --depth 1)" in cells
        assert not any("p.2.a.2.x" in c for c in cells)
        assert lines[-1].startswith("5 tasks, 1 more below --depth 1 in ")
        roots = first_cells(tree(tmp_path, family, "--depth", "0"))
        assert roots == ["gone.2.z  (orphan: parent gone is gone)", "p  (+3 below --depth 0)", "r"]

    def test_json_nests_the_children(self, tmp_path: Path, family: str) -> None:
        code, out, err = run_cli(tmp_path, "tasks", "--tree", "--json", "--store", family)
        assert code == 0, err
        roots = {node["task_id"]: node for node in json.loads(out)}
        assert set(roots) == {"gone.2.z", "p", "r"}
        assert roots["gone.2.z"]["note"] == "orphan: parent gone is gone"
        kids = roots["p"]["children"]
        assert [(k["task_id"], k["status"], k["parent"]) for k in kids] == [
            ("p.2.a", "waiting_children", "p"),
            ("p.2.b", "completed", "p"),
        ]
        assert kids[0]["children"][0]["task_id"] == "p.2.a.2.x"

    def test_parent_links_that_loop_are_listed_not_dropped(self, tmp_path: Path) -> None:
        """A damaged pair of cards naming each other as parent: both listed, once each."""
        url = store_url(tmp_path)
        store = open_store(url)
        try:
            put(store, "x", "running", parent=link("y", "k"))
            put(store, "y", "running", parent=link("x", "k"))
        finally:
            store.close()
        cells = first_cells(tree(tmp_path, url))
        assert cells == [
            "x  (child of y (parent links loop))",
            "└─ y",
            "y  (child of x (parent links loop))",
            "└─ x",
        ]

    def test_the_flat_listing_is_unchanged(self, tmp_path: Path, family: str) -> None:
        code, out, err = run_cli(tmp_path, "tasks", "--store", family)
        assert code == 0, err
        assert [line.split()[0] for line in out.splitlines()[1:-1]] == [
            "gone.2.z",
            "p",
            "p.2.a",
            "p.2.a.2.x",
            "p.2.b",
            "r",
        ]


class TestShowAndLog:
    def test_a_child_shows_its_parent_link(self, tmp_path: Path, family: str) -> None:
        code, out, err = run_cli(tmp_path, "show", "p.2.a", "--store", family)
        assert code == 0, err
        assert (
            "parent: p (spawned this at its version 2; kind channel, key a, depth 1; "
            "now waiting_children)" in out
        )

    def test_an_orphan_says_its_parent_is_gone(self, tmp_path: Path, family: str) -> None:
        code, out, err = run_cli(tmp_path, "show", "gone.2.z", "--store", family)
        assert code == 0, err
        assert "parent: gone (spawned this at its version 2; kind channel, key z" in out
        assert "now gone)" in out

    def test_a_parent_shows_its_children_with_their_status(
        self, tmp_path: Path, family: str
    ) -> None:
        code, out, err = run_cli(tmp_path, "show", "p", "--store", family)
        assert code == 0, err
        assert "children of p" in out
        rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│ p.2." in line}
        assert set(rows) == {"p.2.a", "p.2.b"}
        cells_a = [c.strip() for c in rows["p.2.a"].split("│")[1:-1]]
        assert cells_a == ["p.2.a", "channel", "a", "v2", "pending", "waiting_children", "-"]
        cells_b = [c.strip() for c in rows["p.2.b"].split("│")[1:-1]]
        assert cells_b == ["p.2.b", "channel", "b", "v2", "completed", "completed", "done"]

    def test_a_task_without_family_shows_no_links(self, tmp_path: Path, family: str) -> None:
        code, out, err = run_cli(tmp_path, "show", "r", "--store", family)
        assert code == 0, err
        assert "parent:" not in out
        assert "children of" not in out

    def test_the_join_event_in_log_lists_the_children(self, tmp_path: Path, family: str) -> None:
        store = open_store(family)
        try:
            head = store.load("p")
            joined = {"p.2.a": "failed", "p.2.b": "completed"}
            document = dict(head.state) | {"version": 2, "status": "running"}
            event = Event(
                task_id="p",
                version=2,
                actor="runtime",
                action={"kind": "join", "children": joined},
            )
            store.commit("p", 1, document, event)
        finally:
            store.close()
        code, out, err = run_cli(tmp_path, "log", "p", "--store", family)
        assert code == 0, err
        assert "joined 2 child task(s):" in out
        assert "p.2.a failed" in out
        assert "p.2.b completed" in out
        code, out, err = run_cli(tmp_path, "log", "p", "--json", "--store", family)
        assert code == 0, err
        assert json.loads(out)[-1]["action"]["children"] == joined
