"""The inspector against hostile requests (issue 24): whose secrets mask an artifact,
the token before the body, bounded bodies and pages, JSON that cannot crash a
write, notices only the server made, no server path in any answer, no control
character in an edit, and the set API as its docs say.

In process (Starlette's TestClient) against a store filled by real demo runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")

from starlette.testclient import TestClient

from tests.ui_support import KEY_ENV, SECRET, DemoStore, copy_store, demo_store, ui_client

TOKEN = "security-token-3c1d9e"
AUTH = {"X-Skillstate-Token": TOKEN}
SERVER_PATHS = ("/work/", "/home/", "/tmp/", "Traceback", '.py"')


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    return demo_store(tmp_path_factory.mktemp("ui-security"))


@pytest.fixture
def key(demo: DemoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, demo.env[KEY_ENV])


@pytest.fixture
def url(demo: DemoStore, key: None, tmp_path: Path) -> str:
    """A private copy of the demo store."""
    return copy_store(demo.root / "state.db", tmp_path)


@pytest.fixture
def writer(url: str) -> Iterator[TestClient]:
    with ui_client(url, allow_edit=True, token=TOKEN) as opened:
        yield opened


def _head(client: TestClient, task_id: str) -> int:
    version: int = client.get(f"/api/head/{task_id}").json()["version"]
    return version


def _one_line_error(response: Any) -> str:
    """The error of a refused request: a 4xx, no server path, one line (JSON) or a page."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:300])
    assert not any(path in response.text for path in SERVER_PATHS), response.text[:300]
    if not response.headers["content-type"].startswith("application/json"):
        assert 'id="error"' in response.text
        return ""
    message: str = response.json()["error"]
    assert "\n" not in message
    return message


class TestArtifactsMaskedByOwner:
    def _plant(self, url: str) -> str:
        """An artifact of o1 holding o1's secret in clear, referenced by o1's log only."""
        from skillstate.events import Event, ToolCall
        from skillstate.store import open_store
        from skillstate.store.sealing import write_artifact

        store = open_store(url)
        try:
            ref = write_artifact(store, f"the key is {SECRET} (echoed)".encode())
            head = store.load("o1", verify=False)
            event = Event(
                task_id="o1",
                version=head.version + 1,
                actor="human",
                action={"kind": "note"},
                tool_calls=(ToolCall(tool="echo", ref=ref),),
            )
            store.commit("o1", head.version, {**head.state, "version": head.version + 1}, event)
        finally:
            store.close()
        return ref

    def test_another_tasks_artifact_is_refused(self, url: str) -> None:
        """o1's artifact under t1's URL (whose masker knows no secret) is a 404."""
        ref = self._plant(url)
        with ui_client(url) as reader:
            for path in (f"/api/artifacts/{ref}/t1", f"/artifacts/{ref}/t1"):
                response = reader.get(path)
                assert response.status_code == 404, path
                assert SECRET not in response.text
            own = reader.get(f"/api/artifacts/{ref}/o1")
            assert own.status_code == 200
            assert "the key is ***" in own.json()["text"]
            assert SECRET not in reader.get(f"/artifacts/{ref}/o1").text

    def test_a_ref_the_card_holds_is_served(self, url: str) -> None:
        """A ref the task's own events carry anywhere (its evidence) opens under it."""
        with ui_client(url) as reader:
            evidence = reader.get("/api/tasks/t1").json()["card"]["evidence"]
            ref = evidence[0]["ref"]
            assert reader.get(f"/api/artifacts/{ref}/t1").status_code == 200
            assert reader.get(f"/api/artifacts/{ref}/t2").status_code == 404


