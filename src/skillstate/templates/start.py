"""Starting a task from a template: check it fits the agent, fill its parameters.

:func:`instantiate` turns a template and the values of its parameters into the card
fields of a new task (goal, constraints, the template's initial fields and the
``template`` hint), which ``Runtime.start(task_id, **fields)`` takes as they are::

    template = load_template("largest-order.yaml")
    warnings = check_template(template, agent)         # raises TemplateMismatch
    fields = instantiate(template, {"email": "ana@example.com", "month": "2025-09"})
    Runtime(agent, store).start("t2", **fields)

A secret parameter's value goes only into its ``Sensitive`` field (sealed in the
store); the hint and the goal never hold it: the plan shows that field's handle
(``<sensitive:api_token>``), or ``***`` when no field holds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from skillstate.definitions.manifest import short
from skillstate.engine.agent import Agent
from skillstate.errors import TemplateMismatch, UsageError
from skillstate.skills.handles import handle
from skillstate.state.secrets import MASK
from skillstate.templates.hint import LITERAL, MAX_HINT_STEPS, HintStep, TemplateHint
from skillstate.templates.model import PLACEHOLDER, Parameter, Template

__all__ = ["check_template", "instantiate", "params_from_text", "parse_params"]

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
}


def check_template(template: Template, agent: Agent[Any]) -> list[str]:
    """What differs between the agent and the definition the template was distilled
    under, one warning each (empty: the same definition).

    Raises :class:`~skillstate.errors.TemplateMismatch` when the plan names a skill the
    agent does not have: such a hint would point the model at calls it cannot make.
    """
    plan_skills = list(dict.fromkeys(step.skill for step in template.plan))
    missing = [name for name in plan_skills if agent.skills.get(name) is None]
    if missing:
        raise TemplateMismatch(
            f"template {template.name!r} uses skill(s) {', '.join(missing)} that agent "
            f"{agent.name!r} does not have (distilled from task {template.source.task!r} "
            f"of {template.source.agent or 'another agent'}); distill it again from a task "
            "of this agent"
        )
    ours = agent.definition
    if template.source.definition in (None, ours.ref):
        return []
    mine = ours.manifest.get("skills", {})
    changed = [
        text
        for name in plan_skills
        if (text := _skill_change(name, template.skills.get(name), mine.get(name)))
    ]
    what = "; ".join(changed) or (
        "the plan's skills are unchanged (the machine, the state or other skills changed)"
    )
    return [
        f"template {template.name!r} was distilled under definition "
        f"{short(template.source.definition or '')}, agent {agent.name!r} is at "
        f"{ours.short}: {what}"
    ]


def _skill_change(name: str, was: Any, now: Any) -> str | None:
    if not isinstance(was, Mapping) or not isinstance(now, Mapping):
        return None if was is None else f"skill {name!r} changed"
    parts = []
    for key in sorted(set(was) | set(now)):
        if was.get(key) == now.get(key):
            continue
        if key == "version":
            parts.append(f"version {was.get(key)} -> {now.get(key)}")
        else:
            parts.append(f"{key} changed")
    return f"skill {name!r} {', '.join(parts)}" if parts else None


def parse_params(template: Template, items: Sequence[str]) -> dict[str, Any]:
    """``NAME=VALUE`` items as the template's parameters: a ``string`` parameter takes
    VALUE as it is, any other type reads it as YAML (``3``, ``true``, ``[a, b]``)."""
    from skillstate._yaml import load_yaml

    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"expected --param NAME=VALUE, got {item!r}")
        spec = template.parameters.get(name)
        if spec is None or spec.type == "string":
            values[name] = text
        else:
            values[name] = load_yaml(text, what=f"--param {name}") if text.strip() else ""
    return values


def params_from_text(template_text: str, text: str) -> dict[str, str] | None:
    """The parameters' values that make ``template_text`` read ``text`` (a new task's
    goal against the template's), or ``None`` when it cannot: each ``{{name}}`` matches
    the shortest text that fits, a repeated one the same text again."""
    import re

    pattern: list[str] = []
    seen: set[str] = set()
    at = 0
    for match in PLACEHOLDER.finditer(template_text):
        pattern.append(re.escape(template_text[at : match.start()]))
        name = match.group(1)
        pattern.append(f"(?P={name})" if name in seen else f"(?P<{name}>.+?)")
        seen.add(name)
        at = match.end()
    pattern.append(re.escape(template_text[at:]))
    found = re.fullmatch("".join(pattern), text, flags=re.DOTALL)
    return None if found is None else found.groupdict()


def instantiate(
    template: Template, params: Mapping[str, Any], *, agent: Agent[Any] | None = None
) -> dict[str, Any]:
    """The card fields of a new task started from ``template`` with ``params``.

    Every parameter without a default must be given; an unknown one, a missing one or
    a value of the wrong type is a one-line :class:`~skillstate.errors.UsageError`.
    With ``agent``, :func:`check_template` runs first (its warnings are dropped: call it
    yourself to show them).
    """
    if agent is not None:
        check_template(template, agent)
    values = _values(template, params)
    fill = _Filler(template.parameters, values)
    fields: dict[str, Any] = {}
    if template.goal:
        fields["goal"] = fill.text(template.goal)
    if template.constraints:
        fields["constraints"] = tuple(fill.text(c) for c in template.constraints)
    for name, value in template.fields.items():
        fields[name] = fill.value(value, card=True)
    for name, spec in template.parameters.items():
        if spec.field is not None and spec.field not in fields and name in values:
            fields[spec.field] = values[name]
    steps = tuple(
        HintStep(skill=step.skill, params={k: fill.value(v) for k, v in step.params.items()})
        for step in template.plan[:MAX_HINT_STEPS]
    )
    hint = TemplateHint(
        name=template.name, source=template.source.task, steps=steps, total=len(template.plan)
    )
    fields["template"] = hint.model_dump(mode="json")
    return fields


def _values(template: Template, params: Mapping[str, Any]) -> dict[str, Any]:
    declared = template.parameters
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise UsageError(
            f"template {template.name!r} has no parameter(s) {', '.join(unknown)} "
            f"(it has: {', '.join(declared) or 'none'})"
        )
    missing = [n for n, p in declared.items() if p.required and n not in params]
    if missing:
        raise UsageError(
            f"template {template.name!r} needs parameter(s) {', '.join(missing)}: give "
            "--param NAME=VALUE for each"
        )
    values = {n: p.default for n, p in declared.items() if not p.required}
    for name, value in params.items():
        expected = _TYPES[declared[name].type]
        if (isinstance(value, bool) and bool not in expected) or not isinstance(value, expected):
            raise UsageError(
                f"parameter {name!r} of template {template.name!r} is a "
                f"{declared[name].type}, not {type(value).__name__}"
            )
        values[name] = value
    return values


class _Filler:
    """Fills ``{{name}}`` with the parameters' values (secrets never leave their field)."""

    def __init__(self, parameters: Mapping[str, Parameter], values: Mapping[str, Any]) -> None:
        self.parameters = parameters
        self.values = values

    def _shown(self, name: str, *, card: bool) -> Any:
        spec = self.parameters[name]
        if spec.secret and not card:
            return handle(spec.field) if spec.field is not None else MASK
        return self.values.get(name)

    def text(self, text: str) -> str:
        def one(match: Any) -> str:
            value = self._shown(match.group(1), card=False)
            return value if isinstance(value, str) else _scalar(value)

        return PLACEHOLDER.sub(one, text)

    def value(self, value: Any, *, card: bool = False) -> Any:
        """A param or field value filled in: a whole ``{{name}}`` keeps the value's type."""
        if isinstance(value, str):
            whole = PLACEHOLDER.fullmatch(value.strip())
            if whole is not None:
                return self._shown(whole.group(1), card=card)
            return self.text(value)
        if isinstance(value, Mapping):
            if set(value) == {LITERAL}:
                return dict(value)
            return {k: self.value(v, card=card) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v, card=card) for v in value]
        return value


def _scalar(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=str)
