"""Templates from finished tasks: a verified plan, generalised, as a hint for the next task.

* :func:`distill` reads a completed task's event log and keeps the skill calls that
  stayed (verified, committed, not rolled back, not stale), with every value the task
  was given turned into a named parameter and secrets kept out
  (:mod:`~skillstate.templates.distiller`, :mod:`~skillstate.templates.generalise`).
* :class:`Template` is the YAML file (:func:`load_template`, :func:`save_template`).
* :func:`instantiate` fills a template's parameters into the card fields of a new
  task, :func:`check_template` says what differs from the agent
  (:mod:`~skillstate.templates.start`).
* The card keeps the plan as a :class:`TemplateHint` that the view shows to each
  decision (:mod:`~skillstate.templates.hint`); the model still decides.

The CLI is ``skillstate distill`` and ``skillstate run AGENT --template FILE``.

The card imports :mod:`skillstate.templates.hint`, so this package imports its other
modules on first use (PEP 562): importing the hint never imports the engine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from skillstate.templates.hint import HintStep, TemplateHint

if TYPE_CHECKING:
    from skillstate.templates.distiller import distill
    from skillstate.templates.model import (
        Parameter,
        PlanStep,
        Source,
        Template,
        load_template,
        save_template,
    )
    from skillstate.templates.start import (
        check_template,
        instantiate,
        params_from_text,
        parse_params,
    )

__all__ = [
    "HintStep",
    "Parameter",
    "PlanStep",
    "Source",
    "Template",
    "TemplateHint",
    "check_template",
    "distill",
    "instantiate",
    "load_template",
    "params_from_text",
    "parse_params",
    "save_template",
]

_LAZY = {
    "distill": "skillstate.templates.distiller",
    "check_template": "skillstate.templates.start",
    "instantiate": "skillstate.templates.start",
    "params_from_text": "skillstate.templates.start",
    "parse_params": "skillstate.templates.start",
    "Parameter": "skillstate.templates.model",
    "PlanStep": "skillstate.templates.model",
    "Source": "skillstate.templates.model",
    "Template": "skillstate.templates.model",
    "load_template": "skillstate.templates.model",
    "save_template": "skillstate.templates.model",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
