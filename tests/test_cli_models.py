"""Model options end to end: --model (a replayed cassette), --policy, budgets, tokens, bench."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from skillstate.engine.policy import policy_for
from skillstate.engine.runtime import Runtime
from skillstate.llm.replay import RecordingProvider, ScriptedProvider
from skillstate.store import open_store
from skillstate.store.memory import MemoryStore
from tests.test_cli import head_state, log_json, run_cli, store_url
from tests.test_model_policies import follow_plan, shop_agent

SHOP = "tests.test_model_policies:shop_agent"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the CLI subprocesses import the test agents."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def test_model_budget_stops_and_resumes(tmp_path: Path, cli_env: None) -> None:
    """--max-tokens stops a model-driven run with exit 4 and the reason; resume with more
    finishes it."""
    cassette = tmp_path / "shop.json"
    recorder = RecordingProvider(ScriptedProvider(follow_plan, name="planner"), cassette)
    agent = replace(shop_agent(), policy=policy_for("state", recorder), ref=SHOP)
    assert Runtime(agent, MemoryStore()).run("S", create=True).stopped == "completed"
    store = store_url(tmp_path)
    model = f"replay:{cassette}"
    code, out, err = run_cli(
        tmp_path, "run", SHOP, "--task-id", "S", "--model", model, "--max-tokens", "400", "-q",
        "--store", store,
    )  # fmt: skip
    assert code == 4, out + err
    assert "prompt token budget reached" in out
    state = head_state(store, "S")
    assert state["errors"][-1]["kind"] == "budget"
    assert state["usage"]["prompt"] >= 400
    # The stop is resumable: the same model with a higher budget finishes the task (a
    # cassette replays from its start, so the live provider goes on here).
    live = replace(shop_agent(), policy=policy_for("state", ScriptedProvider(follow_plan)))
    db = open_store(store)
    try:
        result = Runtime(live, db, max_tokens=100_000).run("S")
    finally:
        db.close()
    assert result.stopped == "completed", result.state.errors
    assert result.state.version > state["version"]


def test_a_scripted_demo_spends_no_budget(tmp_path: Path) -> None:
    """No model is called by a scripted policy: --max-tokens never stops it."""
    store = store_url(tmp_path)
    code, out, err = run_cli(
        tmp_path, "demo", "ticket", "--task-id", "T", "--max-tokens", "1", "-q", "--store", store
    )
    assert code == 0, out + err
    assert head_state(store, "T")["usage"]["prompt"] == 0


def test_tokens_command(tmp_path: Path) -> None:
    """`tokens` lists every decision with its counts and the totals; --json too."""
    store = store_url(tmp_path)
    code, _, err = run_cli(tmp_path, "demo", "ticket", "--task-id", "T", "-q", "--store", store)
    assert code == 0, err
    code, out, err = run_cli(
        tmp_path, "tokens", "T", "--price-in", "2.5", "--price-out", "10", "--store", store
    )
    assert code == 0, err
    assert "total" in out
    assert "cost" in out
    code, out, err = run_cli(tmp_path, "tokens", "T", "--json", "--store", store)
    rows = json.loads(out)
    decisions = [e for e in log_json(tmp_path, "T", store) if e["actor"] == "policy"]
    assert len(rows) == len(decisions)
    # A scripted demo calls no model: the report estimates each decision from its view.
    assert all(r["estimated"] and r["calls"] == 0 and r["prompt"] > 0 for r in rows)
    assert head_state(store, "T")["usage"]["prompt"] == 0


def test_bench_tokens_json(tmp_path: Path) -> None:
    """`bench tokens --json` prints both series, one prompt size per step."""
    code, out, err = run_cli(tmp_path, "bench", "tokens", "--steps", "12", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["state"]) == len(data["history"]) == 12
    assert data["history"][-1] > 3 * data["state"][-1]


@pytest.mark.parametrize(
    "args",
    [
        ("--policy", "history"),
        ("--base-url", "http://127.0.0.1:1/v1"),
        ("--max-cost", "1"),
        ("--model", "gpt-4"),
        ("--model", "replay:/nonexistent/cassette.json"),
        ("--model", "local:/nonexistent/model.gguf"),
    ],
)
def test_bad_model_options(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Model options that cannot work: exit 2 with one line, nothing started."""
    store = store_url(tmp_path)
    code, out, err = run_cli(tmp_path, "demo", "ticket", "--task-id", "T", *args, "--store", store)
    assert code == 2, (args, out, err)
    assert err.startswith("error: ")
    assert err.count("\n") == 1


