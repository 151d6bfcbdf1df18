"""Skills declared in files: YAML (seed 004 §2.1) and SKILL.md, the rule language, the params.

Every problem in a skill file is one ``UsageError`` line naming the file and the
field; nothing in a file is evaluated as code; ``run`` must name a plain function.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field, ValidationError

from skillstate import AgentState, Outcome
from skillstate.errors import UsageError
from skillstate.library import load_skill_dir, load_skill_md, load_skills, load_yaml_skills
from skillstate.library.params import params_model
from skillstate.library.rules import parse_rules
from tests.contract.skill_impl import SPEC, Ledger

ROOTS = ("state", "before", "outcome", "params")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def with_line(old: str, new: str) -> str:
    assert old in SPEC
    return SPEC.replace(old, new)


# --------------------------------------------------------------------------- YAML


BAD_SPECS = [
    (with_line("verify:\n  - total > 0\n  - {field: total, op: eq, value: 6}\n", "verify: []\n"),
     "add_up.verify: at least one rule is required"),
    (with_line("  - total > 0\n  - {field: total, op: eq, value: 6}\n",
               "  - before.total absent\n"),
     "add_up.verify: no rule checks what the skill writes"),
    (with_line("  - total > 0\n", "  - total >> 0\n"), "add_up.verify[0]: no operator"),
    (with_line("op: eq", "op: gte"), "add_up.verify[1]: unknown op 'gte'"),
    (with_line("  - total > 0\n", "  - total matches '('\n"),
     "add_up.verify[0]: invalid regular expression"),
    (with_line("  - total > 0\n", "  - total in 3\n"), "add_up.verify[0]: in needs a list value"),
    (with_line("  - total > 0\n", "  - total exists 3\n"),
     "add_up.verify[0]: exists takes no value"),
    (with_line("run: tests.contract.skill_impl:add_up", "run: tests.contract.skill_impl:nope"),
     "add_up.run: 'tests.contract.skill_impl' has no attribute 'nope'"),
    (with_line("run: tests.contract.skill_impl:add_up", "run: os:system"),
     "add_up.run: 'os:system' is a builtin_function_or_method, not a function"),
    (with_line("run: tests.contract.skill_impl:add_up", "run: tests.contract.skill_impl:Ledger"),
     "add_up.run: 'tests.contract.skill_impl:Ledger' is a ModelMetaclass, not a function"),
    (with_line("run: tests.contract.skill_impl:add_up", "run: no_such_module_xyz:f"),
     "add_up.run: cannot import 'no_such_module_xyz'"),
    (with_line("rollback: tests.contract.skill_impl:undo", "rollback: [delete state.total]"),
     "add_up.rollback: a failed verify commits none of the skill's writes"),
    (with_line("factor: {type: integer, default: 1, minimum: 1}", "factor: {type: int}"),
     "add_up.input_params.factor.type: expected one of string, integer"),
    (with_line("factor: {type: integer, default: 1, minimum: 1}",
               "factor: {type: integer, default: x}"),
     "add_up.input_params.factor.default: default: Input should be a valid integer"),
    (with_line("factor: {type: integer, default: 1, minimum: 1}",
               "factor: {type: integer, min: 1}"),
     "add_up.input_params.factor: unknown key(s) min"),
    (with_line("factor: {type: integer, default: 1, minimum: 1}", "model_dump: string"),
     "add_up.input_params.model_dump: 'model_dump' is reserved"),
    (with_line("output_keys: [total]", "output_keys: [status]"),
     "runtime-owned outputs: status"),
    (with_line("max_retries: 0", "verfiy: []"), "add_up: unknown key(s) verfiy"),
    (with_line("description: Sum the items of the ledger", "description: ''"),
     "add_up.description: required"),
    (with_line("name: add_up", "name: 'add up!'"), "add up!.name: a skill name is"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD_SPECS)
def test_a_bad_yaml_skill_is_one_line_naming_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    file = write(tmp_path / "skills.yaml", text)
    with pytest.raises(UsageError) as caught:
        load_yaml_skills(file)
    assert str(caught.value).startswith(f"{file}: "), caught.value
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not valid YAML"),
        ("[]", "expected a skill, a list of skills"),
        ("skills: [1]", "skills[0]: expected a mapping, got int"),
        ("skills: []\nother: 1", "unknown top-level key(s) other"),
        ("skills:\n- {name: a}\n- {name: a}", "a.description: required"),
    ],
)
def test_a_bad_yaml_file_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    file = write(tmp_path / "skills.yaml", text)
    with pytest.raises(UsageError, match=re.escape(message)):
        load_yaml_skills(file)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"cannot read .*nope\.yaml"):
        load_yaml_skills(tmp_path / "nope.yaml")


def test_a_list_of_skills_and_duplicates(tmp_path: Path) -> None:
    two = "skills:\n" + "".join(
        "- " + SPEC.replace("name: add_up", f"name: {n}").replace("\n", "\n  ") + "\n"
        for n in ("one", "two")
    )
    skills = load_yaml_skills(write(tmp_path / "two.yaml", two))
    assert [s.name for s in skills] == ["one", "two"]
    assert skills[0].source == tmp_path / "two.yaml"
    twice = two.replace("name: two", "name: one")
    with pytest.raises(UsageError, match=r"one\.name: 'one' is declared twice"):
        load_yaml_skills(write(tmp_path / "twice.yaml", twice))


def test_modules_limits_what_run_may_import(tmp_path: Path) -> None:
    file = write(tmp_path / "skills.yaml", SPEC)
    assert load_yaml_skills(file, modules=["tests.contract"])
    with pytest.raises(UsageError, match="not among the allowed modules"):
        load_yaml_skills(file, modules=["my_company"])


def test_run_must_take_three_arguments(tmp_path: Path) -> None:
    text = with_line("run: tests.contract.skill_impl:add_up", "run: tests.test_library_files:write")
    with pytest.raises(UsageError, match="must take 3 positional arguments"):
        load_yaml_skills(write(tmp_path / "s.yaml", text))


def test_the_seed_spelling_of_output_keys(tmp_path: Path) -> None:
    """``state.total`` in output_keys and rules is the card's ``total``."""
    text = with_line("output_keys: [total]", "output_keys: [state.total]").replace(
        "  - total > 0", "  - state.total > 0"
    )
    [skill] = load_yaml_skills(write(tmp_path / "s.yaml", text))
    assert skill.outputs == ("total",)
    assert skill.verify_rules[0].root == "state"
    assert skill.verify_rules[0].dotted == "total"