class TestTokenBeforeBody:
    BODIES = (
        b"[" * 20_000 + b"]" * 20_000,
        b'{"text": "\\ud800"}',
        b"\xff\xfe\x00",
        b'{"to": NaN}',
        b"x" * 200_000,
    )

    def test_a_write_without_the_token_is_401_whatever_the_body(self, writer: TestClient) -> None:
        """The token is checked first: a hostile body without it is a 401, nothing else."""
        before = _head(writer, "t1")
        for body in self.BODIES:
            for headers in ({}, {"X-Skillstate-Token": "wrong"}):
                response = writer.post(
                    "/api/actions/set/t1",
                    content=body,
                    headers={**headers, "Content-Type": "application/json"},
                )
                assert response.status_code == 401, (body[:20], response.text[:200])
        assert _head(writer, "t1") == before

    def test_the_token_in_a_json_body_is_not_a_token(self, writer: TestClient) -> None:
        """The API takes the token from a header only (a form's field is for forms)."""
        response = writer.post(
            "/api/actions/set/t1", json={"assignments": "resolution=x", "token": TOKEN}
        )
        assert response.status_code == 401

    def test_read_only_refuses_before_the_body(self, url: str) -> None:
        with ui_client(url) as reader:
            response = reader.post("/api/actions/set/t1", content=self.BODIES[0], headers=AUTH)
            assert response.status_code == 403


class TestBodyBound:
    def test_a_body_over_the_bound_is_413_naming_it(self, url: str) -> None:
        """Content-Length over the bound, or more bytes than that in a chunked body: 413."""
        with ui_client(url, allow_edit=True, token=TOKEN, max_body=1000) as small:
            big = json.dumps({"assignments": "resolution=" + "x" * 2000}).encode()
            response = small.post(
                "/api/actions/set/t1",
                content=big,
                headers={**AUTH, "Content-Type": "application/json"},
            )
            assert response.status_code == 413
            assert "1000 bytes" in _message(response)

            def chunks() -> Iterator[bytes]:
                yield b'{"assignments": "resolution='
                for _ in range(20):
                    yield b"y" * 100
                yield b'"}'

            chunked = small.post(
                "/api/actions/set/t1",
                content=chunks(),
                headers={**AUTH, "Content-Type": "application/json"},
            )
            assert "content-length" not in {k.lower() for k in chunked.request.headers}
            assert chunked.status_code == 413
            form = small.post(
                "/actions/set/t1", data={"assignments": "resolution=" + "z" * 2000, "token": TOKEN}
            )
            assert form.status_code == 413
            assert _head(small, "t1") == 10

    def test_the_default_bound(self, writer: TestClient) -> None:
        from skillstate.ui.body import MAX_BODY

        body = b'{"text": "' + b"a" * MAX_BODY + b'"}'
        response = writer.post(
            "/api/actions/reply/t2",
            content=body,
            headers={**AUTH, "Content-Type": "application/json"},
        )
        assert response.status_code == 413
        assert f"{MAX_BODY} bytes" in _message(response)


def _message(response: Any) -> str:
    message: str = response.json()["error"]
    assert "\n" not in message
    return message


