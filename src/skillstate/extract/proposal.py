"""A proposal: the card extracted from a conversation, every item citing its turns.

A proposal is what a person reviews before the task starts. It is written as YAML
(:func:`dump_proposal`) in this order: who it is for and who extracted it; the goal,
constraints, facts, completed and pending steps and evidence, each item with the
``turns`` it came from and the ``quote`` that supports it; the notes (what was
rejected, and why); and last the transcript itself, masked, pinned by its sha256 so
that accepting checks every citation against the very turns it cites.

The person edits the items (changes a value, deletes a constraint, adds one); an
item added without ``turns`` is recorded as the reviewer's own. :func:`load_proposal`
reads the edited file back, refusing one that does not parse as a proposal with one
line naming the field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from skillstate._validation import first_error
from skillstate.errors import UsageError
from skillstate.extract.transcript import MAX_BYTES, Role, Transcript, Turn

__all__ = [
    "FORMAT",
    "Constraint",
    "Evidence",
    "Extraction",
    "ExtractorInfo",
    "Fact",
    "Goal",
    "Proposal",
    "Step",
    "TranscriptRecord",
    "TurnRecord",
    "dump_proposal",
    "load_proposal",
    "read_proposal",
]

FORMAT = 1
"""The proposal file's own format version."""
TEXT_CHARS = 2000
"""The longest goal, constraint, quote or summary an item may hold."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


class Cited(_Model):
    """What every extracted item carries: where it came from."""

    turns: tuple[StrictInt, ...] = Field(default=(), max_length=64)
    """The turns (numbered from 1) it was taken from; empty: added by the reviewer."""
    quote: str = Field(default="", max_length=TEXT_CHARS)
    """The words of one of those turns that support it (they must occur there)."""


class Goal(Cited):
    text: str = Field(min_length=1, max_length=TEXT_CHARS)


class Constraint(Cited):
    text: str = Field(min_length=1, max_length=TEXT_CHARS)


class Fact(Cited):
    key: str = Field(min_length=1, max_length=80)
    """A typed field of the state class (``priority``) or a free fact (``facts.order_id``)."""
    value: Any = None


class Step(Cited):
    name: str = Field(min_length=1, max_length=200)
    """A skill of the agent (a pending step may also name a step of its machine)."""


class Evidence(Cited):
    summary: str = Field(min_length=1, max_length=TEXT_CHARS)


class Extraction(_Model):
    """What an extractor proposes: the items, each with its citations."""

    goal: Goal | None = None
    constraints: tuple[Constraint, ...] = ()
    facts: tuple[Fact, ...] = ()
    completed_steps: tuple[Step, ...] = ()
    pending_steps: tuple[Step, ...] = ()
    evidence: tuple[Evidence, ...] = ()


class ExtractorInfo(_Model):
    """Who extracted the items, and what it cost."""

    name: str
    """``heuristic``, or the model (``openai:gpt-4o-mini``, ``local``, ``replay:...``)."""
    calls: int = 0
    repairs: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class TurnRecord(_Model):
    turn: int = Field(ge=1)
    role: Role
    text: str
    name: str | None = None


class TranscriptRecord(_Model):
    """The conversation the items cite, masked, pinned by its digest."""

    source: str
    format: Literal["openai", "jsonl", "text"]
    sha256: str
    turns: tuple[TurnRecord, ...] = Field(min_length=1)

    @classmethod
    def of(cls, transcript: Transcript) -> TranscriptRecord:
        turns = tuple(
            TurnRecord(turn=t.number, role=t.role, text=t.text, name=t.name)
            for t in transcript.turns
        )
        return cls(
            source=transcript.source,
            format=transcript.format,
            sha256=transcript.digest,
            turns=turns,
        )

    def transcript(self) -> Transcript:
        """The transcript again (numbers as recorded; :func:`check_pinned` checks them)."""
        turns = tuple(Turn(t.turn, t.role, t.text, t.name) for t in self.turns)
        return Transcript(source=self.source, format=self.format, turns=turns)


class Proposal(_Model):
    """A reviewed (or to-be-reviewed) card for one agent, extracted from one transcript."""

    proposal: Literal[1] = 1
    """The file's format (:data:`FORMAT`)."""
    agent: str | None = None
    """``module:attr`` of the agent it is for (``None``: a new agent)."""
    state_class: str
    extractor: ExtractorInfo
    goal: Goal | None = None
    constraints: tuple[Constraint, ...] = ()
    facts: tuple[Fact, ...] = ()
    completed_steps: tuple[Step, ...] = ()
    pending_steps: tuple[Step, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    notes: tuple[str, ...] = ()
    """What the extraction rejected, and why (for the reviewer; ignored on accept)."""
    transcript: TranscriptRecord

    @property
    def items(self) -> Extraction:
        return Extraction(
            goal=self.goal,
            constraints=self.constraints,
            facts=self.facts,
            completed_steps=self.completed_steps,
            pending_steps=self.pending_steps,
            evidence=self.evidence,
        )


# ---------------------------------------------------------------- YAML


HEADER = """\
# skillstate extract: a proposed state card, for review before the task starts.
# Every item cites the turns it came from (turns) and the words that support it (quote):
# edit or delete items; an item you add without turns is recorded as yours. The
# transcript at the end is the evidence: it is checked against its sha256, so leave it.
# Then: skillstate extract --accept THIS_FILE --agent MODULE:ATTR [--task-id ID]
"""


def dump_proposal(proposal: Proposal) -> str:
    """The proposal as YAML: the header, the items, the notes, then the transcript."""
    data = proposal.model_dump(mode="json", exclude_none=False)
    for name in ("constraints", "facts", "completed_steps", "pending_steps", "evidence"):
        data[name] = [_item(i) for i in data[name]]
    if data["goal"] is not None:
        data["goal"] = _item(data["goal"])
    data["transcript"]["turns"] = [
        {k: v for k, v in t.items() if v is not None} for t in data["transcript"]["turns"]
    ]
    text: str = yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=100)
    return HEADER + text


def _item(item: dict[str, Any]) -> dict[str, Any]:
    """An item with its content first and its citation after (what a reviewer reads)."""
    cite = {"turns": item.pop("turns"), "quote": item.pop("quote")}
    return {**item, **cite}


def load_proposal(text: str, *, what: str) -> Proposal:
    """The proposal in ``text`` (``what`` names it in errors), or one ``UsageError`` line."""
    from skillstate._yaml import load_yaml

    if len(text) > 2 * MAX_BYTES:
        raise UsageError(f"{what}: over the bound of {2 * MAX_BYTES:,} characters")
    data = load_yaml(text, what=what)
    if not isinstance(data, dict):
        raise UsageError(f"{what} is not a proposal (a YAML mapping from skillstate extract)")
    try:
        return Proposal.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"{what} refused: {first_error(exc, 'proposal')}") from None


def read_proposal(path: str | os.PathLike[str]) -> Proposal:
    """The proposal in the file at ``path``."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise UsageError(f"cannot read proposal {file.name}: {reason}") from None
    return load_proposal(text, what=f"proposal {file.name}")


class _Dumper(yaml.SafeDumper):
    """Multi-line text (a turn, a quote) as a literal block: readable, and a person's
    edit does not have to re-escape its newlines."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.SequenceNode:
    # Turn numbers on one line: `turns: [3, 4]`.
    flow = bool(value) and all(type(v) is int for v in value)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


_Dumper.add_representer(str, _text)
_Dumper.add_representer(list, _list)
