"""Citations, keys and names: what an extracted item must satisfy to be kept.

Every item cites turns and quotes the words that support it. An item is rejected
(never silently kept) when:

* it cites no turn, or a turn the transcript does not have;
* its ``quote`` is missing (an evidence item may go without) or does not occur in any
  turn it cites (compared case-insensitively, whitespace and typographic quotes
  normalised);
* a fact's key is not one the card can hold (:meth:`Target.fact_path`), its value
  does not fit the field's type, holds a masked secret, or (a text or a number)
  does not occur in its quote;
* a step is not a skill the agent knows (a pending step may also name a step of its
  machine).

:func:`check` returns the items kept and one :class:`Problem` per item rejected. An
extractor turns the problems into the proposal's notes (a model is sent them back
first, as a repair); accepting a reviewed proposal refuses it on the first one, where
an item without turns is allowed: the reviewer added it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from skillstate.extract.proposal import (
    Cited,
    Constraint,
    Evidence,
    Extraction,
    Fact,
    Goal,
    Step,
)
from skillstate.extract.target import Rejected, Target
from skillstate.extract.transcript import Transcript
from skillstate.limits import DEFAULT_LIMITS, problem
from skillstate.state.secrets import MASK

__all__ = ["Problem", "check", "normalized", "supports"]

_SPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"-?\d[\d,_]*(?:\.\d+)?")
_TYPOGRAPHIC = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "–": "-", "—": "-"})


@dataclass(frozen=True)
class Problem:
    """Why one item was rejected."""

    field: str
    """Where, as the proposal names it: ``constraints[2]``, ``facts[0].value``."""
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def normalized(text: str) -> str:
    """``text`` as citations are compared: case-folded, typographic quotes and dashes
    made plain, whitespace runs made one space."""
    return _SPACE.sub(" ", text.translate(_TYPOGRAPHIC).casefold()).strip()


def supports(quote: str, value: Any) -> bool:
    """Whether ``quote`` holds ``value``: each text and number in it (booleans and
    nulls say nothing a quote could show, and pass)."""
    said = normalized(quote)
    numbers = {_number(m) for m in _NUMBER.findall(quote)}
    for leaf in _leaves(value):
        if isinstance(leaf, bool) or leaf is None:
            continue
        if isinstance(leaf, int | float):
            if float(leaf) not in numbers:
                return False
        elif normalized(str(leaf)) not in said:
            return False
    return True


def check(
    extraction: Extraction, transcript: Transcript, target: Target, *, reviewed: bool = False
) -> tuple[Extraction, list[Problem]]:
    """The items of ``extraction`` that hold up against ``transcript`` and ``target``,
    and a problem for each one that does not. ``reviewed``: items without turns are a
    person's and kept (as accepting a reviewed proposal takes them)."""
    run = _Check(transcript, target, reviewed)
    goal = None
    if extraction.goal is not None and run.cited("goal", extraction.goal):
        goal = extraction.goal
    constraints = _unique_constraints(
        [c for i, c in enumerate(extraction.constraints) if run.cited(f"constraints[{i}]", c)]
    )
    facts = run.facts(extraction.facts)
    completed = run.steps("completed_steps", extraction.completed_steps, plan=False)
    pending = run.steps("pending_steps", extraction.pending_steps, plan=True)
    evidence = [
        e
        for i, e in enumerate(extraction.evidence)
        if run.cited(f"evidence[{i}]", e, quote_required=False, yours=False)
    ]
    if len(evidence) > target.max_evidence:
        dropped = len(evidence) - target.max_evidence
        run.problems.append(
            Problem(
                "evidence",
                f"{dropped} item(s) dropped: the card keeps {target.max_evidence} (the latest)",
            )
        )
        evidence = evidence[-target.max_evidence :]
    kept = Extraction(
        goal=goal,
        constraints=tuple(constraints),
        facts=tuple(facts),
        completed_steps=tuple(completed),
        pending_steps=tuple(pending),
        evidence=tuple(evidence),
    )
    return kept, run.problems


