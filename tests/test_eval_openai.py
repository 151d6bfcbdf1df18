"""`skillstate eval --model openai:NAME --base-url URL`, end to end, against a local server.

A stdlib HTTP server on 127.0.0.1 plays an OpenAI-compatible server (vLLM,
llama.cpp's ``llama-server``, Ollama): it answers ``/v1/chat/completions`` with
the decisions the oracle would take, read from the task's reference plans, and
with its own usage numbers. The command runs in a fresh interpreter, so every
decision crosses the real SDK, HTTP and the server: nothing is patched.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skillstate.eval.families import build_environment
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import TaskSpec
from tests.test_cli import run_cli

pytest.importorskip("openai", reason="the openai extra is not installed")

MODEL = "acme/tiny-instruct"
PROMPT_TOKENS = 100
COMPLETION_TOKENS = 7
SUMMARY = "(summary from the fake server)"


@dataclass
class PlanServer:
    """Answers each decision with the next action of the reference plan its schema asks for.

    A request whose schema offers raw tools (``tool_...``) gets the tools plan, any
    other the skills plan; each plan is replayed in a cycle, so a run and each of
    its recovery runs (which replay the plan from the start) all get the oracle's
    answers. Requests without a schema (a summary) get a fixed text.
    """

    plans: dict[str, list[str]]
    port: int = 0
    received: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    served: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def reply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.paths.append(path)
            self.received.append(body)
            fmt = body.get("response_format")
            if fmt is None:
                text = SUMMARY
            else:
                kind = "tools" if '"tool_' in json.dumps(fmt) else "skills"
                n = self.served.get(kind, 0)
                self.served[kind] = n + 1
                plan = self.plans[kind]
                text = plan[n % len(plan)]
        return {
            "id": f"chatcmpl-{len(self.received)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": COMPLETION_TOKENS,
                "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
            },
        }


def _handler(server: PlanServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            data = json.dumps(server.reply(self.path, body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            pass

    return Handler


@pytest.fixture(scope="module")
def spec() -> TaskSpec:
    """The shortest task of the long suite (seed 0): the one `--tasks 1 --groups short` picks."""
    return next(s for s in load_suite("long", 0) if s.group == "short")


@pytest.fixture
def server(spec: TaskSpec) -> Iterator[PlanServer]:
    with tempfile.TemporaryDirectory() as tmp:
        env = build_environment(spec, Path(tmp))
        plans = {
            "tools": [a.model_dump_json() for a in env.plan_tools],
            "skills": [a.model_dump_json() for a in env.plan_skills],
        }
    fake = PlanServer(plans)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _eval(tmp_path: Path, server: PlanServer, *args: str) -> dict[str, Any]:
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        tmp_path, "eval", "--suite", "long", "--groups", "short", "--tasks", "1",
        "--seeds", "1", "--variants", "state,skillstate", "--model", f"openai:{MODEL}",
        "--base-url", server.base_url, "--out", str(out), *args,
    )  # fmt: skip
    assert code == 0, stdout + err
    assert (out / "report.md").read_text(encoding="utf-8").strip()
    data: dict[str, Any] = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return data


def _assert_calls(server: PlanServer, expected: int) -> None:
    assert len(server.received) == expected
    assert set(server.paths) == {"/v1/chat/completions"}
    assert {body["model"] for body in server.received} == {MODEL}
    assert all(body.get("temperature") == 0 for body in server.received)


class TestOpenAICompatibleServer:
    def test_end_to_end_runs_every_decision_through_the_server(
        self, tmp_path: Path, server: PlanServer
    ) -> None:
        """Each decision is one call with the model's name; the server's usage is reported."""
        data = _eval(tmp_path, server, "--no-recovery")
        plans = len(server.plans["tools"]) + len(server.plans["skills"])
        _assert_calls(server, plans)
        assert data["model"] == f"openai:{MODEL}"
        tasks = {t["variant"]: t for t in data["tasks"]}
        assert set(tasks) == {"state", "skillstate"}
        for name, kind in (("state", "tools"), ("skillstate", "skills")):
            run = tasks[name]
            assert run["success"], run["failure"]
            assert run["model_calls"] == len(server.plans[kind])
            # The server's own counts, not offline estimates.
            assert set(run["prompt_tokens"]) == {PROMPT_TOKENS}
            assert run["completion_tokens"] == COMPLETION_TOKENS * len(server.plans[kind])

    def test_recovery_runs_use_the_server_too(self, tmp_path: Path, server: PlanServer) -> None:
        """The interrupted and resumed runs (25/50/75%) also decide through the server.

        (No killed run here: the fake server replays its plan by call count, and a kill
        that lands inside a call would shift it; killed runs are in test_eval_recovery.)"""
        data = _eval(tmp_path, server, "--variants", "skillstate", "--kills", "0")
        _assert_calls(server, 4 * len(server.plans["skills"]))
        (run,) = data["tasks"]
        assert run["success"], run["failure"]
        assert [r["success"] for r in run["recovery"]] == [True, True, True]

    def test_forced_mode_asks_the_server_at_every_step(
        self, tmp_path: Path, server: PlanServer
    ) -> None:
        """`--mode forced`: one call per reference decision; replaying the plan scores 1.0."""
        data = _eval(tmp_path, server, "--mode", "forced")
        _assert_calls(server, len(server.plans["tools"]) + len(server.plans["skills"]))
        assert data["mode"] == "forced"
        assert data["model"] == f"openai:{MODEL}"
        assert set(data["variants"]) == {"state", "skillstate"}
        for item in data["variants"].values():
            assert item["overall"]["exact"]["rate"] == 1.0
