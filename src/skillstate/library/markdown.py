"""Skills from a directory of ``SKILL.md`` files (the agent-skills convention).

A ``SKILL.md`` is YAML front matter (``name``, ``description``, optional
``metadata``, ``allowed-tools``, ``license``, ``compatibility``; other keys are
ignored, as agent-skills clients do) and a markdown body of instructions::

    ---
    name: refund-policy
    description: How to handle a refund request, step by step
    allowed-tools: lookup_order issue_refund
    ---
    1. Look the order up with lookup_order ...

Such a skill is **model-facing**: calling it loads its instructions into the card
(:attr:`~skillstate.state.model.AgentState.skill_instructions`, at most
:data:`MAX_LOADED` of them, each cut to :data:`INSTRUCTION_CHARS` with the whole
text kept as an artifact), and every following view shows them, so the model
follows them with the agent's executable skills. The skills ``allowed-tools``
names are offered to the model while the instructions are loaded, whatever a
retriever ranks (names that are not skills of the agent are ignored). Its
``verify`` is a real check: the file is read again and the instructions in the
candidate card must be the file's current text (same digest); a file changed or
removed mid-step fails the step. It takes no params, moves no step, and applies
while its instructions are not loaded.

When the front matter names a Python function (``metadata: {run: module:function}``),
the file is an **executable** skill instead, declared like a YAML skill
(:mod:`skillstate.library.yaml_skills`): the other keys of ``metadata`` are the
spec (``input_params``, ``output_keys``, ``verify``...), ``allowed-tools`` are the
tools it may call, and the body is indexed for retrieval but not loaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from skillstate._yaml import load_yaml
from skillstate.errors import UsageError
from skillstate.events import Verdict
from skillstate.library.declared import DeclaredSkill, check_name, skill_from_spec
from skillstate.library.yaml_skills import read_text
from skillstate.skills.skill import NoParams, Outcome, SkillContext
from skillstate.state.model import AgentState, SkillInstructions

__all__ = [
    "INSTRUCTION_CHARS",
    "MAX_LOADED",
    "InstructionsSkill",
    "load_skill_dir",
    "load_skill_md",
]

INSTRUCTION_CHARS = 4_000
"""How much of one file's instructions the card holds (and every view shows)."""
MAX_LOADED = 2
"""How many files' instructions the card holds at once; loading another drops the oldest."""
SEARCH_CHARS = 2_000
"""How much of a body retrieval indexes (the description and the start say the most)."""
_DESCRIPTION_CHARS = 1_024  # the agent-skills limit


class InstructionsSkill(DeclaredSkill):
    """A model-facing skill: calling it loads a ``SKILL.md``'s instructions into the card."""

    uses: tuple[str, ...] = ()


def load_skill_dir(
    root: str | Path, *, modules: Collection[str] | None = None
) -> list[DeclaredSkill]:
    """Every ``SKILL.md`` under ``root`` (at any depth, in path order) as a skill."""
    base = Path(root)
    if not base.is_dir():
        raise UsageError(f"{base}: not a directory of skills")
    files = sorted(base.rglob("SKILL.md"))
    skills = [load_skill_md(file, modules=modules) for file in files]
    seen: dict[str, Path] = {}
    for skill in skills:
        if skill.name in seen:
            raise UsageError(
                f"{skill.source}: name: {skill.name!r} is also the name of {seen[skill.name]}"
            )
        seen[skill.name] = skill.source
    return skills


def load_skill_md(path: str | Path, *, modules: Collection[str] | None = None) -> DeclaredSkill:
    """The skill one ``SKILL.md`` declares (model-facing, or executable with ``metadata.run``)."""
    file = Path(path)
    front, body = _parse(file)
    where = f"{file}: {front.get('name') or 'front matter'}"
    name = check_name(front.get("name"), f"{where}.name")
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        raise UsageError(f"{where}.description: required, a sentence saying what it is for")
    if len(description) > _DESCRIPTION_CHARS:
        raise UsageError(f"{where}.description: at most {_DESCRIPTION_CHARS} characters")
    metadata = front.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise UsageError(f"{where}.metadata: expected a mapping")
    allowed = _allowed_tools(front.get("allowed-tools"), f"{where}.allowed-tools")
    if "run" in metadata:  # executable: the metadata is a skill spec
        spec = {**metadata, "name": name, "description": description}
        if allowed:
            spec["tools"] = list(allowed)
        return skill_from_spec(
            spec,
            where=f"{where}.metadata",
            source=file,
            modules=modules,
            search_text=body[:SEARCH_CHARS],
        )
    if not body:
        raise UsageError(f"{where}: the file has no instructions (its body is empty)")
    tags = metadata.get("tags", ())
    if isinstance(tags, str):
        tags = tags.split()
    if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
        raise UsageError(f"{where}.metadata.tags: expected a list of strings")
    return _instructions_skill(
        file,
        name=name,
        description=description,
        tags=tags,
        uses=allowed,
        body=body,
        metadata=metadata,
    )