# --------------------------------------------------------------------------- rules


def check(rule: Any, **roots: Any) -> bool:
    [parsed] = parse_rules([rule], where="r", roots=ROOTS)
    return parsed.holds(roots)


class Card(AgentState):
    data: dict[str, Any] = Field(default_factory=dict)
    rows: list[dict[str, Any]] = Field(default_factory=list)
    label: str | None = None


@pytest.mark.parametrize(
    ("rule", "holds"),
    [
        ("data.ready == true", True),
        ("data.ready == 1", False),  # a bool is never equal to 1
        ("data.count >= 3", True),
        ("data.count > 3", False),
        ("data.count < 'x'", False),  # not comparable: does not hold
        ("data.count in [1, 2, 3]", True),
        ("data.count not in [1, 2, 3]", False),
        ("data.columns contains [total_sales, mom_ratio]", True),
        ("data.columns contains orders", False),
        ("label matches '^P[0-3]$'", True),
        ("label matches '^P[4-9]$'", False),
        ("len(rows) >= 2", True),
        ("len(rows) == 3", False),
        ("rows.1.channel == web", True),
        ("rows.9.channel exists", False),
        ("data.missing absent", True),
        ("data.missing == null", False),  # a missing value fails every rule but absent
        ("data.empty nonempty", False),
        ("label nonempty", True),
        ({"field": "data.count", "op": ">=", "value": 3}, True),
        ({"field": "data.count", "op": "len_gt", "value": 0}, False),  # an int has no length
        ("outcome.value.rows == 2", True),
        ("outcome.summary contains done", True),
        ("params.limit <= 10", True),
        ("before.label absent", True),
        ("data.count == $params.limit", False),
        ("data.count <= $params.limit", True),
        ({"field": "params.limit", "op": "gt", "ref": "data.count"}, True),
        ("data.count == $data.nope", False),  # a missing reference: does not hold
        ("data.columns contains $label", False),
    ],
)
def test_rules(rule: Any, holds: bool) -> None:
    state = Card(
        task_id="t",
        data={"ready": True, "count": 3, "columns": ["total_sales", "mom_ratio"], "empty": []},
        rows=[{"channel": "shop"}, {"channel": "web"}],
        label="P1",
    )
    outcome = Outcome(summary="all done", value={"rows": 2})
    params = {"limit": 10}
    assert (
        check(rule, state=state, outcome=outcome, params=params, before=Card(task_id="t")) is holds
    )


