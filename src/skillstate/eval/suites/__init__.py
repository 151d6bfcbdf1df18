"""Task suites as data: named, seeded lists of :class:`~skillstate.eval.tasks.TaskSpec`.

A suite is one of

* a **directory** of task files (``seeds/``): one YAML document per task, each a
  :class:`TaskSpec` without its ``suite`` field (the directory name is the suite);
* a **generator file** (``long.yaml``): a ``generator:`` family name and its
  parameters, expanded for a seed into fresh tasks.

The built-in suites live beside this module; ``load_suite`` also takes a path to
a directory or file of the same shape, so users run the experiment on their own
tasks (their families named as ``module:attr``). A suite is a pure function of
its seed: two runs of the experiment, or a rerun of one variant, see exactly the
same tasks.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skillstate.errors import UsageError
from skillstate.eval.tasks import Group, TaskSpec

__all__ = ["SUITES_DIR", "GeneratorConfig", "list_suites", "load_suite", "long_suite"]

_M = TypeVar("_M", bound=BaseModel)

SUITES_DIR = Path(__file__).parent
"""Where the built-in suites live."""


class GeneratorConfig(BaseModel):
    """The body of a generator suite file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    generator: str
    count: int = Field(ge=1)
    sizes: dict[Group, tuple[int, int]]
    cycle: tuple[Group, ...] = Field(min_length=1)


def list_suites() -> list[str]:
    """The names of the built-in suites."""
    names = {p.stem for p in SUITES_DIR.glob("*.yaml")}
    names |= {p.name for p in SUITES_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml"))}
    return sorted(names)


def load_suite(name: str, seed: int = 0, *, count: int | None = None) -> list[TaskSpec]:
    """The tasks of suite ``name`` (built-in name or path) for ``seed``.

    ``count`` overrides a generator's task count. An unknown name, an unreadable
    file or an invalid task is a :class:`UsageError` that names the file.
    """
    path = _locate(name)
    if path.is_dir():
        files = sorted(path.glob("*.yaml"))
        if not files:
            raise UsageError(f"suite directory {path} has no *.yaml task files")
        specs = [_task_from_file(f, suite=path.name) for f in files]
        _unique(specs, path)
        return specs
    data = _read_yaml(path)
    if "generator" in data:
        config = _parse(GeneratorConfig, data, path)
        if count is not None:
            config = config.model_copy(update={"count": count})
        return _generate(config, seed=seed, suite=path.stem)
    if "tasks" in data:  # one file holding a list of tasks
        tasks = data["tasks"]
        if not isinstance(tasks, list):
            raise UsageError(f"{path}: 'tasks' must be a list")
        specs = [_task(t, path, suite=path.stem) for t in tasks]
        _unique(specs, path)
        return specs
    raise UsageError(f"{path}: a suite file needs 'generator:' or 'tasks:'")


def long_suite(seed: int = 0, count: int | None = None) -> list[TaskSpec]:
    """The built-in ``long`` suite for ``seed`` (``count`` tasks, default 12)."""
    return load_suite("long", seed, count=count)


def _locate(name: str) -> Path:
    for candidate in (SUITES_DIR / name, SUITES_DIR / f"{name}.yaml"):
        if "/" not in name and candidate.exists():
            return candidate
    path = Path(name)
    if path.exists() and (path.is_dir() or path.suffix in {".yaml", ".yml"}):
        return path
    raise UsageError(
        f"unknown suite {name!r}; built-in: {', '.join(list_suites())} "
        "(or give a path to a suite directory or YAML file)"
    )


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read suite file {path}: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a YAML mapping")
    return data


def _parse(model: type[_M], data: Mapping[str, Any], path: Path) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise UsageError(f"{path}: {where}: {first['msg']}") from None


def _task(data: Any, path: Path, *, suite: str) -> TaskSpec:
    if not isinstance(data, dict):
        raise UsageError(f"{path}: each task must be a mapping")
    return _parse(TaskSpec, {"suite": suite, **data}, path)


def _task_from_file(path: Path, *, suite: str) -> TaskSpec:
    return _task(_read_yaml(path), path, suite=suite)


def _unique(specs: list[TaskSpec], path: Path) -> None:
    seen: set[str] = set()
    for spec in specs:
        if spec.id in seen:
            raise UsageError(f"{path}: task id {spec.id!r} appears twice")
        seen.add(spec.id)


def _generate(config: GeneratorConfig, *, seed: int, suite: str) -> list[TaskSpec]:
    from skillstate.eval.families import get_family

    family = get_family(config.generator)
    make = getattr(family, "make_spec", None)
    if make is None:
        raise UsageError(f"family {config.generator!r} cannot generate tasks (no make_spec)")
    rng = random.Random(f"{suite}:{seed}")
    specs: list[TaskSpec] = []
    for k in range(config.count):
        group = config.cycle[k % len(config.cycle)]
        if group not in config.sizes:
            raise UsageError(f"suite {suite!r}: no sizes for group {group!r}")
        low, high = config.sizes[group]
        n = rng.randint(low, high)
        spec: TaskSpec = make(
            f"{config.generator}-{k:03d}", seed=rng.randrange(2**31), n=n, suite=suite
        )
        specs.append(spec)
    return specs
