"""Skills declared in files (YAML, ``SKILL.md``): ordinary :class:`Skill` objects.

A declared skill is built from a spec in the shape of seed 004 §2.1 (``name``,
``description``, ``applicable_when``, ``input_params``, ``output_keys``, ``verify``,
``rollback``, ``tags``, ``version``) plus ``run: module:function``, the Python
function that does the work, called like any skill's ``run(state, params, ctx)``.
``applicable_when`` and ``verify`` are lists of declarative rules
(:mod:`skillstate.library.rules`); both must hold, rule by rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from skillstate.errors import UsageError
from skillstate.events import Verdict
from skillstate.library.params import params_model
from skillstate.library.refs import import_function
from skillstate.library.rules import Rule, parse_rules
from skillstate.skills.skill import Outcome, Skill, VerifyContext
from skillstate.state.model import PROTECTED_FIELDS, AgentState

__all__ = ["SPEC_KEYS", "DeclaredSkill", "check_name", "skill_from_spec"]

SPEC_KEYS = frozenset(
    {
        "name",
        "description",
        "version",
        "tags",
        "run",
        "input_params",
        "output_keys",
        "applicable_when",
        "verify",
        "rollback",
        "step",
        "tools",
        "reads",
        "max_retries",
        "approval",
    }
)
"""What a skill spec may hold; anything else is refused (a typo must not pass silently)."""

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}\Z")
VERIFY_ROOTS = ("state", "before", "outcome", "params")


class DeclaredSkill(Skill[AgentState, Any]):
    """A skill declared in a file: :attr:`source` says which, :attr:`search_text` adds
    what retrieval indexes besides the name and description (a ``SKILL.md`` body)."""

    source: Path
    search_text: str = ""
    when_rules: tuple[Rule, ...] = ()
    verify_rules: tuple[Rule, ...] = ()


def check_name(name: Any, where: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise UsageError(f"{where}: a skill name is 1-64 letters, digits, _ or - (got {name!r})")
    return name


def skill_from_spec(
    spec: Mapping[str, Any],
    *,
    where: str,
    source: Path,
    modules: Collection[str] | None = None,
    search_text: str = "",
) -> DeclaredSkill:
    """The skill ``spec`` declares (``where``: ``file: skill`` for errors)."""
    unknown = sorted(set(map(str, spec)) - SPEC_KEYS)
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(SPEC_KEYS))})"
        )
    name = check_name(spec.get("name"), f"{where}.name")
    description = spec.get("description")
    if not isinstance(description, str) or not description.strip():
        raise UsageError(f"{where}.description: required, a sentence saying what it does")
    if "run" not in spec:
        raise UsageError(f"{where}.run: required (MODULE:FUNCTION, the skill's Python code)")
    run = import_function(spec["run"], where=f"{where}.run", arity=3, modules=modules)
    rollback = None
    if spec.get("rollback") is not None:
        rollback = _rollback(spec["rollback"], f"{where}.rollback", modules)
    outputs = tuple(_strip_state(o) for o in _strings(spec, "output_keys", where))
    owned = [o for o in outputs if o.split(".")[0] in PROTECTED_FIELDS]
    if owned:
        raise UsageError(
            f"{where}.output_keys: runtime-owned outputs: {', '.join(owned)} "
            "(only the runtime writes those)"
        )
    when_rules = parse_rules(
        spec.get("applicable_when"), where=f"{where}.applicable_when", roots=("state",)
    )
    verify_rules = parse_rules(spec.get("verify"), where=f"{where}.verify", roots=VERIFY_ROOTS)
    _check_verify(verify_rules, outputs, f"{where}.verify")
    version = spec.get("version", "1")
    if isinstance(version, bool) or not isinstance(version, str | int | float):
        raise UsageError(f"{where}.version: expected a string or a number")
    max_retries = spec.get("max_retries")
    if max_retries is not None and (
        isinstance(max_retries, bool) or not isinstance(max_retries, int)
    ):
        raise UsageError(f"{where}.max_retries: expected an integer")
    approval = spec.get("approval", False)
    if not isinstance(approval, bool):
        raise UsageError(f"{where}.approval: expected true or false")
    step = spec.get("step")
    if step is not None and not isinstance(step, str):
        raise UsageError(f"{where}.step: expected a step name")
    try:
        skill = DeclaredSkill(
            run,
            name=name,
            description=" ".join(description.split()),
            version=str(version),
            params=params_model(name, spec.get("input_params"), where=f"{where}.input_params"),
            outputs=outputs,
            tools=_strings(spec, "tools", where),
            reads=tuple(_strip_state(r) for r in _strings(spec, "reads", where)),
            tags=_strings(spec, "tags", where),
            step=step,
            max_retries=max_retries,
            verify=_verifier(verify_rules),
            when=_precondition(when_rules) if when_rules else None,
            rollback=rollback,
            approval=approval,
        )
    except UsageError as exc:  # Skill's own checks (a runtime-owned output...)
        raise UsageError(f"{where}: {exc}") from None
    skill.source = source
    skill.search_text = search_text
    skill.when_rules = when_rules
    skill.verify_rules = verify_rules
    return skill


def _check_verify(rules: Sequence[Rule], outputs: Sequence[str], where: str) -> None:
    """Refuse a verify that could never fail because of what the skill did (seed 004 §5.3)."""
    if not rules:
        raise UsageError(
            f"{where}: at least one rule is required (a skill whose results "
            "nobody checks cannot be trusted with the state)"
        )
    if not any(_reads_result(rule, outputs) for rule in rules):
        raise UsageError(
            f"{where}: no rule checks what the skill writes (output_keys: "
            f"{', '.join(outputs) or 'none'}) or returns (outcome.*), so no "
            "result could make it fail"
        )


def _reads_result(rule: Rule, outputs: Sequence[str]) -> bool:
    paths = [(rule.root, rule.dotted)]
    if rule.ref is not None:
        paths.append((rule.ref[0], ".".join(rule.ref[1])))
    return any(_touches(root, path, outputs) for root, path in paths)


def _touches(root: str, path: str, outputs: Sequence[str]) -> bool:
    """Whether ``root.path`` reads the outcome or one of the skill's outputs."""
    if root == "outcome":
        return True
    if root != "state":
        return False
    return any(
        path == out or path.startswith(out + ".") or out.startswith(path + ".") for out in outputs
    )