def test_a_failing_rule_says_what_it_found() -> None:
    [rule] = parse_rules(["len(rows) >= 3"], where="r", roots=ROOTS)
    assert rule.failure({"state": Card(task_id="t", rows=[{}])}) == (
        "`len(rows) >= 3` does not hold (state.rows is [{}])"
    )
    [rule] = parse_rules([{"field": "data.x", "op": "eq", "value": 1}], where="r", roots=ROOTS)
    assert rule.failure({"state": Card(task_id="t")}) == (
        "`data.x == 1` does not hold (state.data.x is missing)"
    )


def test_a_reference_is_named_in_the_failure() -> None:
    [rule] = parse_rules(["refund <= $order.total"], where="r", roots=ROOTS)
    state = Card(task_id="t", data={"x": 1})
    roots = {"state": {"refund": 50, "order": {"total": 42}}}
    assert rule.failure(roots) == (
        "`refund <= $order.total` does not hold (state.refund is 50, state.order.total is 42)"
    )
    assert rule.failure({"state": state}) == (
        "`refund <= $order.total` does not hold (state.order.total is missing)"
    )
    with pytest.raises(UsageError, match="in takes a value written in the rule"):
        parse_rules(["data.x in $data.y"], where="r", roots=ROOTS)
    with pytest.raises(UsageError, match=r"r\[0\]\.ref: a path"):
        parse_rules([{"field": "a", "op": "eq", "value": 1, "ref": "b"}], where="r", roots=ROOTS)


def test_rule_values_are_data_never_code() -> None:
    """A value that looks like code is a string compared as such."""
    [rule] = parse_rules(["label == __import__('os').system('echo hi')"], where="r", roots=ROOTS)
    assert rule.value == "__import__('os').system('echo hi')"
    assert not rule.holds({"state": Card(task_id="t", label="P1")})


# --------------------------------------------------------------------------- params


def test_params_model_types_defaults_and_constraints() -> None:
    model = params_model(
        "compute-agg",
        {
            "metric": "string",
            "group_by": {"type": "string", "enum": ["channel", "region"], "default": "channel"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5, "description": "rows"},
            "ratio": {"type": "number", "default": 1},
            "columns": {"type": "array", "items": "string", "required": False},
            "options": {"type": "object", "default": {}},
        },
        where="w",
    )
    assert model.__name__ == "ComputeAggParams"
    made = model(metric="sales", limit=2)
    assert made.model_dump() == {
        "metric": "sales",
        "group_by": "channel",
        "limit": 2,
        "ratio": 1,
        "columns": None,
        "options": {},
    }
    schema = model.model_json_schema()
    assert set(schema["required"]) == {"metric", "limit"}
    assert schema["properties"]["limit"]["description"] == "rows"
    for bad in ({"metric": "s", "limit": 9}, {"metric": "s", "limit": 1, "group_by": "x"},
                {"metric": "s", "limit": 1, "extra": 1}, {"limit": 1}):  # fmt: skip
        with pytest.raises(ValidationError):
            model(**bad)


# --------------------------------------------------------------------------- SKILL.md


def skill_md(root: Path, name: str, front: str, body: str = "Do the thing.") -> Path:
    return write(root / name / "SKILL.md", f"---\n{front}\n---\n{body}\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no front matter\n", "no front matter"),
        ("---\nname: x\n", "the front matter is not closed"),
        ("---\n- 1\n---\nbody\n", "the front matter is not a mapping"),
        ("---\nname: x\n---\nbody\n", "x.description: required"),
        ("---\ndescription: d\n---\nbody\n", "front matter.name: a skill name is"),
        ("---\nname: x\ndescription: d\n---\n\n", "x: the file has no instructions"),
        ("---\nname: x\ndescription: d\nmetadata: 3\n---\nb\n", "x.metadata: expected a mapping"),
        ("---\nname: x\ndescription: d\nallowed-tools: 3\n---\nb\n", "x.allowed-tools: expected"),
        ("---\nname: x\ndescription: d\nmetadata: {run: 'os:getcwd'}\n---\nb\n",
         "x.metadata.run: 'os:getcwd' is a builtin_function_or_method"),
        ("---\nname: x\ndescription: d\n"
         "metadata: {run: 'tests.contract.skill_impl:add_up'}\n---\nb\n",
         "x.metadata.verify: at least one rule is required"),
    ],
)  # fmt: skip
def test_a_bad_skill_md_is_one_line_naming_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    file = write(tmp_path / "x" / "SKILL.md", text)
    with pytest.raises(UsageError) as caught:
        load_skill_md(file)
    assert str(caught.value).startswith(str(file)), caught.value
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_skill_md_front_matter_per_the_convention(tmp_path: Path) -> None:
    """Known keys are read, unknown ones ignored (as agent-skills clients do)."""
    file = skill_md(
        tmp_path,
        "refund-policy",
        "name: refund-policy\ndescription: How to handle a refund request\nlicense: MIT\n"
        "compatibility: any\nallowed-tools: lookup_order issue_refund\n"
        "metadata: {version: '2', tags: [support, refunds]}\nuser-invocable: true",
        "1. Look the order up.\n2. Refund it.",
    )
    skill = load_skill_md(file)
    assert (skill.name, skill.version, skill.tags) == ("refund-policy", "2", ("support", "refunds"))
    assert skill.uses == ("lookup_order", "issue_refund")  # type: ignore[attr-defined]
    assert "Look the order up" in skill.search_text


