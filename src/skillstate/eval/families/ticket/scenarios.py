"""The family's texts, read from ``scenarios.yaml``: the tickets a spec can ask for,
the knowledge base and the other tickets of the queue.

The data file is validated once, at import, into the typed records below.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from skillstate.eval.families.ticket.rules import Category, Kind, Priority

__all__ = ["KB", "NOISE", "SCENARIOS", "Article", "NoiseTicket", "Scenario"]

SCENARIOS_FILE = Path(__file__).with_name("scenarios.yaml")


class Scenario(BaseModel):
    """One ticket to triage: the e-mail's parts and the form fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    category: Category
    """What the requester's own words are about (the right category)."""
    decoy: Category
    """What the subject, signature and quoted thread keep mentioning."""
    kind: Kind
    users_affected: int
    blocking: bool
    reported_priority: Priority
    subject: str
    requester: str
    message: str
    signature: str
    quoted: str

    @property
    def body(self) -> str:
        # Top-posted, as mail clients do: the new words, the signature, then the thread.
        return f"{self.message}\n\n{self.signature}\n\n{self.quoted}"


class Article(BaseModel):
    """One knowledge-base article."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    article_id: str
    category: Category
    title: str
    solution: str
    superseded_by: str | None
    """The article that replaces this one; ``None`` for a current article."""


class NoiseTicket(BaseModel):
    """The template of another ticket in the queue (its row is drawn from the seed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: str
    body: str
    category: Category
    kind: Kind


class _ScenariosFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    scenarios: dict[str, Scenario]
    kb: tuple[Article, ...]
    noise: tuple[NoiseTicket, ...]


_DATA = _ScenariosFile.model_validate(yaml.safe_load(SCENARIOS_FILE.read_text(encoding="utf-8")))

SCENARIOS: dict[str, Scenario] = _DATA.scenarios
"""The tickets a spec can ask for (``params.scenario``)."""
KB: tuple[Article, ...] = _DATA.kb
"""Each category's older article first, reading almost the same as the current one."""
NOISE: tuple[NoiseTicket, ...] = _DATA.noise
"""The other tickets in the queue."""