def _verifier(rules: tuple[Rule, ...]) -> Callable[..., Verdict]:
    def verify(state: AgentState, outcome: Outcome, ctx: VerifyContext[Any, Any]) -> Verdict:
        roots = {"state": state, "before": ctx.before, "outcome": outcome, "params": ctx.params}
        for rule in rules:
            why = rule.failure(roots)
            if why is not None:
                return Verdict.failed(f"verify rule {why}")
        return Verdict.passed(f"{len(rules)} verify rule(s) hold")

    return verify


def _precondition(rules: tuple[Rule, ...]) -> Callable[[AgentState], bool]:
    def when(state: AgentState) -> bool:
        roots = {"state": state}
        return all(rule.holds(roots) for rule in rules)

    return when


def _rollback(raw: Any, where: str, modules: Collection[str] | None) -> Callable[..., Any]:
    if isinstance(raw, list):  # the seed's `- delete state.x`: writes need no undoing here
        raise UsageError(
            f"{where}: a failed verify commits none of the skill's writes, so "
            "there is nothing in the state to undo; name a function "
            "(MODULE:FUNCTION) that undoes the skill's side effects"
        )
    return import_function(raw, where=where, arity=3, modules=modules)


def _strings(spec: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    raw = spec.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        raise UsageError(f"{where}.{key}: expected a list of strings")
    return tuple(raw)


def _strip_state(path: str) -> str:
    """``state.data.x`` (the seed's spelling) is the card's ``data.x``."""
    return path[len("state.") :] if path.startswith("state.") else path
