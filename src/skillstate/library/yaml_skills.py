"""Skills declared in a YAML file, in the shape seed 004 §2.1 shows::

    skills:
      - name: compute_channel_agg
        description: Sum the sales of the prepared dataset by channel, with month-on-month ratios
        version: 2
        run: analytics.skills:compute_channel_agg
        applicable_when:
          - data_ready == true
        input_params:
          metric: {type: string, enum: [total_sales, orders], default: total_sales}
        output_keys: [channel_agg]
        verify:
          - len(channel_agg.rows) >= 2
          - channel_agg.columns contains [total_sales, mom_ratio]
        rollback: analytics.skills:drop_temp_tables
        tags: [analytics, aggregation]

A file holds one skill (a mapping with ``name``), a list of them, or a mapping with a
``skills`` list. Every problem is one :class:`~skillstate.errors.UsageError` line that
names the file and the field. Loading imports the modules ``run`` names: see
:mod:`skillstate.library.refs` for why only operator-chosen files are loaded.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

from skillstate._yaml import load_yaml
from skillstate.errors import UsageError
from skillstate.library.declared import DeclaredSkill, skill_from_spec

__all__ = ["load_yaml_skills"]

MAX_FILE_BYTES = 4 << 20
"""A skill file larger than this is refused (thousands of skills fit in far less)."""


def load_yaml_skills(
    path: str | Path, *, modules: Collection[str] | None = None
) -> list[DeclaredSkill]:
    """The skills declared in the YAML file ``path``.

    ``modules`` (optional) lists the packages ``run``/``rollback`` may name: a
    reference elsewhere is refused before anything is imported.
    """
    file = Path(path)
    text = read_text(file)
    data = load_yaml(text, what=str(file))
    if isinstance(data, Mapping) and "skills" in data:
        extra = sorted(set(map(str, data)) - {"skills"})
        if extra:
            raise UsageError(f"{file}: unknown top-level key(s) {', '.join(extra)}")
        data = data["skills"]
    items = [data] if isinstance(data, Mapping) else data
    if not isinstance(items, list) or not items:
        raise UsageError(f"{file}: expected a skill, a list of skills or `skills: [...]`")
    skills: list[DeclaredSkill] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        label = item.get("name") if isinstance(item, Mapping) else None
        where = f"{file}: {label if isinstance(label, str) and label else f'skills[{i}]'}"
        if not isinstance(item, Mapping):
            raise UsageError(f"{where}: expected a mapping, got {type(item).__name__}")
        skill = skill_from_spec(item, where=where, source=file, modules=modules)
        if skill.name in seen:
            raise UsageError(f"{where}.name: {skill.name!r} is declared twice")
        seen.add(skill.name)
        skills.append(skill)
    return skills


def read_text(file: Path) -> str:
    """The text of a skill file, or one line saying why it cannot be read."""
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UsageError(
                f"{file}: {size:,} bytes, more than a skill file may hold ({MAX_FILE_BYTES:,})"
            )
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{file}: not UTF-8 text ({exc.reason})") from None
