"""No server path in what the inspector answers (issue 24): the store it reads, the
expectations and reports it shows, every error, and an unexpected failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")

from starlette.testclient import TestClient

from tests.ui_support import KEY_ENV, DemoStore, demo_store, ui_client

if TYPE_CHECKING:
    from starlette.applications import Starlette

SERVER_PATHS = ("/work/", "/home/", "/tmp/", "Traceback", '.py"')


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    return demo_store(tmp_path_factory.mktemp("ui-errors"))


@pytest.fixture
def key(demo: DemoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, demo.env[KEY_ENV])


def _clean(text: str, *also: str) -> bool:
    return not any(path in text for path in (*SERVER_PATHS, *also))


class TestTheStoreShown:
    def test_a_store_under_the_working_directory_is_shown_relative(
        self, demo: DemoStore, key: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``--store sqlite:////abs/dir/state.db`` run from /abs/dir shows sqlite:///state.db."""
        monkeypatch.chdir(demo.root)
        with ui_client(f"sqlite:///{demo.root / 'state.db'}") as reader:
            assert reader.get("/api/tasks").json()["store"] == "sqlite:///state.db"
            page = reader.get("/").text
            assert ">sqlite:///state.db</span>" in page
            assert _clean(page, str(demo.root))

    def test_a_store_elsewhere_is_shown_without_its_directory(
        self, demo: DemoStore, key: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.chdir(tmp_path)
        with ui_client(f"sqlite:///{demo.root / 'state.db'}") as reader:
            shown = reader.get("/api/tasks").json()["store"]
            assert shown == "sqlite:///…/state.db"
            for path in ("/", "/tasks/t1", "/steps/4/t1", "/versions/3/t1"):
                assert _clean(reader.get(path).text, str(demo.root)), path


class TestErrorsCarryNoPath:
    def test_expectations_are_named_relative(
        self, demo: DemoStore, key: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """The expectations file in a page is the path under the working directory;
        a missing one is a 400 that does not spell the server's directories."""
        monkeypatch.chdir(tmp_path)
        (tmp_path / "exp").mkdir()
        (tmp_path / "exp" / "expected.json").write_text(json.dumps({"facts": [{}]}))
        with ui_client(demo.url) as reader:
            data = reader.get("/api/tasks/t1?expect=exp/expected.json").json()
            assert data["expect"] == "exp/expected.json"
            missing = reader.get("/api/tasks/t1?expect=exp/missing.json")
            assert missing.status_code == 400
            assert "exp/missing.json" in missing.json()["error"]
            assert _clean(missing.text, str(tmp_path))
            page = reader.get(f"/tasks/t1?expect={tmp_path}/exp/missing.json")
            assert page.status_code == 400
            assert _clean(page.text, str(tmp_path))

    def test_a_broken_report_is_named_without_its_directory(
        self, demo: DemoStore, key: None, tmp_path: Path
    ) -> None:
        report = tmp_path / "my-eval"
        report.mkdir()
        (report / "report.json").write_text("{not json")
        with ui_client(demo.url, reports=(report,)) as reader:
            for path in ("/reports", "/api/reports", "/reports/1", "/api/reports/1"):
                response = reader.get(path)
                assert response.status_code in {200, 400}, path
                assert _clean(response.text, str(tmp_path)), (path, response.text[:300])
                assert "my-eval" in response.text, path

    def test_a_missing_artifact_is_named_by_its_ref_only(
        self, demo: DemoStore, key: None, tmp_path: Path
    ) -> None:
        from tests.ui_support import copy_store

        url = copy_store(demo.root / "state.db", tmp_path)
        with ui_client(url) as reader:
            rows = reader.get("/api/tasks/o1").json()["timeline"]["rows"]
            ref = next(c["ref"] for r in rows for c in r["tool_calls"] if c["ref"])
        import sqlite3

        with sqlite3.connect(tmp_path / "state.db") as db:
            tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
            db.execute(f"delete from {next(t for t in tables if 'artifact' in t)}")
        with ui_client(url) as reader:
            response = reader.get(f"/api/artifacts/{ref}/o1")
            assert response.status_code == 404, response.text
            assert _clean(response.text, str(tmp_path))

    def test_an_unexpected_failure_is_a_one_line_500(
        self, demo: DemoStore, key: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """A bug answers a one-line 500 (the log keeps the details), never a traceback."""
        from skillstate.ui import api, pages

        def boom(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError(f'failure in File "{tmp_path}/secret_module.py", line 3')

        monkeypatch.setattr(api, "head_summary", boom)
        monkeypatch.setattr(pages, "task_view", boom)
        with TestClient(_app(demo), raise_server_exceptions=False) as reader:
            response = reader.get("/api/head/t1")
            assert response.status_code == 500
            assert response.json() == {
                "error": "internal error: the inspector's log has the details",
                "kind": "InternalError",
            }
            page = reader.get("/tasks/t1")
            assert page.status_code == 500
            assert 'id="error"' in page.text
            assert _clean(page.text, str(tmp_path), "secret_module")

    @pytest.mark.parametrize(
        ("method", "path", "status"),
        [
            ("GET", "/no/such/page", 404),
            ("GET", "/api/no/such", 404),
            ("DELETE", "/api/tasks", 405),
            ("PATCH", "/tasks/t1", 405),
            ("GET", "/tasks/..%2f..%2fetc%2fpasswd", 404),
            ("GET", "/api/artifacts/..%2f..%2fetc%2fpasswd/t1", 404),
            ("GET", "/reports/1/plots/..%2freport.json", 404),
        ],
    )
    def test_routing_errors_are_clean(
        self, demo: DemoStore, key: None, method: str, path: str, status: int
    ) -> None:
        with TestClient(_app(demo), raise_server_exceptions=False) as reader:
            response = reader.request(method, path)
            assert response.status_code == status, response.text[:300]
            assert _clean(response.text, str(demo.root))
            if path.startswith("/api/"):
                assert "\n" not in response.json()["error"]


def _app(demo: DemoStore) -> Starlette:
    from skillstate.ui import UIConfig, create_app

    return create_app(UIConfig(store_url=demo.url, hosts=()))
