"""Suites as data: built-in directories and generators, user paths, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from skillstate.errors import UsageError
from skillstate.eval.families import get_family
from skillstate.eval.suites import list_suites, load_suite
from skillstate.eval.tasks import group_of
from tests.test_cli import run_cli


def test_the_seeds_suite_holds_the_four_scenarios() -> None:
    specs = load_suite("seeds")
    assert {s.family for s in specs} == {"ticket", "orders", "fix_syntax", "sales"}
    assert all(s.suite == "seeds" for s in specs)
    assert load_suite("seeds", 7) == specs  # fixed tasks: the seed does not change them
    assert set(list_suites()) >= {"seeds", "long"}


def test_each_seed_task_is_in_the_group_its_plan_says(tmp_path: Path) -> None:
    for spec in load_suite("seeds"):
        env = get_family(spec.family).build(spec, tmp_path / spec.id)
        assert spec.group == group_of(len(env.plan_skills)), spec.id
        assert spec.max_steps >= len(env.plan_tools), spec.id
        assert env.effect_tools <= set(env.tools), spec.id


def test_a_generated_suite_gives_new_tasks_per_seed() -> None:
    first, second = load_suite("long", 0), load_suite("long", 1)
    assert [s.id for s in first] == [s.id for s in second]
    assert [s.params for s in first] != [s.params for s in second]
    assert len(load_suite("long", 0, count=3)) == 3


def test_a_user_suite_from_a_path(tmp_path: Path) -> None:
    """A directory of task files, and a file holding a list, both load."""
    spec = load_suite("seeds")[0].model_dump(exclude={"suite"})
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "a.yaml").write_text(yaml.safe_dump({**spec, "id": "a"}), encoding="utf-8")
    (folder / "b.yaml").write_text(yaml.safe_dump({**spec, "id": "b"}), encoding="utf-8")
    assert [s.id for s in load_suite(str(folder))] == ["a", "b"]
    assert {s.suite for s in load_suite(str(folder))} == {"mine"}
    listing = tmp_path / "list.yaml"
    listing.write_text(yaml.safe_dump({"tasks": [{**spec, "id": "c"}]}), encoding="utf-8")
    assert [s.id for s in load_suite(str(listing))] == ["c"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("tasks: [{id: x}]", "family"),
        ("[1, 2]", "expected a YAML mapping"),
        ("tasks: {", "cannot read suite file"),
        ("nothing: here", "needs 'generator:' or 'tasks:'"),
        ("generator: nope\ncount: 1\nsizes: {short: [3, 4]}\ncycle: [short]", "nope"),
    ],
)
def test_a_bad_suite_file_is_a_usage_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError, match=message) as info:
        load_suite(str(path))
    assert "\n" not in str(info.value)


def test_duplicate_task_ids_are_refused(tmp_path: Path) -> None:
    spec = load_suite("seeds")[0].model_dump(exclude={"suite"})
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump({"tasks": [spec, spec]}), encoding="utf-8")
    with pytest.raises(UsageError, match="appears twice"):
        load_suite(str(path))


def test_a_family_can_be_named_by_module_and_attribute() -> None:
    family = get_family("skillstate.eval.families.records:RecordsFamily")
    assert family.name == "records"
    with pytest.raises(UsageError, match="cannot load task family"):
        get_family("skillstate.nope:Nothing")


def test_eval_on_the_seeds_suite_and_its_errors(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        tmp_path,
        "eval",
        "--suite",
        "seeds",
        "--variants",
        "skillstate",
        "--seeds",
        "1",
        "--no-recovery",
        "--out",
        str(out),
    )
    assert code == 0, stdout + err
    data = json.loads((out / "report.json").read_text())
    assert data["suite"] == "seeds"
    assert data["variants"]["skillstate"]["success_rate"]["mean"] == 1.0
    assert len(data["tasks"]) == 4
    for args, message in (
        (("--suite", "nope"), "unknown suite"),
        (("--suite", "seeds", "--groups", "huge"), "unknown length group"),
        (("--suite", "seeds", "--groups", "long"), "has no tasks"),
        (("--suite", "seeds", "--variants", "best"), "unknown variant"),
    ):
        code, stdout, err = run_cli(tmp_path, "eval", *args, "--out", str(tmp_path / "x"))
        assert code == 2, (args, stdout, err)
        assert message in err
        assert "Traceback" not in stdout + err


def test_a_task_limits_the_tools_and_skills_it_may_use(tmp_path: Path) -> None:
    """`tools:`/`skills:` limit what the variants are offered; a plan that needs more is refused."""
    from skillstate.eval.families import build_environment
    from skillstate.eval.variants import VARIANTS, build_agent

    spec = next(s for s in load_suite("seeds") if s.family == "fix_syntax")
    assert "write_file" in spec.tools
    env = build_environment(
        spec.model_copy(update={"tools": ("read_file", "replace_line", "run_tests")}),
        tmp_path / "a",
    )
    agent = build_agent(spec, env, VARIANTS["history"], _no_policy())
    assert "tool_write_file" not in agent.skills
    assert "tool_replace_line" in agent.skills
    for update, message in (
        ({"tools": ("read_file",)}, "its plan needs tool"),
        ({"tools": ("rm_rf",)}, "unknown tool"),
        ({"skills": ("locate_error",)}, "its plan needs skill"),
        ({"skills": ("magic",)}, "unknown skill"),
    ):
        with pytest.raises(UsageError, match=message):
            build_environment(spec.model_copy(update=update), tmp_path / "b")


def _no_policy() -> object:
    from skillstate.engine.actions import Finish
    from skillstate.engine.policy import ScriptedPolicy

    return ScriptedPolicy(lambda view: Finish(summary="-"))