HOSTILE = [
    ("set", b"[" * 20_000 + b"]" * 20_000),
    ("set", b'{"assignments": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"),
    ("set", b'{"assignments": "resolution=\\ud800"}'),
    ("set", b'{"assignments": ["resolution=\\udfff"]}'),
    ("set", b'{"\\ud800": 1}'),
    ("reply", b'{"text": "\\ud800"}'),
    ("fork", b'{"at": 2, "new_id": "x\\ud800"}'),
    ("rollback", b'{"to": ' + b"9" * 5000 + b"}"),
    ("rollback", b'{"to": ' + b"9" * 4000 + b"}"),
    ("rollback", b'{"to": 100000000000000000000000000000}'),
    ("rollback", b'{"to": -3}'),
    ("rollback", b'{"to": 1e400}'),
    ("rollback", b'{"to": NaN}'),
    ("rollback", b'{"to": Infinity}'),
    ("rollback", b'{"to": -Infinity}'),
    ("rollback", b'{"to": 2.5}'),
    ("rollback", b'{"to": true}'),
    ("rollback", b'{"to": "four"}'),
    ("rollback", b'{"to": [4]}'),
    ("rollback", b'{"to": 4, "effects": {"a": 1}}'),
    ("rollback", b'{"to": 4, "effects": "maybe"}'),
    ("reply", b'{"text": 3}'),
    ("reply", b'{"text": null}'),
    ("set", b'{"assignments": {"resolution": "x"}}'),
    ("set", b'{"assignments": [3]}'),
    ("set", b'{"assignments": "resolution=x", "force": "maybe"}'),
    ("set", b'{"assignments": "resolution=x", "surprise": 1}'),
    ("set", b"\xff\xfe\xfd"),
    ("set", b'{"assignments": "resolution=\xe9"}'),
    ("set", b""),
    ("set", b"   "),
    ("set", b"[]"),
    ("set", b'"resolution=x"'),
    ("set", b"42"),
    ("set", b"null"),
    ("set", b'{"assignments": "resolution=x"'),
    ("set", b'{"assignments": "x=1", "assignments": 2}'),
]


class TestHostileJson:
    @pytest.mark.parametrize(("action", "body"), HOSTILE, ids=lambda v: repr(v)[:40])
    def test_hostile_json_is_a_one_line_4xx(
        self, writer: TestClient, action: str, body: bytes
    ) -> None:
        """Never a 500: a 4xx with a one-line JSON error, and nothing written."""
        task = "t2" if action == "reply" else "t1"
        before = _head(writer, task)
        response = writer.post(
            f"/api/actions/{action}/{task}",
            content=body,
            headers={**AUTH, "Content-Type": "application/json"},
        )
        _one_line_error(response)
        assert _head(writer, task) == before

    def test_a_form_to_the_json_api_is_415(self, writer: TestClient) -> None:
        """The API reads a JSON body, as documented; a form says so instead of misreading it."""
        response = writer.post(
            "/api/actions/set/t1", data={"assignments": "resolution=x"}, headers=AUTH
        )
        assert response.status_code == 415
        assert "application/json" in _one_line_error(response)


class TestNotices:
    def test_a_made_up_notice_is_not_shown(self, writer: TestClient) -> None:
        """?notice= text from a link is never put on the page."""
        page = writer.get("/tasks/t1", params={"notice": "Call +1 555 0100 to verify"}).text
        assert "555 0100" not in page
        assert 'id="notice"' not in page

    def test_the_servers_notice_is_shown_and_cannot_be_altered(self, writer: TestClient) -> None:
        back = writer.post(
            "/actions/set/t1",
            data={"assignments": "resolution=by hand", "token": TOKEN},
            follow_redirects=False,
        )
        assert back.status_code == 303, back.text
        location = back.headers["location"]
        page = writer.get(location).text
        assert 'id="notice">set resolution as version 11<' in page
        forged = location.replace("resolution", "password")
        assert forged != location
        assert 'id="notice"' not in writer.get(forged).text


class TestBounds:
    def test_page_size_is_clamped(self, writer: TestClient) -> None:
        from skillstate.ui.params import MAX_PAGE_SIZE

        data = writer.get("/api/tasks", params={"size": 10**6}).json()
        assert data["size"] == MAX_PAGE_SIZE
        assert writer.get("/api/tasks", params={"size": 2}).json()["size"] == 2
        assert writer.get("/api/tasks").json()["size"] == 50

    @pytest.mark.parametrize(
        "query",
        [
            "size=-1",
            "size=0",
            "size=abc",
            "size=1e3",
            "size=" + "9" * 30,
            "size=" + "9" * 5000,
            "page=-1",
            "page=0",
            "page=" + "9" * 5000,
            "page=%00",
            "sort=" + "x" * 5000,
        ],
    )
    def test_garbage_page_parameters_are_400(self, writer: TestClient, query: str) -> None:
        message = _one_line_error(writer.get(f"/api/tasks?{query}"))
        assert len(message) < 300
        assert writer.get(f"/?{query}").status_code == 400

    @pytest.mark.parametrize(
        "path",
        [
            "/api/tasks/t1?page=-5",
            "/api/tasks/t1?page=" + "9" * 5000,
            "/api/versions/99999999999999999999999/t1",
            "/versions/99999999999999999999999/t1",
            "/api/steps/99999999999999999999999/t1",
            "/api/steps/" + "9" * 5000 + "/t1",
            "/steps/" + "9" * 5000 + "/t1",
            "/api/reports/" + "9" * 5000,
            "/r/" + "9" * 5000 + "/x/tasks/task",
            "/api/r/99999999999999999999999/x/tasks/task",
            "/api/tasks/t1?expect=%00",
            "/api/tasks/t1?expect=" + "a" * 5000 + ".json",
        ],
    )
    def test_numbers_and_paths_out_of_range_are_4xx(self, writer: TestClient, path: str) -> None:
        _one_line_error(writer.get(path))
