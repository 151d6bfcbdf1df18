"""A skill library at scale: skills declared in files, and retrieval among hundreds.

* :func:`load_yaml_skills`: skills declared in YAML (seed 004 §2.1) bound to Python
  functions, with declarative ``applicable_when`` and ``verify`` rules
  (:mod:`~skillstate.library.rules`).
* :func:`load_skill_dir` / :func:`load_skill_md`: a directory of ``SKILL.md`` files
  (the agent-skills convention) as model-facing skills that load their instructions
  into the card, or executable ones (``metadata: {run: module:function}``).
* :func:`load_skills`: any mix of the two, by path.
* ``Agent(retriever=..., top_k=8)``: each decision is offered the ``top_k`` most
  relevant applicable skills, ranked by their success rate in the store
  (:mod:`~skillstate.library.select`), with :class:`BM25Retriever` (``library``
  extra) or :class:`EmbeddingRetriever` (``embeddings`` extra), or any
  :class:`Retriever`.

Every loaded skill is an ordinary :class:`~skillstate.skills.skill.Skill`: put them
in a :class:`~skillstate.skills.registry.SkillRegistry` with Python ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillstate.errors import UsageError
from skillstate.library.declared import DeclaredSkill
from skillstate.library.markdown import InstructionsSkill, load_skill_dir, load_skill_md
from skillstate.library.retrieval import Retriever, SkillDocument, decision_query, skill_document
from skillstate.library.stats import SkillRecord, SuccessRates, success_rates
from skillstate.library.yaml_skills import load_yaml_skills

if TYPE_CHECKING:
    from skillstate.library.bm25 import BM25Retriever
    from skillstate.library.embeddings import EmbeddingRetriever

__all__ = [
    "BM25Retriever",
    "DeclaredSkill",
    "EmbeddingRetriever",
    "InstructionsSkill",
    "Retriever",
    "SkillDocument",
    "SkillRecord",
    "SuccessRates",
    "decision_query",
    "load_skill_dir",
    "load_skill_md",
    "load_skills",
    "load_yaml_skills",
    "skill_document",
    "success_rates",
]


def load_skills(*paths: str | Path, modules: Collection[str] | None = None) -> list[DeclaredSkill]:
    """The skills of each path, in order: a ``.yaml``/``.yml`` file, a ``SKILL.md``, or a
    directory (its ``*.yaml``/``*.yml`` files, then every ``SKILL.md`` under it)."""
    skills: list[DeclaredSkill] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for file in sorted([*path.glob("*.yaml"), *path.glob("*.yml")]):
                skills += load_yaml_skills(file, modules=modules)
            if any(path.rglob("SKILL.md")):
                skills += load_skill_dir(path, modules=modules)
        elif path.name == "SKILL.md":
            skills.append(load_skill_md(path, modules=modules))
        elif path.suffix in (".yaml", ".yml"):
            skills += load_yaml_skills(path, modules=modules)
        elif not path.exists():
            raise UsageError(f"cannot read {path}: no such file or directory")
        else:
            raise UsageError(f"{path}: not a skill file (.yaml, .yml, SKILL.md) or a directory")
    twice = sorted(n for n, times in Counter(s.name for s in skills).items() if times > 1)
    if twice:
        raise UsageError(f"skills declared twice: {', '.join(twice)}")
    return skills


def __getattr__(name: str) -> Any:
    # The retrievers' modules import their extras only when used; importing them
    # here is still cheap, but keeps `import skillstate.library` free of numpy.
    if name == "BM25Retriever":
        from skillstate.library.bm25 import BM25Retriever

        return BM25Retriever
    if name == "EmbeddingRetriever":
        from skillstate.library.embeddings import EmbeddingRetriever

        return EmbeddingRetriever
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
