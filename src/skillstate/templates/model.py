"""A template as data: the YAML file ``skillstate distill`` writes and ``run --template`` reads.

A template is what a finished task teaches the next similar one: its goal and
constraints, its initial card fields, and the plan of verified skill calls it took,
with every task-specific value replaced by a named **parameter** (``{{email}}``).
Params of the plan are values, parameters, or references to the card
(``$state.PATH``, ``$from.PATH``: see :mod:`skillstate.templates.hint`).

The file is versioned (``kind`` and ``format``): a reader refuses a kind it does not
know and a format newer than its own, with one line each.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from skillstate._validation import first_error
from skillstate._yaml import load_yaml
from skillstate.errors import UsageError

__all__ = [
    "FORMAT",
    "KIND",
    "PLACEHOLDER",
    "ParamType",
    "Parameter",
    "PlanStep",
    "Source",
    "Template",
    "load_template",
    "save_template",
]

KIND = "skillstate/template"
FORMAT = 1
"""This version's template format; a file of a newer one is refused."""
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
"""A parameter in a text or a param value: ``{{name}}``."""
MAX_FILE = 2_000_000
"""Characters of a template file read at most (a plan of a few thousand steps)."""

ParamType = Literal["string", "integer", "number", "boolean", "array", "object"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Source(_Model):
    """Where a template came from."""

    task: str
    version: int
    """The version of the source task when it was distilled."""
    agent: str | None = None
    """The ``module:attr`` reference of the agent that ran it, if recorded."""
    definition: str | None = None
    """The definition (``sha256:``) the source task ran under: the agent's manifest."""


class Parameter(_Model):
    """A value the source task had and the next task gives anew (``--param NAME=VALUE``)."""

    type: ParamType = "string"
    secret: bool = False
    """The source value was secret: it is not in the template, and the parameter has no
    default; the value given goes only into a ``Sensitive`` field (:attr:`field`)."""
    field: str | None = None
    """The card field the value is written to when the task starts (else it only fills
    ``{{name}}`` in the goal, the constraints and the plan)."""
    origin: str = ""
    """Where the source task had it: ``initial field email``, ``goal``, ``reply 1``."""
    default: Any = None
    """Used when no value is given; only when written in the file (``None`` is a default
    too then). A parameter without one is required."""

    @property
    def required(self) -> bool:
        return "default" not in self.model_fields_set

    @model_validator(mode="after")
    def _secret_has_no_default(self) -> Parameter:
        if self.secret and not self.required:
            raise ValueError("a secret parameter takes no default (give it at run time)")
        return self


class PlanStep(_Model):
    """One verified skill call of the source task, generalised."""

    skill: str
    params: dict[str, Any] = Field(default_factory=dict)
    step: str | None = None
    """The machine step the source task was in once it ran."""


class Template(_Model):
    """A reusable plan distilled from a finished task (see the module docstring)."""

    kind: Literal["skillstate/template"] = "skillstate/template"
    format: int = FORMAT
    name: str = Field(min_length=1, max_length=200)
    source: Source
    goal: str = ""
    constraints: tuple[str, ...] = ()
    fields: dict[str, Any] = Field(default_factory=dict)
    """Initial card fields of the source task (other than goal and constraints)."""
    parameters: dict[str, Parameter] = Field(default_factory=dict)
    skills: dict[str, Any] = Field(default_factory=dict)
    """The manifest entry of each skill the plan uses (version, params digest, step,
    outputs, effects), as the source task's definition had it: what ``run --template``
    compares with the agent's."""
    plan: tuple[PlanStep, ...] = ()
    path: tuple[str, ...] = ()
    """The machine steps the source task went through, in order (repeats collapsed)."""

    @model_validator(mode="after")
    def _placeholders_are_parameters(self) -> Template:
        unknown = sorted(used_names(self) - set(self.parameters))
        if unknown:
            raise ValueError(f"{{{{{unknown[0]}}}}} is used but not a declared parameter")
        for name in self.parameters:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"parameter name {name!r} is not an identifier")
        return self


def used_names(template: Template) -> set[str]:
    """The parameters ``{{name}}`` that the template's texts, fields and plan use."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.update(PLACEHOLDER.findall(value))
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(template.goal)
    walk(list(template.constraints))
    walk(template.fields)
    for step in template.plan:
        walk(step.params)
    return found


def load_template(path: str | os.PathLike[str]) -> Template:
    """The template in the YAML file at ``path``; a one-line :class:`UsageError` if it
    cannot be read, is not a template, or is of a newer format."""
    where = str(path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_FILE + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read template {where!r}: {exc}") from None
    if len(text) > MAX_FILE:
        raise UsageError(f"template {where!r} is over {MAX_FILE:,} characters")
    data = load_yaml(text, what=f"template {where!r}")
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise UsageError(f"{where!r} is not a skillstate template (kind: {KIND} is missing)")
    version = data.get("format")
    if isinstance(version, int) and version > FORMAT:
        raise UsageError(
            f"template {where!r} has format {version}; this skillstate reads up to {FORMAT}"
        )
    try:
        return Template.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"invalid template {where!r}: {first_error(exc, 'template')}") from None


def dump_template(template: Template) -> str:
    """The template as YAML text (keys in the model's order)."""
    data = template.model_dump(mode="json", exclude_defaults=False)
    for name, spec in template.parameters.items():
        shown = data["parameters"][name]
        if spec.required:
            shown.pop("default", None)
        if shown.get("field") is None:
            shown.pop("field", None)
    text: str = yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=100)
    return text


def save_template(template: Template, path: str | os.PathLike[str]) -> None:
    """Write ``template`` to ``path`` atomically (a crash leaves the old file or the new)."""
    target = Path(path)
    text = dump_template(template)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UsageError(f"cannot write template {str(target)!r}: {exc}") from None
