"""The inspector's writes as documented (docs/ui.md, the API's docstrings), and the
control characters no edit may carry (issue 24)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")

from starlette.testclient import TestClient

from tests.ui_support import KEY_ENV, DemoStore, copy_store, demo_store, ui_client

TOKEN = "edits-token-77aa01"
AUTH = {"X-Skillstate-Token": TOKEN}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    return demo_store(tmp_path_factory.mktemp("ui-edits"))


@pytest.fixture
def writer(
    demo: DemoStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[TestClient]:
    monkeypatch.setenv(KEY_ENV, demo.env[KEY_ENV])
    url = copy_store(demo.root / "state.db", tmp_path)
    with ui_client(url, allow_edit=True, token=TOKEN) as opened:
        yield opened


def _card(client: TestClient, task_id: str) -> dict[str, object]:
    card: dict[str, object] = client.get(f"/api/tasks/{task_id}").json()["card"]
    return card


class TestSetAsDocumented:
    def test_assignments_as_lines_or_a_list_with_yaml_values(self, writer: TestClient) -> None:
        """``assignments``: PATH=VALUE lines in one string, or a list of them; VALUE is YAML."""
        lines = writer.post(
            "/api/actions/set/t1",
            json={"assignments": "resolution=by hand\nfacts.sla_hours=8"},
            headers=AUTH,
        )
        assert lines.status_code == 200, lines.text
        listed = writer.post(
            "/api/actions/set/t1",
            json={"assignments": ["resolution=listed", "facts.sla_hours=[1, 2]"]},
            headers=AUTH,
        )
        assert listed.status_code == 200, listed.text
        assert listed.json()["version"] == 12
        card = _card(writer, "t1")
        assert card["resolution"] == "listed"
        assert card["facts"] == {"sla_hours": [1, 2]}

    def test_force_is_a_json_boolean(self, writer: TestClient) -> None:
        refused = writer.post(
            "/api/actions/set/t1",
            json={"assignments": "status=running", "force": False},
            headers=AUTH,
        )
        assert refused.status_code == 400
        assert "force" in refused.json()["error"]
        forced = writer.post(
            "/api/actions/set/t1",
            json={"assignments": ["status=failed"], "force": True},
            headers=AUTH,
        )
        assert forced.status_code == 200, forced.text
        assert _card(writer, "t1")["status"] == "failed"

    def test_rollback_and_fork_take_whole_numbers(self, writer: TestClient) -> None:
        """``to`` and ``at`` are JSON whole numbers (a form sends them as digits)."""
        back = writer.post("/api/actions/rollback/t1", json={"to": 4}, headers=AUTH)
        assert back.status_code == 200, back.text
        fork = writer.post(
            "/api/actions/fork/t1", json={"at": 4, "new_id": "t1-fork"}, headers=AUTH
        )
        assert fork.status_code == 200, fork.text
        form = writer.post(
            "/actions/rollback/t1", data={"to": "3", "token": TOKEN}, follow_redirects=False
        )
        assert form.status_code == 303, form.text

    def test_a_refusal_keeps_the_kind_of_its_error(self, writer: TestClient) -> None:
        """An action's error is named as the command's would be (not a bare HTTP one)."""
        missing = writer.post("/api/actions/set/nope", json={"assignments": "a=1"}, headers=AUTH)
        assert (missing.status_code, missing.json()["kind"]) == (404, "TaskNotFound")
        bad = writer.post("/api/actions/set/t1", json={"assignments": "nonsense"}, headers=AUTH)
        assert (bad.status_code, bad.json()["kind"]) == (400, "UsageError")


class TestControlCharacters:
    @pytest.mark.parametrize(
        "assignments",
        [
            "resolution=a\x01b",
            "resolution=a\x00b",
            "resolution=\x1b[31mred",
            'resolution="bell \\a"',
            'resolution="escape \\e[2J"',
            'resolution="next line \\N"',
            'resolution="\\x7f"',
            "facts.note\x07=1",
            'facts.notes=["ok", "bad\\x08"]',
            'facts={"k\\x01": 1}',
            "resolution=a\rb",
        ],
        ids=repr,
    )
    def test_a_control_character_in_a_set_is_400(
        self, writer: TestClient, assignments: str
    ) -> None:
        """Raw or through a YAML escape, in a value, a key or a path: refused, one line."""
        response = writer.post(
            "/api/actions/set/t1", json={"assignments": assignments}, headers=AUTH
        )
        assert response.status_code == 400, response.text
        message = response.json()["error"]
        assert "control character" in message
        assert "\n" not in message
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in message)
        assert writer.get("/api/head/t1").json()["version"] == 10

    def test_newlines_and_tabs_in_a_value_are_text(self, writer: TestClient) -> None:
        """Long text keeps its line breaks and tabs (as ``skillstate set`` does)."""
        ok = writer.post(
            "/api/actions/set/t1",
            json={"assignments": 'resolution="two\\nlines\\tand a tab"'},
            headers=AUTH,
        )
        assert ok.status_code == 200, ok.text
        assert _card(writer, "t1")["resolution"] == "two\nlines\tand a tab"

    def test_a_forms_crlf_lines_are_separate_assignments(self, writer: TestClient) -> None:
        """Browsers send a textarea's lines with CRLF: each is one assignment."""
        response = writer.post(
            "/actions/set/t1",
            data={"assignments": "resolution=by form\r\nfacts.sla_hours=2\r\n", "token": TOKEN},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        card = _card(writer, "t1")
        assert (card["resolution"], card["facts"]) == ("by form", {"sla_hours": 2})

    @pytest.mark.parametrize("text", ["hi\x1b[2J", "nul\x00", "del\x7f", "c1\x9b"], ids=repr)
    def test_a_control_character_in_a_reply_is_400(self, writer: TestClient, text: str) -> None:
        response = writer.post("/api/actions/reply/t2", json={"text": text}, headers=AUTH)
        assert response.status_code == 400, response.text
        assert "control character" in response.json()["error"]
        assert writer.get("/api/head/t2").json()["version"] == 2

    def test_a_control_character_in_a_forks_id_is_400(self, writer: TestClient) -> None:
        response = writer.post(
            "/api/actions/fork/t1", json={"at": 4, "new_id": "f\x07"}, headers=AUTH
        )
        assert response.status_code == 400, response.text