class _Check:
    def __init__(self, transcript: Transcript, target: Target, reviewed: bool) -> None:
        self.transcript = transcript
        self.target = target
        self.reviewed = reviewed
        self.problems: list[Problem] = []

    def cited(
        self, where: str, item: Cited, *, quote_required: bool = True, yours: bool = True
    ) -> bool:
        """Whether ``item``'s citation holds (a problem is noted when it does not).
        ``yours``: a reviewed item may go without turns (evidence may not: it is the turn)."""
        found = self._citation(item, quote_required, yours)
        if found is not None:
            self.problems.append(Problem(where, f"{_what(item)}: {found}"))
            return False
        return True

    def _citation(self, item: Cited, quote_required: bool, yours: bool) -> str | None:
        if not item.turns:
            return None if self.reviewed and yours else "cites no turn"
        total = len(self.transcript.turns)
        for number in item.turns:
            if self.transcript.turn(number) is None:
                return f"cites turn {number}, which does not exist (the transcript has {total})"
        if not item.quote.strip():
            return "quotes nothing from its turns" if quote_required else None
        said = normalized(item.quote)
        for number in item.turns:
            turn = self.transcript.turn(number)
            if turn is not None and said in normalized(turn.text):
                return None
        where = ", ".join(str(n) for n in item.turns)
        return f"its quote {_short(item.quote)} does not occur in turn {where}"

    def facts(self, facts: Sequence[Fact]) -> list[Fact]:
        kept: dict[str, tuple[int, Fact]] = {}
        for index, fact in enumerate(facts):
            where = f"facts[{index}]"
            if not self.cited(where, fact):
                continue
            try:
                path = self.target.fact_path(fact.key)
                value = self.target.fact_value(path, fact.value)
                _fits(value, fact)
            except Rejected as exc:
                self.problems.append(Problem(where, f"fact {fact.key[:60]!r}: {exc}"))
                continue
            found = (index, fact.model_copy(update={"key": path, "value": value}))
            earlier = kept.get(path)
            if earlier is None or _latest(found[1]) >= _latest(earlier[1]):
                kept[path] = found  # the later turn's value wins
        return [fact for _, fact in sorted(kept.values(), key=lambda pair: pair[0])]

    def steps(self, field: str, steps: Sequence[Step], *, plan: bool) -> list[Step]:
        kept = []
        for index, step in enumerate(steps):
            where = f"{field}[{index}]"
            if not self.cited(where, step):
                continue
            if not self.target.knows_step(step.name, plan=plan):
                known = "no agent was given" if self.target.agent is None else "the agent"
                what = "a skill or step" if plan else "a skill"
                self.problems.append(
                    Problem(where, f"step {step.name[:60]!r} is not {what} of {known}")
                )
                continue
            kept.append(step)
        return kept


def _fits(value: Any, fact: Fact) -> None:
    found = problem(value, chars=DEFAULT_LIMITS.value_chars, depth=DEFAULT_LIMITS.depth)
    if found is not None:
        raise Rejected(f"value refused: {found}")
    if any(isinstance(leaf, str) and MASK in leaf for leaf in _leaves(value)):
        raise Rejected("its value is a masked secret")
    if fact.turns and not supports(fact.quote, value):
        raise Rejected(f"its value {_short(str(value))} does not occur in its quote")


def _unique_constraints(constraints: list[Constraint]) -> list[Constraint]:
    """One constraint per wording: a repeat adds its turns to the first."""
    seen: dict[str, int] = {}
    out: list[Constraint] = []
    for constraint in constraints:
        key = normalized(constraint.text)
        if key in seen:
            first = out[seen[key]]
            turns = tuple(dict.fromkeys((*first.turns, *constraint.turns)))
            out[seen[key]] = first.model_copy(update={"turns": turns})
            continue
        seen[key] = len(out)
        out.append(constraint)
    return out


def _latest(item: Cited) -> int:
    return max(item.turns, default=0)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _number(text: str) -> float:
    try:
        return float(text.replace(",", "").replace("_", ""))
    except ValueError:
        return float("nan")


def _short(text: str, n: int = 60) -> str:
    one = " ".join(text.split())
    return repr(one if len(one) <= n else one[: n - 1] + "…")


def _what(item: Cited) -> str:
    if isinstance(item, Goal | Constraint):
        return _short(item.text, 40)
    if isinstance(item, Fact):
        return f"fact {item.key[:40]!r}"
    if isinstance(item, Step):
        return f"step {item.name[:40]!r}"
    if isinstance(item, Evidence):
        return _short(item.summary, 40)
    return "item"
