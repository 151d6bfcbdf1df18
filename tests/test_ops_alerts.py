"""``skillstate alerts`` end to end: the table and JSON, exit codes, bad settings, the
webhook sink (a real HTTP receiver on 127.0.0.1), OpenTelemetry gauges and the
inspector's /metrics and task-list badges."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skillstate.events import Event
from skillstate.ops.alerts import Alert, evaluate
from skillstate.ops.rules import AlertRules, load_rules
from skillstate.ops.sinks import METRIC, OTelAlerts, Webhook, prometheus_text
from skillstate.store import open_store
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from tests.test_cli import ENTRY, run_cli, store_url

DEADLINE = 60.0
"""Seconds a test waits for observed progress before it fails (never a fixed sleep)."""


def commit(store: Store, task_id: str, version: int, **fields: Any) -> None:
    card = {"task_id": task_id, "version": version, "status": "running", "current_step": "work"}
    event = Event(task_id=task_id, version=version, actor="runtime", action={"kind": "test"})
    store.commit(task_id, version - 1, {**card, **fields}, event)


DEAD = [{"kind": "dead_letter", "message": "dead letter: 3 crashes", "permanent": True}]


class Receiver:
    """A webhook receiver on 127.0.0.1: each POST's JSON body lands in ``bodies``;
    the first ``fail`` requests are answered 500."""

    def __init__(self, fail: int = 0) -> None:
        self.bodies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner.requests += 1
                data = self.rfile.read(int(self.headers["Content-Length"]))
                if owner.requests <= fail:
                    self.send_response(500)
                    self.end_headers()
                    return
                owner.bodies.put(json.loads(data))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


class TestCommand:
    def test_no_alerts_exit_0_and_firing_exit_10(self, tmp_path: Path) -> None:
        """Nothing firing is exit 0; a dead letter is listed (table and JSON), exit 10."""
        url = store_url(tmp_path)
        db = open_store(url)
        commit(db, "ok", 1, status="completed")
        db.close()
        code, out, err = run_cli(tmp_path, "alerts", "--store", url)
        assert (code, out.strip()) == (0, "no alerts firing"), err
        db = open_store(url)
        commit(db, "dead", 1, status="failed", errors=DEAD)
        db.close()
        code, out, err = run_cli(tmp_path, "alerts", "--store", url)
        assert code == 10, err
        assert re.search(r"dead_letter\s+dead\s+\d{4}-\d\d-\d\d", out), out
        code, out, err = run_cli(tmp_path, "alerts", "--json", "--store", url)
        assert code == 10, err
        [alert] = json.loads(out)
        assert (alert["rule"], alert["task_id"]) == ("dead_letter", "dead")
        assert alert["since"]
        assert "requeue" in alert["detail"]

    def test_flags_override_the_project_file(self, tmp_path: Path) -> None:
        """[alerts] in .skillstate.toml sets a rule; a flag wins over it."""
        url = store_url(tmp_path)
        db = open_store(url)
        commit(db, "r", 1, errors=[{"kind": "skill_error", "message": "x", "step_id": "s1"}] * 2)
        db.close()
        (tmp_path / ".skillstate.toml").write_text("[alerts]\nmax_retries = 1\n")
        code, out, _ = run_cli(tmp_path, "alerts", "--json", "--store", url)
        assert code == 10
        assert json.loads(out)[0]["rule"] == "retries"
        code, out, _ = run_cli(tmp_path, "alerts", "--json", "--max-retries", "5", "--store", url)
        assert (code, json.loads(out)) == (0, [])

    @pytest.mark.parametrize(
        ("toml", "args", "says"),
        [
            ('[alerts]\nstale_after = "5 fortnights"\n', (), "stale_after"),
            ("[alerts]\nmax_retries = -1\n", (), "max_retries"),
            ("[alerts]\nnosuch = 1\n", (), "nosuch"),
            ("alerts = 3\n", (), "must be a table"),
            ("", ("--budget-warn-at", "1.5"), "budget_warn_at"),
            ("", ("--stale-after", "0"), "stale_after"),
        ],
    )
    def test_bad_settings_are_one_line_exit_2(
        self, tmp_path: Path, toml: str, args: tuple[str, ...], says: str
    ) -> None:
        """A bad rule setting (file or flag) is one line on stderr, exit 2."""
        url = store_url(tmp_path)
        open_store(url).close()
        (tmp_path / ".skillstate.toml").write_text(toml)
        code, out, err = run_cli(tmp_path, "alerts", *args, "--store", url)
        assert code == 2, out + err
        assert err.count("\n") == 1
        assert says in err
        assert "Traceback" not in err


class TestWebhook:
    def test_an_alert_reaches_the_receiver_within_one_period(
        self, tmp_path: Path, receiver: Receiver
    ) -> None:
        """`alerts --watch --webhook`: a dead letter committed while it watches is POSTed
        by the evaluation after the commit (at most one more evaluation may have been
        in flight), with ids and the rule, and no card value."""
        url = store_url(tmp_path)
        open_store(url).close()
        env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
        proc = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "alerts", "--json", "--watch", "0.5",
             "--webhook", receiver.url, "--store", url],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)  # type: ignore[union-attr]
        reader.start()
        try:
            assert json.loads(lines.get(timeout=DEADLINE)) == []  # it evaluates: nothing yet
            db = open_store(url)
            commit(db, "dead", 1, status="failed", errors=DEAD, facts={"token": "sk-SECRET"})
            db.close()
            body = receiver.bodies.get(timeout=DEADLINE)
            evaluations = 0
            while True:  # the evaluations printed since the commit, up to the one that posted
                evaluations += 1
                if json.loads(lines.get(timeout=DEADLINE)):
                    break
            assert evaluations <= 2
            assert [a["task_id"] for a in body["started"]] == ["dead"]
            assert body["counts"]["dead_letter"] == 1
            assert body["resolved"] == []
            assert "sk-SECRET" not in json.dumps(body)
            assert "sqlite" not in json.dumps(body)
            assert receiver.requests == 1  # unchanged evaluations post nothing
        finally:
            proc.terminate()
            proc.wait(timeout=DEADLINE)
            reader.join(timeout=DEADLINE)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()

    def test_a_failing_receiver_is_retried_a_bounded_number_of_times(self) -> None:
        """500s are retried up to ``retries``; the change is delivered on the last try."""
        failing = Receiver(fail=2)
        try:
            pauses: list[float] = []
            sink = Webhook(failing.url, timeout=5, retries=2, sleep=pauses.append)
            alert = Alert("dead_letter", "t", None, "workers gave up")
            result = sink.send([alert])
            assert result is not None
            assert result.delivered
            assert result.attempts == 3
            assert pauses == [0.5, 1.0]
            assert sink.send([alert]) is None  # nothing changed: nothing sent
            result = sink.send([])
            assert result is not None
            assert result.delivered
            assert failing.bodies.get(timeout=DEADLINE)["started"][0]["task_id"] == "t"
            assert failing.bodies.get(timeout=DEADLINE)["resolved"] == [
                {"rule": "dead_letter", "task_id": "t"}
            ]
        finally:
            failing.close()

    def test_an_unreachable_receiver_gives_up(self) -> None:
        """No receiver: every attempt fails fast, the sink reports it and keeps the change."""
        dead = Receiver()
        url = dead.url
        dead.close()  # the port is closed now: connections are refused
        sink = Webhook(url, timeout=2, retries=1, sleep=lambda _: None)
        result = sink.send([Alert("stale", "t", None, "x")])
        assert result is not None
        assert not result.delivered
        assert result.attempts == 2
        assert result.error
        assert sink.payload([Alert("stale", "t", None, "x")]) is not None  # sent again later

    def test_a_bad_url_is_a_usage_error(self, tmp_path: Path) -> None:
        """--webhook must be http(s): one line, exit 2."""
        url = store_url(tmp_path)
        open_store(url).close()
        code, _, err = run_cli(tmp_path, "alerts", "--webhook", "file:///etc/x", "--store", url)
        assert code == 2
        assert err.count("\n") == 1


COMMENT = re.compile(r"^# (HELP [a-z_]+ .+|TYPE [a-z_]+ (gauge|counter))$")
SAMPLE = re.compile(r'^([a-z_]+)\{[a-z_]+="((?:[^"\\\n]|\\.)*)"\} (\d+(?:\.\d+)?)$')


def parse_exposition(text: str) -> dict[tuple[str, str], float]:
    """``(metric, label value) -> value``: prometheus_client's parser when installed,
    else a strict line grammar."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        samples: dict[tuple[str, str], float] = {}
        assert text.endswith("\n")
        for line in text.splitlines():
            sample = SAMPLE.match(line)
            assert sample or COMMENT.match(line), line
            if sample:
                name, label, value = sample.groups()
                plain = re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], label)
                samples[(name, plain)] = float(value)
        return samples
    return {
        (s.name, next(iter(s.labels.values()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class TestMetrics:
    def test_the_inspector_serves_metrics_and_badges(self, tmp_path: Path) -> None:
        """GET /metrics is Prometheus text with every rule's gauge; the task list shows a
        badge on the task that fires."""
        from starlette.testclient import TestClient

        from skillstate.ui import UIConfig, create_app

        store = SQLiteStore(tmp_path / "state.db")
        commit(store, "dead", 1, status="failed", errors=DEAD)
        commit(store, "fine", 1, status="completed")
        with TestClient(create_app(UIConfig(store_url=store.url, hosts=()), store=store)) as client:
            response = client.get("/metrics")
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
            samples = parse_exposition(response.text)
            assert samples[(METRIC, "dead_letter")] == 1
            assert samples[(METRIC, "stale")] == 0
            assert samples[("skillstate_tasks", "failed")] == 1
            page = client.get("/").text
            assert page.count('class="badge alert"') == 1
            assert "dead_letter" in page
            api = client.get("/api/tasks").json()
            alerts = {row["task_id"]: row["alerts"] for row in api["rows"]}
            assert [a["rule"] for a in alerts["dead"]] == ["dead_letter"]
            assert alerts["fine"] == []
        store.close()

    def test_metrics_follow_the_read_rules(self, tmp_path: Path) -> None:
        """With named tokens, /metrics is a read like any page: 401 without a token, 200
        with a read token as a bearer (what a Prometheus scrape config sends)."""
        from starlette.testclient import TestClient

        from skillstate.ui import UIConfig, create_app
        from skillstate.ui.access import parse_tokens

        secret = "a-long-random-read-token-for-tests"
        tokens = parse_tokens(f'dash = {{ token = "{secret}", rights = "read" }}\n', "test")
        store = SQLiteStore(tmp_path / "state.db")
        config = UIConfig(store_url=store.url, hosts=(), tokens=tokens)
        with TestClient(create_app(config, store=store)) as client:
            assert client.get("/metrics").status_code == 401
            bearer = {"Authorization": f"Bearer {secret}"}
            response = client.get("/metrics", headers=bearer)
            assert response.status_code == 200
            assert parse_exposition(response.text)[(METRIC, "stale")] == 0
        store.close()

    def test_label_values_are_escaped(self) -> None:
        """A status with quotes or a backslash still parses."""
        text = prometheus_text([], tasks_by_status={'we"ird\\': 2})
        assert parse_exposition(text)[("skillstate_tasks", 'we"ird\\')] == 2

    def test_opentelemetry_gauge(self, tmp_path: Path) -> None:
        """The gauge skillstate.alerts.firing reports the last evaluation per rule."""
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        reader = InMemoryMetricReader()
        gauges = OTelAlerts(MeterProvider(metric_readers=[reader]))
        store = SQLiteStore(tmp_path / "state.db")
        commit(store, "dead", 1, status="failed", errors=DEAD)
        commit(store, "late", 1, status="waiting_user")
        head = next(h for h in store.heads() if h.task_id == "late")
        now = head.updated_at + timedelta(days=2)  # type: ignore[operator]
        gauges.update(evaluate(store, AlertRules(), now=now))
        store.close()
        data = reader.get_metrics_data()
        points = {
            p.attributes["rule"]: p.value
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "skillstate.alerts.firing"
            for p in m.data.data_points
        }
        assert points["dead_letter"] == 1
        assert points["waiting"] == 1
        assert points["stale"] == 0


def test_rules_load_from_pyproject(tmp_path: Path) -> None:
    """[tool.skillstate.alerts] in pyproject.toml is read; durations take units."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.skillstate.alerts]\nstale_after = "2h"\nwaiting_after = 90\n'
    )
    rules = load_rules(tmp_path)
    assert (rules.stale_after, rules.waiting_after) == (7200.0, 90.0)
    assert load_rules(tmp_path, stale_after="30m", max_retries=None).stale_after == 1800.0
