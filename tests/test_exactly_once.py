"""Exactly-once on every path: no re-run under a new key, and a demo verify that is strict.

Reproduced before:
* ``demo ledger --steps 3``, ``rollback --to 4``, ``resume --max-steps 12`` appended
  entry 3 twelve times: each failed verify led to a new decision with a new key.
* The ledger's verify accepted any n >= 1, so schema-valid model replies drove
  ``appended`` past ``target`` (13 of 5), skipped entries and repeated numbers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from skillstate import RunResult, Runtime
from skillstate.effects import files
from skillstate.engine.policy import StatePolicy
from skillstate.examples import ledger
from skillstate.llm.replay import ScriptedProvider
from skillstate.store.memory import MemoryStore
from tests.test_cli import head_state, run_cli, store_url


def live(path: Path) -> list[str]:
    return [line for _, line in files.entries(path)]


@pytest.mark.parametrize("choice", ["--keep-effects", "--compensate"])
def test_the_reported_repro_appends_entry_3_once(tmp_path: Path, choice: str) -> None:
    """steps 3, rollback --to 4, resume --max-steps 12: entry 3 is in the ledger once."""
    url = store_url(tmp_path)
    path = tmp_path / "ledger.txt"
    code, _, err = run_cli(
        tmp_path, "demo", "ledger", "--task-id", "L", "--steps", "3", "--ledger", str(path),
        "--store", url, "-q",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run_cli(tmp_path, "rollback", "L", "--to", "4", "--store", url)
    assert code == 2  # refused: the effects after version 4 are named
    code, _, err = run_cli(tmp_path, "rollback", "L", "--to", "4", choice, "--store", url)
    assert code == 0, err
    code, _, err = run_cli(tmp_path, "resume", "L", "--max-steps", "12", "--store", url, "-q")
    assert code == 0, err
    assert live(path) == ["entry 1", "entry 2", "entry 3"]
    assert head_state(url, "L")["status"] == "completed"


def model_ledger(replies: list[str], tmp_path: Path) -> RunResult:
    """The ledger agent with a model that says ``replies`` in turn (then finishes)."""
    queue = iter(replies)
    provider = ScriptedProvider(
        lambda m, s: next(queue, '{"kind": "finish", "summary": "done", "reason": "r"}')
    )
    agent = replace(ledger.agent, policy=StatePolicy(provider, max_repairs=0))
    runtime = Runtime(agent, MemoryStore(), max_steps=12)
    runtime.start("t", target=5, ledger=str(tmp_path / "ledger.txt"))
    return runtime.run("t")


def call(n: int) -> str:
    return (
        f'{{"kind": "call_skill", "skill": "append_entry", "params": {{"n": {n}}}, "reason": "r"}}'
    )


@pytest.mark.parametrize(
    ("replies", "refusal"),
    [
        ([call(1), call(13)], "entry 13 is past the target of 5"),
        ([call(1), call(3)], "entry 2 is missing: entries must not be skipped"),
        ([call(1), call(2), call(2)], "entry 2 is in the ledger more than once"),
    ],
    ids=["past-target", "skipped", "repeated"],
)
def test_the_ledger_verify_refuses_what_a_model_gets_wrong(
    tmp_path: Path, replies: list[str], refusal: str
) -> None:
    """Schema-valid but wrong entries never reach the card, and their lines are retracted."""
    state = model_ledger(replies, tmp_path).state
    assert isinstance(state, ledger.LedgerState)
    messages = [e.message for e in state.errors]
    assert any(refusal in m for m in messages), messages
    assert state.appended <= 2
    expected = [f"entry {n}" for n in range(1, state.appended + 1)]
    assert live(tmp_path / "ledger.txt") == expected  # the wrong line was retracted
