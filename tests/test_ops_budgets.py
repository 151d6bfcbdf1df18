"""Budgets per task and per agent (skillstate.ops.budgets): a warning recorded once at
the threshold, then the stop at the limit, on a model-driven task replayed from a
cassette (the ``replay:`` provider)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from skillstate.engine.agent import Agent
from skillstate.engine.policy import policy_for
from skillstate.engine.runtime import Runtime
from skillstate.errors import UsageError
from skillstate.llm.base import Prices
from skillstate.llm.replay import RecordingProvider, ReplayProvider, ScriptedProvider
from skillstate.ops.budgets import Budget
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore
from tests.test_cli import log_json, run_cli, store_url
from tests.test_model_policies import follow_plan, shop_agent

SHOP = "tests.test_model_policies:shop_agent"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    """A recorded run of the shop task (add, add, add, order, finish: five calls)."""
    path = tmp_path / "shop.json"
    recorder = RecordingProvider(ScriptedProvider(follow_plan, name="planner"), path)
    agent = replace(shop_agent(), policy=policy_for("state", recorder), ref=SHOP)
    recorded = Runtime(agent, MemoryStore()).run("S", create=True)
    assert recorded.stopped == "completed"
    assert recorded.state.usage.calls == 5
    return path


def replayed(cassette: Path, budget: Budget | None) -> Agent:
    policy = policy_for("state", ReplayProvider(cassette))
    return replace(shop_agent(), policy=policy, ref=SHOP, budget=budget)


def kinds(store: SQLiteStore, task_id: str) -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task_id)]


def test_agent_budget_warns_once_then_stops(tmp_path: Path) -> None:
    """Agent(budget=Budget(calls=4, warn_at=0.5)): a budget_warning after 2 calls, the
    stop after 4; the warning is on the card once; a resume does not repeat either.

    The warning is a commit of its own (an event in the log), so later step ids move:
    the cassette is recorded under the same budget, as a replayed production run is."""
    budget = Budget(calls=4, warn_at=0.5)
    cassette = tmp_path / "budgeted.json"
    recorder = RecordingProvider(ScriptedProvider(follow_plan, name="planner"), cassette)
    recording = replace(shop_agent(), policy=policy_for("state", recorder), budget=budget)
    assert Runtime(recording, MemoryStore()).run("S", create=True).stopped == "budget"
    store = SQLiteStore(tmp_path / "state.db")
    agent = replayed(cassette, budget)
    result = Runtime(agent, store).run("S", create=True)
    assert result.stopped == "budget"
    assert result.state.usage.calls == 4
    seen = kinds(store, "S")
    assert seen.count("budget_warning") == 1
    assert seen[-1] == "budget"
    warning = next(e for e in store.events("S") if e.action.get("kind") == "budget_warning")
    assert warning.action["budgets"][0]["used"] == 2  # warned at 2 of 4 calls, before the stop
    assert seen.index("budget_warning") < seen.index("budget")
    [recorded] = result.state.budget_warnings
    assert (recorded.dimension, recorded.used, recorded.limit) == ("calls", 2, 4)
    assert "of the agent's 4" in result.state.errors[-1].message
    again = Runtime(agent, store).run("S")
    assert again.stopped == "budget"
    assert again.state.version == result.state.version
    store.close()


def test_the_runtime_limit_counts_when_tighter(tmp_path: Path, cassette: Path) -> None:
    """--max-calls below the agent's budget wins, with the agent's warn_at."""
    store = SQLiteStore(tmp_path / "state.db")
    agent = replayed(cassette, Budget(calls=50, warn_at=0.5))
    result = Runtime(agent, store, max_calls=2).run("S", create=True)
    assert result.stopped == "budget"
    assert result.state.usage.calls == 2
    [recorded] = result.state.budget_warnings
    assert (recorded.used, recorded.limit) == (1, 2)
    assert "--max-calls" in result.state.errors[-1].message
    store.close()


def test_cost_budget_by_the_price_table(tmp_path: Path, cassette: Path) -> None:
    """A cost budget is money by the runtime's Prices: warned, then stopped."""
    store = SQLiteStore(tmp_path / "state.db")
    first = Runtime(replayed(cassette, None), MemoryStore(), prices=Prices(1.0, 2.0))
    per_call = first.run("S", create=True).state.usage.cost / 5
    agent = replayed(cassette, Budget(cost=per_call * 3.5))  # stops after the 4th call
    result = Runtime(agent, store, prices=Prices(1.0, 2.0)).run("S", create=True)
    assert result.stopped == "budget"
    assert [w.dimension for w in result.state.budget_warnings] == ["cost"]
    assert result.state.usage.cost >= per_call * 3.5
    store.close()


def test_a_task_under_its_budget_is_never_warned(tmp_path: Path, cassette: Path) -> None:
    """Below warn_at nothing is recorded: the run is the recorded one."""
    store = SQLiteStore(tmp_path / "state.db")
    result = Runtime(replayed(cassette, Budget(calls=100)), store).run("S", create=True)
    assert result.stopped == "completed"
    assert result.state.budget_warnings == ()
    assert "budget_warning" not in kinds(store, "S")
    store.close()


@pytest.mark.parametrize(
    "options",
    [{"calls": 0}, {"tokens": -5}, {"cost": True}, {"warn_at": 0.0}, {"warn_at": 1.5}],
)
def test_a_bad_budget_is_a_usage_error(options: dict[str, float]) -> None:
    """A budget that cannot work is refused when it is declared (one line)."""
    with pytest.raises(UsageError) as caught:
        Budget(**options)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_cli_budget_warning_stop_and_alert(
    tmp_path: Path, cassette: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --model replay:... --max-calls 4`: the warning and the stop are in the log
    (exit 4), and `alerts` lists the task's budget alert (exit 10)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    store = store_url(tmp_path)
    code, out, err = run_cli(
        tmp_path, "run", SHOP, "--task-id", "S", "--model", f"replay:{cassette}",
        "--max-calls", "4", "-q", "--store", store,
    )  # fmt: skip
    assert code == 4, out + err
    seen = [e["action"]["kind"] for e in log_json(tmp_path, "S", store)]
    assert seen.count("budget_warning") == 1
    assert seen[-1] == "budget"
    code, out, err = run_cli(tmp_path, "alerts", "--json", "--store", store)
    assert code == 10, err
    [alert] = json.loads(out)
    assert (alert["rule"], alert["task_id"]) == ("budget", "S")
    assert alert["detail"] == "calls budget at 100% (4 of 4)"