def test_run_with_a_replayed_model(tmp_path: Path, cli_env: None) -> None:
    """--model replay:CASSETTE drives a real task through the CLI, with usage in the log."""
    cassette = tmp_path / "shop.json"
    recorder = RecordingProvider(ScriptedProvider(follow_plan, name="planner"), cassette)
    agent = replace(shop_agent(), policy=policy_for("state", recorder), ref=SHOP)
    recorded = Runtime(agent, MemoryStore()).run("S", create=True)
    assert recorded.stopped == "completed"

    store = store_url(tmp_path)
    code, out, err = run_cli(
        tmp_path, "run", SHOP, "--task-id", "S", "--model", f"replay:{cassette}", "-q",
        "--store", store,
    )  # fmt: skip
    assert code == 0, out + err
    state = head_state(store, "S")
    assert state["total"] == 30
    assert state["ordered"] is True
    assert state["usage"]["calls"] == recorded.state.usage.calls
    policy_events = [e for e in log_json(tmp_path, "S", store) if e["actor"] == "policy"]
    assert all(e["usage"]["calls"] == 1 for e in policy_events)


def test_run_with_the_hybrid_policy(tmp_path: Path, cli_env: None) -> None:
    """--policy hybrid:N: the last N raw messages and the state, through the CLI."""
    cassette = tmp_path / "shop.json"
    recorder = RecordingProvider(ScriptedProvider(follow_plan, name="planner"), cassette)
    agent = replace(shop_agent(), policy=policy_for("hybrid:2", recorder), ref=SHOP)
    assert Runtime(agent, MemoryStore()).run("S", create=True).stopped == "completed"
    store = store_url(tmp_path)
    code, out, err = run_cli(
        tmp_path, "run", SHOP, "--task-id", "S", "--model", f"replay:{cassette}",
        "--policy", "hybrid:2", "-q", "--store", store,
    )  # fmt: skip
    assert code == 0, out + err
    state = head_state(store, "S")
    assert (state["total"], state["ordered"]) == (30, True)
    assert state["driver"]["policy"] == "hybrid:2"
    code, out, err = run_cli(
        tmp_path, "run", SHOP, "--task-id", "X", "--model", f"replay:{cassette}",
        "--policy", "hybrid:0", "--store", store,
    )  # fmt: skip
    assert code == 2, out + err
    assert "hybrid:N" in err


def test_resume_names_the_recorded_model_and_continues_with_the_one_given(
    tmp_path: Path, cli_env: None
) -> None:
    """The card's driver is a record: resume without --model is refused with the command to
    run; with --model (the operator's choice) it goes on with that model."""
    cassette = tmp_path / "shop.json"
    recorder = RecordingProvider(ScriptedProvider(follow_plan, name="planner"), cassette)
    agent = replace(shop_agent(), policy=policy_for("state", recorder), ref=SHOP)
    Runtime(agent, MemoryStore()).run("S", create=True)

    store = store_url(tmp_path)
    model = f"replay:{cassette}"
    code, out, err = run_cli(
        tmp_path, "run", SHOP, "--task-id", "S", "--model", model, "--max-steps", "2", "-q",
        "--store", store,
    )  # fmt: skip
    assert code == 4, out + err
    assert head_state(store, "S")["driver"]["model"] == model
    code, out, err = run_cli(tmp_path, "resume", "S", "-q", "--agent", SHOP, "--store", store)
    assert code == 2, out + err
    assert f"pass --model {model}" in err
    # With the model named, it is asked again. A replay starts its cassette from the
    # first entry in a new process, so the third decision's request does not match
    # entry 1 and the replay says so: proof it was asked (the agent's own scripted
    # policy would simply have finished).
    code, out, err = run_cli(
        tmp_path, "resume", "S", "-q", "--agent", SHOP, "--model", model, "--store", store
    )
    assert code == 1, out + err
    assert "shop.json" in err
    assert err.count("\n") == 1