def test_a_directory_of_skills_and_load_skills(tmp_path: Path) -> None:
    skill_md(tmp_path / "skills", "b-skill", "name: b-skill\ndescription: B")
    skill_md(tmp_path / "skills" / "nested", "a-skill", "name: a-skill\ndescription: A")
    write(tmp_path / "skills" / "more.yaml", SPEC)
    assert [s.name for s in load_skill_dir(tmp_path / "skills")] == ["b-skill", "a-skill"]
    assert [s.name for s in load_skills(tmp_path / "skills")] == ["add_up", "b-skill", "a-skill"]
    both = load_skills(
        tmp_path / "skills" / "more.yaml", tmp_path / "skills" / "b-skill" / "SKILL.md"
    )
    assert [s.name for s in both] == ["add_up", "b-skill"]
    skill_md(tmp_path / "skills", "c-skill", "name: b-skill\ndescription: again")
    with pytest.raises(UsageError, match="'b-skill' is also the name of"):
        load_skill_dir(tmp_path / "skills")
    with pytest.raises(UsageError, match="not a skill file"):
        load_skills(write(tmp_path / "notes.txt", "x"))
    with pytest.raises(UsageError, match=r"(?i)no such file"):
        load_skills(tmp_path / "absent.yaml")


def test_an_executable_skill_md_is_a_declared_skill(tmp_path: Path) -> None:
    """``metadata.run`` makes it code, declared like a YAML skill; allowed-tools are its tools."""
    front = (
        "name: add-up\ndescription: Sum the ledger\nallowed-tools: [adder]\nmetadata:\n"
        "  run: tests.contract.skill_impl:add_up\n  output_keys: [total]\n"
        "  verify: ['total > 0']\n  applicable_when: ['len(items) >= 1']"
    )
    skill = load_skill_md(skill_md(tmp_path, "add-up", front))
    assert skill.tools == ("adder",)
    assert skill.outputs == ("total",)
    assert not skill.when(Ledger(task_id="t"))
    assert skill.when(Ledger(task_id="t", items=[2]))


# --------------------------------------------------------------------------- the how-to

DOCS = Path(__file__).resolve().parents[1] / "docs" / "howto.md"
HOW_TO = "Grow a skill library: skills in files, the relevant few offered"


def test_the_library_how_to_runs(tmp_path: Path) -> None:
    """docs/howto.md's skill library example: its four files, run as a reader would; it
    prints what its comments say."""
    pytest.importorskip("bm25s", reason="the library extra is not installed")
    text = DOCS.read_text(encoding="utf-8")
    section = text.split(f"## {HOW_TO}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.DOTALL)
    files = [
        "support_skills.py",
        "skills/support.yaml",
        "skills/refund-policy/SKILL.md",
        "agent.py",
    ]
    assert [kind for kind, _ in blocks] == ["python", "yaml", "markdown", "python"]
    for name, (_, body) in zip(files, blocks, strict=True):
        write(tmp_path / name, body)
    env = {k: v for k, v in os.environ.items() if k not in ("SKILLSTATE_STORE", "PYTHONPATH")}
    ran = subprocess.run([sys.executable, "agent.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    expected = [line[2:] for line in blocks[3][1].splitlines() if line.startswith("# ")]
    assert ran.stdout.splitlines() == expected
