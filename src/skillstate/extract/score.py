"""Field-level precision and recall of a proposal's constraints and facts against labels.

**Facts** are compared as ``(key, value)`` pairs: a proposed fact is right when the
labels hold its key with an equal value (numbers within 1e-9, text compared
normalised as citations are, booleans exactly). Precision is the share of proposed
facts that are right, recall the share of labelled facts proposed right. The same
counts on keys alone (``key_precision``/``key_recall``) tell a wrong value from a
missing key.

**Constraints** are sentences, worded differently by whoever extracts them: a
proposed constraint is right when at least 80% of its words are words of one
labelled constraint (it says part of that rule, not something else); a labelled
constraint is recalled when the right proposals matched to it cover at least half of
its words (a rule split into two sentences counts once, when both halves are there).
Words are lower-case runs of letters and digits, two characters or more.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skillstate.extract.check import normalized

__all__ = ["COVERED", "INSIDE", "Counts", "score_constraints", "score_facts", "words"]

INSIDE = 0.8
"""Share of a proposed constraint's words that must be in the label it matches."""
COVERED = 0.5
"""Share of a label's words its matched proposals must cover for it to be recalled."""
_WORD = re.compile(r"[a-z0-9]{2,}")


@dataclass
class Counts:
    """Micro-averaged counts over a set of transcripts."""

    proposed: int = 0
    right: int = 0
    """Proposed items that are right (precision's numerator)."""
    labelled: int = 0
    recalled: int = 0
    """Labelled items found (recall's numerator)."""
    extra: dict[str, int] = field(default_factory=dict)

    def add(self, other: Counts) -> None:
        self.proposed += other.proposed
        self.right += other.right
        self.labelled += other.labelled
        self.recalled += other.recalled
        for key, value in other.extra.items():
            self.extra[key] = self.extra.get(key, 0) + value

    @property
    def precision(self) -> float | None:
        return self.right / self.proposed if self.proposed else None

    @property
    def recall(self) -> float | None:
        return self.recalled / self.labelled if self.labelled else None


def words(text: str) -> set[str]:
    """The words of ``text`` (see the module docstring)."""
    return set(_WORD.findall(normalized(text)))


def score_constraints(proposed: Sequence[str], labels: Sequence[str]) -> Counts:
    """Counts for one transcript's constraints."""
    label_words = [words(label) for label in labels]
    covered: list[set[str]] = [set() for _ in labels]
    right = 0
    for text in proposed:
        mine = words(text)
        if not mine:
            continue
        best, share = -1, 0.0
        for index, theirs in enumerate(label_words):
            inside = len(mine & theirs) / len(mine)
            if inside > share:
                best, share = index, inside
        if best >= 0 and share >= INSIDE:
            right += 1
            covered[best] |= mine & label_words[best]
    recalled = sum(
        1
        for theirs, got in zip(label_words, covered, strict=True)
        if theirs and len(got) / len(theirs) >= COVERED
    )
    return Counts(proposed=len(proposed), right=right, labelled=len(labels), recalled=recalled)


def score_facts(proposed: Mapping[str, Any], labels: Mapping[str, Any]) -> Counts:
    """Counts for one transcript's facts (``key -> value`` on both sides)."""
    right = sum(1 for key, value in proposed.items() if key in labels and same(value, labels[key]))
    keys = sum(1 for key in proposed if key in labels)
    return Counts(
        proposed=len(proposed),
        right=right,
        labelled=len(labels),
        recalled=right,
        extra={"right_keys": keys},
    )


def same(a: Any, b: Any) -> bool:
    """Whether two fact values are equal as the module docstring says."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)
    if isinstance(a, str) and isinstance(b, str):
        return normalized(a) == normalized(b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)
