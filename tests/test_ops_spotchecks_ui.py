"""Spot-checks through the inspector (the review queue over HTTP, the write gate, the
reviewer's identity) and the command line (``skillstate spot-checks``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")

from starlette.testclient import TestClient

from skillstate import Runtime, open_store
from skillstate.ops.review import load_reviews
from skillstate.ops.spotchecks import sampled_steps
from skillstate.ui import UIConfig, create_app
from tests import spotcheck_agent
from tests.cli_support import run_env

TOKEN = "spot-token-5e1"
AUTH = {"X-Skillstate-Token": TOKEN}
AGENT = "tests.spotcheck_agent:agent"
SCOPE = AGENT


def _fill(root: Path, tasks: int = 3) -> str:
    url = f"sqlite:///{root / 'state.db'}"
    store = open_store(url)
    try:
        runtime = Runtime(spotcheck_agent.agent, store)
        for i in range(tasks):
            runtime.start(f"t{i}")
            assert runtime.run(f"t{i}").stopped == "completed"
    finally:
        store.close()
    return url


def _marked(url: str) -> list[tuple[str, str]]:
    store = open_store(url)
    try:
        found = sampled_steps(store, lambda t, c: spotcheck_agent.RULE)
        return [(s.task_id, s.step_id) for s in found]
    finally:
        store.close()


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)  # no project file: the agent's own rule applies
    monkeypatch.setenv("SKILLSTATE_AGENTS", AGENT)
    return _fill(tmp_path)


@pytest.fixture
def client(url: str) -> Iterator[TestClient]:
    with TestClient(
        create_app(UIConfig(store_url=url, hosts=(), allow_edit=True, token=TOKEN))
    ) as opened:
        yield opened


class TestQueue:
    """``GET /spot-checks`` and ``/api/spot-checks``."""

    def test_the_queue_lists_every_marked_unreviewed_step_with_its_detail(
        self, client: TestClient, url: str
    ) -> None:
        marked = _marked(url)
        rows = client.get("/api/spot-checks").json()
        assert [(r["task_id"], r["step"]) for r in rows] == marked
        assert marked
        first = rows[0]
        assert first["skill"] == "bump"
        assert first["verify"]["ok"] is True
        assert any(op["path"] == "/n" for op in first["patch"])  # the state diff
        page = client.get("/spot-checks")
        assert page.status_code == 200
        assert page.text.count('class="spot-check"') == len(marked)
        task, step = marked[0]
        assert f'href="/steps/{first["version"]}/{task}"' in page.text
        assert step in page.text
        assert 'name="token"' in page.text

    def test_a_read_only_inspector_shows_the_queue_without_forms_and_refuses_verdicts(
        self, url: str
    ) -> None:
        with TestClient(create_app(UIConfig(store_url=url, hosts=()))) as reader:
            page = reader.get("/spot-checks")
            assert page.status_code == 200
            assert "spot-check-form" not in page.text
            task, step = _marked(url)[0]
            sent = {"task_id": task, "step": step, "verdict": "correct"}
            refused = reader.post("/api/spot-checks/review", json=sent, headers=AUTH)
            assert refused.status_code == 403


class TestVerdicts:
    """``POST /spot-checks/review`` and ``/api/spot-checks/review``."""

    def test_a_form_verdict_is_recorded_and_leaves_the_queue(
        self, client: TestClient, url: str
    ) -> None:
        task, step = _marked(url)[0]
        form = {"token": TOKEN, "task_id": task, "step": step, "verdict": "correct", "note": "ok"}
        sent = client.post("/spot-checks/review", data=form, follow_redirects=False)
        assert sent.status_code == 303
        after = client.get(sent.headers["location"])
        assert "recorded correct by inspector" in after.text
        assert (task, step) not in {
            (r["task_id"], r["step"]) for r in client.get("/api/spot-checks").json()
        }
        every = client.get("/api/spot-checks?all=1").json()
        reviewed = next(r for r in every if (r["task_id"], r["step"]) == (task, step))
        assert [(v["verdict"], v["by"], v["note"]) for v in reviewed["reviews"]] == [
            ("correct", "inspector", "ok")
        ]

    def test_the_reviewer_is_the_actor_field_or_the_tokens_name(
        self, client: TestClient, url: str
    ) -> None:
        (task, step), (task2, step2) = _marked(url)[:2]
        sent = {"task_id": task, "step": step, "verdict": "incorrect", "actor": "dana"}
        answer = client.post("/api/spot-checks/review", json=sent, headers=AUTH)
        assert answer.status_code == 200, answer.text
        assert "by dana" in answer.json()["message"]

        from skillstate.ui.access import parse_tokens

        writer, reader = "erin-token-0a1b2c", "rita-token-9f8e7d"
        tokens = parse_tokens(
            f'erin = {{ token = "{writer}", rights = "write" }}\n'
            f'rita = {{ token = "{reader}", rights = "read" }}\n',
            "test",
        )
        config = UIConfig(store_url=url, hosts=(), allow_edit=True, tokens=tokens)
        with TestClient(create_app(config)) as named:
            sent = {"task_id": task2, "step": step2, "verdict": "unsure"}
            as_erin = {"X-Skillstate-Token": writer}
            # A named token's owner cannot claim another name, and a read token cannot write.
            claim = named.post(
                "/api/spot-checks/review", json={**sent, "actor": "mallory"}, headers=as_erin
            )
            assert claim.status_code == 400
            assert "acts as 'erin'" in claim.json()["error"]
            read_only = {"X-Skillstate-Token": reader}
            assert (
                named.post("/api/spot-checks/review", json=sent, headers=read_only).status_code
                == 403
            )
            assert named.get("/api/spot-checks", headers=read_only).status_code == 200
            answer = named.post("/api/spot-checks/review", json=sent, headers=as_erin)
            assert answer.status_code == 200
            assert "by erin" in answer.json()["message"]
        store = open_store(url)
        try:
            _, reviews = load_reviews(store, SCOPE)
        finally:
            store.close()
        assert [(r.step, r.by) for r in reviews] == [(step, "dana"), (step2, "erin")]

    @pytest.mark.parametrize(
        ("headers", "body", "status"),
        [
            ({}, {"verdict": "correct"}, 401),
            ({"X-Skillstate-Token": "wrong"}, {"verdict": "correct"}, 401),
            (AUTH, {"verdict": "maybe"}, 400),
            (AUTH, {"verdict": "correct", "extra": 1}, 400),
            (AUTH, {"verdict": "correct", "step": "0001-nope"}, 400),
            (AUTH, {"verdict": "correct", "task_id": "ghost"}, 404),
        ],
    )
    def test_bad_requests_are_refused_in_one_line_and_write_nothing(
        self,
        client: TestClient,
        url: str,
        headers: dict[str, str],
        body: dict[str, Any],
        status: int,
    ) -> None:
        task, step = _marked(url)[0]
        sent = {"task_id": task, "step": step, **body}
        answer = client.post("/api/spot-checks/review", json=sent, headers=headers)
        assert answer.status_code == status, answer.text
        assert "\n" not in answer.json()["error"]
        store = open_store(url)
        try:
            assert load_reviews(store, SCOPE) == (0, [])
        finally:
            store.close()

    def test_a_form_without_its_token_is_refused(self, client: TestClient, url: str) -> None:
        task, step = _marked(url)[0]
        form = {"task_id": task, "step": step, "verdict": "correct"}
        assert client.post("/spot-checks/review", data=form).status_code == 401


class TestCommandLine:
    """``skillstate spot-checks``, ``review`` and ``report``."""

    def test_list_review_report(self, url: str, tmp_path: Path) -> None:
        env = {"SKILLSTATE_AGENTS": AGENT, "SKILLSTATE_ACTOR": "fay", "PYTHONPATH": _root()}
        marked = _marked(url)
        code, out, err = run_env(tmp_path, env, "spot-checks", "--pending", "--json")
        assert code == 0, err
        assert [(r["task_id"], r["step"]) for r in json.loads(out)] == marked
        (t1, s1), (t2, s2), (t3, s3) = marked[:3]
        for task, step, verdict, extra in [
            (t1, s1, "correct", ()),
            (t2, s2, "incorrect", ("--actor", "gus")),
            (t3, s3, "unsure", ()),
        ]:
            code, out, err = run_env(
                tmp_path,
                env,
                "spot-checks",
                "review",
                task,
                step,
                "--verdict",
                verdict,
                "--note",
                "seen",
                *extra,
            )
            assert code == 0, err
            assert f"recorded {verdict} by {extra[1] if extra else 'fay'}" in out
        code, out, err = run_env(tmp_path, env, "spot-checks", "--pending", "--json")
        assert len(json.loads(out)) == len(marked) - 3
        code, out, err = run_env(tmp_path, env, "spot-checks", "report", "--json")
        assert code == 0, err
        overall = json.loads(out)["overall"]
        assert (overall["sampled"], overall["reviewed"]) == (len(marked), 3)
        assert overall["verify_precision"]["hits"] == 1
        assert overall["verify_precision"]["n"] == 2
        code, out, err = run_env(tmp_path, env, "spot-checks", "report")
        assert code == 0
        assert "0.50 [" in out
        assert "agent" in out
        code, out, err = run_env(tmp_path, env, "log", f"skillstate:review:{SCOPE}")
        assert code == 0
        assert "spot_check" in out

    @pytest.mark.parametrize(
        ("args", "said"),
        [
            (("review", "t0", "STEP", "--verdict", "maybe"), "verdict must be one of"),
            (
                ("review", "t0", "0001-nope", "--verdict", "correct"),
                "is not marked for a spot check",
            ),
            (("review", "ghost", "0001-bump", "--verdict", "correct"), "ghost"),
            (
                ("review", "t0", "STEP", "--verdict", "correct", "--note", "x" * 2001),
                "at most 2000",
            ),
            (("--agent", "nope:agent"), "cannot import"),
        ],
    )
    def test_bad_input_is_one_line_and_exit_2(
        self, url: str, tmp_path: Path, args: tuple[str, ...], said: str
    ) -> None:
        env = {"SKILLSTATE_AGENTS": AGENT, "PYTHONPATH": _root()}
        step = _marked(url)[0][1]
        args = tuple(step if a == "STEP" else a for a in args)
        code, out, err = run_env(tmp_path, env, "spot-checks", *args)
        assert code == 2, (out, err)
        assert said in err, err
        assert len(err.strip().splitlines()) == 1, err
        store = open_store(url)
        try:
            assert load_reviews(store, SCOPE) == (0, [])
        finally:
            store.close()

    def test_a_bad_project_rule_is_one_line_and_exit_2(self, url: str, tmp_path: Path) -> None:
        (tmp_path / ".skillstate.toml").write_text("[spot_checks]\nrate = 7\n", encoding="utf-8")
        code, _out, err = run_env(tmp_path, {"PYTHONPATH": _root()}, "spot-checks")
        assert code == 2
        assert "rate must be a number from 0 to 1" in err
        assert len(err.strip().splitlines()) == 1


def _root() -> str:
    return str(Path(__file__).resolve().parent.parent)
