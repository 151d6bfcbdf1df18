"""One skill, three ways to declare it: Python, YAML and an executable ``SKILL.md``.

``test_skill_contract.py`` runs the same contract over each. They share ``add_up``
(the work) and ``undo`` (the rollback); the card's ``mode`` makes the run misbehave
on purpose (a wrong result, a write outside the outputs, an exception), so the
contract can check what the runtime does about each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from skillstate import AgentState, Outcome, Skill, SkillContext, Verdict, VerifyContext

UNDONE: list[str] = []
"""Task ids whose failed attempt was rolled back (a side effect outside the card)."""


class Ledger(AgentState):
    items: list[int] = Field(default_factory=list)
    total: int | None = None
    mode: str = "good"
    """good | wrong | undeclared | raise: how ``add_up`` behaves."""


class Factor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    factor: int = Field(default=1, ge=1)


def add_up(state: Any, params: Any, ctx: SkillContext) -> Outcome:
    """Sum the items times ``factor``; the card's ``mode`` makes it misbehave."""
    if state.mode == "raise":
        raise RuntimeError("the ledger backend is down")
    total = sum(state.items) * params.factor
    if state.mode == "wrong":
        total = -total
    writes: dict[str, Any] = {"total": total}
    if state.mode == "undeclared":
        writes["mode"] = "good"  # not an output of the skill
    return Outcome(writes=writes, summary=f"total={total}", value=total)


def undo(state: Any, outcome: Outcome | None, ctx: SkillContext) -> None:
    UNDONE.append(state.task_id)


def python_skill(tmp: Path) -> Skill[Any, Any]:
    def verify(state: Ledger, outcome: Outcome, ctx: VerifyContext[Ledger, Factor]) -> Verdict:
        expected = sum(state.items) * ctx.params.factor
        return Verdict(ok=state.total == expected and expected > 0, reason=f"expected {expected}")

    return Skill(
        add_up,
        name="add_up",
        description="Sum the items of the ledger",
        version="3",
        params=Factor,
        outputs=["total"],
        max_retries=0,
        when=lambda state: len(state.items) >= 1,
        verify=verify,
        rollback=undo,
    )


SPEC = """\
name: add_up
description: Sum the items of the ledger
version: 3
run: tests.contract.skill_impl:add_up
rollback: tests.contract.skill_impl:undo
max_retries: 0
applicable_when:
  - len(items) >= 1
input_params:
  factor: {type: integer, default: 1, minimum: 1}
output_keys: [total]
verify:
  - total > 0
  - {field: total, op: eq, value: 6}
"""


def yaml_skill(tmp: Path) -> Skill[Any, Any]:
    from skillstate.library import load_yaml_skills

    path = tmp / "skills.yaml"
    path.write_text(SPEC, encoding="utf-8")  # a file may hold one skill
    [skill] = load_yaml_skills(path)
    return skill


def skill_md_skill(tmp: Path) -> Skill[Any, Any]:
    from skillstate.library import load_skill_md

    name, description, *rest = SPEC.splitlines()
    front = "\n".join([name, description, "metadata:", *[f"  {line}" for line in rest]])
    path = tmp / "add_up" / "SKILL.md"
    path.parent.mkdir()
    path.write_text(f"---\n{front}\n---\nAdds up a ledger.\n", encoding="utf-8")
    return load_skill_md(path)