def _instructions_skill(
    file: Path,
    *,
    name: str,
    description: str,
    tags: Any,
    uses: tuple[str, ...],
    body: str,
    metadata: Mapping[str, Any],
) -> InstructionsSkill:
    def run(state: AgentState, params: NoParams, ctx: SkillContext) -> Outcome:
        text = _body(file)
        digest = _digest(text)
        shown, ref = text, None
        if len(text) > INSTRUCTION_CHARS:
            ref = ctx.attach(text.encode("utf-8"), media_type="text/markdown")
            shown = _cut(text, ref)
        loaded = SkillInstructions(skill=name, digest=digest, text=shown, ref=ref, uses=uses)
        kept = [i for i in state.skill_instructions if i.skill != name][-(MAX_LOADED - 1) :]
        writes = [i.model_dump(mode="json") for i in (*kept, loaded)]
        return Outcome(
            writes={"skill_instructions": writes},
            summary=f"loaded the instructions of {name} ({len(text)} chars, {digest[:19]})",
            value=digest,
        )

    def verify(state: AgentState, outcome: Outcome) -> Verdict:
        entry = next((i for i in state.skill_instructions if i.skill == name), None)
        if entry is None:
            return Verdict.failed(f"the instructions of {name} are not in the card")
        try:
            text = _body(file)
        except UsageError as exc:
            return Verdict.failed(f"{file} cannot be read again: {exc}", permanent=True)
        if _digest(text) != entry.digest:
            return Verdict.failed(f"{file} changed while it was loaded: load it again")
        expected = text if entry.ref is None else _cut(text, entry.ref)
        if entry.text != expected:
            return Verdict.failed(f"the card holds other instructions than {file}")
        return Verdict.passed(f"the card holds {file.name} as it is now ({entry.digest[:19]})")

    def when(state: AgentState) -> bool:
        return all(i.skill != name for i in state.skill_instructions)

    version = metadata.get("version", "1")
    skill = InstructionsSkill(
        run,
        name=name,
        description=" ".join(description.split()),
        version=str(version),
        params=NoParams,
        outputs=("skill_instructions",),
        tags=tuple(tags),
        verify=verify,
        when=when,
    )
    skill.source = file
    skill.search_text = body[:SEARCH_CHARS]
    skill.uses = uses
    return skill


def _parse(file: Path) -> tuple[dict[str, Any], str]:
    """The front matter (a mapping) and the body (stripped) of a ``SKILL.md``."""
    text = read_text(file).lstrip("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise UsageError(f"{file}: no front matter (a SKILL.md starts with a --- line)")
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            front = load_yaml("".join(lines[1:i]), what=f"{file} front matter")
            body = "".join(lines[i + 1 :]).strip()
            break
    else:
        raise UsageError(f"{file}: the front matter is not closed by a --- line")
    if not isinstance(front, Mapping):
        raise UsageError(f"{file}: the front matter is not a mapping of keys")
    return dict(front), body


def _body(file: Path) -> str:
    return _parse(file)[1]


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cut(text: str, ref: str) -> str:
    note = f"\n[… cut at {INSTRUCTION_CHARS} characters; the whole text is artifact {ref}]"
    return text[: INSTRUCTION_CHARS - len(note)] + note


def _allowed_tools(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return tuple(raw.split())
    if isinstance(raw, list) and all(isinstance(t, str) for t in raw):
        return tuple(raw)
    raise UsageError(f"{where}: expected names separated by spaces, or a list")
