"""The deterministic extractor (``--model heuristic``): rules, no model, the offline default.

It is a baseline, measured like the model path (``benchmarks/extract_eval.py``):

* **goal**: the first user turn that says something (three words or more): its
  leading sentences up to the first constraint, cut at a sentence near 500
  characters; a ``Goal:`` label is dropped.
* **constraints**: each sentence (or list line) of a user or system turn that states a
  rule: ``must``, ``never``, ``do not``/``don't``, ``only``, ``always``, ``at most``,
  ``at least``, ``no more than``, ``avoid``, ``make sure``, ``ensure``, ``should
  (not)``, ``not allowed``, ``required``.
* **facts**: ``key: value`` and ``key = value`` lines (JSON object lines included:
  tool outputs) of any turn, and ``my/our/the KEY is VALUE`` in user turns. When the
  agent's state class declares typed fields, only keys that name one of them
  (case-insensitive, spaces and hyphens read as ``_``) are taken, and only values its
  type accepts; a card with no typed fields takes free facts from user and system
  turns. A key seen again in a later turn takes the later value.
* **completed steps**: a known skill an assistant turn calls (``[tool call] NAME(``,
  ``"skill": "NAME"``) whose answering tool turn is not an error.
* **pending steps**: known skills a user turn names (``record_priority`` or
  ``record priority``) that no later turn completes.
* **evidence**: the turns the items above cite, then the tool turns, the latest
  :attr:`~skillstate.state.model.AgentState.MAX_EVIDENCE` of them, each summarised by
  its first line.

Every item quotes the span it came from, so the citation checks
(:mod:`skillstate.extract.check`) hold by construction; they still run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from skillstate.extract.proposal import Constraint, Evidence, Extraction, Fact, Goal, Step
from skillstate.extract.target import Rejected, Target
from skillstate.extract.transcript import Transcript, Turn

__all__ = ["CONSTRAINT_WORDS", "heuristic_extract"]

CONSTRAINT_WORDS = (
    "must",
    "never",
    "do not",
    "don't",
    "only",
    "always",
    "at most",
    "at least",
    "no more than",
    "avoid",
    "make sure",
    "ensure",
    "should",
    "not allowed",
    "required",
)
_RULE = re.compile(
    r"\b(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in CONSTRAINT_WORDS) + r")\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[\"'(\[A-Z0-9])")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_LABEL = re.compile(r"^\s*(?:goal|task|request)\s*:\s*", re.IGNORECASE)
_KEY_VALUE = re.compile(r'^\s*[-*]?\s*"?([A-Za-z][A-Za-z0-9 _-]{0,40}?)"?\s*[:=]\s*(.+?)\s*,?\s*$')
_IS = re.compile(
    r"\b(?:my|our|the)\s+([a-z][a-z0-9 _-]{1,30}?)\s+(?:is|=)\s+([^.;,!?\n]+)", re.IGNORECASE
)
_CALL = re.compile(r"\[tool call\]\s*([A-Za-z_][\w.-]*)\(|\"skill\"\s*:\s*\"([^\"]+)\"")
_ERROR = re.compile(r"^\s*(?:\w*(?:Error|Exception)\b|error\b|failed\b)", re.IGNORECASE)
GOAL_CHARS = 500
SUMMARY_CHARS = 150


def heuristic_extract(transcript: Transcript, target: Target) -> Extraction:
    """The items the rules find in ``transcript`` for ``target`` (not yet checked)."""
    goal, constraints = _goal_and_constraints(transcript)
    facts = list(_facts(transcript, target))
    completed = list(_completed(transcript, target))
    pending = list(_pending(transcript, target, completed))
    items = Extraction(
        goal=goal,
        constraints=tuple(constraints),
        facts=tuple(facts),
        completed_steps=tuple(completed),
        pending_steps=tuple(pending),
    )
    return items.model_copy(update={"evidence": _evidence(transcript, target, items)})


# ---------------------------------------------------------------- sentences


def sentences(text: str) -> Iterator[str]:
    """The sentences and list lines of ``text``, each a span of it (bullets left out)."""
    for line in text.split("\n"):
        body = _BULLET.sub("", line).strip()
        if not body:
            continue
        for part in _SENTENCE_END.split(body):
            if part.strip():
                yield part.strip()


def is_rule(sentence: str) -> bool:
    """Whether ``sentence`` states a rule (one of :data:`CONSTRAINT_WORDS`)."""
    return _RULE.search(sentence) is not None


def _goal_and_constraints(transcript: Transcript) -> tuple[Goal | None, list[Constraint]]:
    goal: Goal | None = None
    constraints: list[Constraint] = []
    for turn in transcript.turns:
        if turn.role not in ("user", "system"):
            continue
        lead: list[str] = []
        for sentence in sentences(turn.text):
            if sentence.endswith(":") and len(sentence.split()) <= 3:
                continue  # a heading ("Constraints:")
            if is_rule(sentence):
                constraints.append(Constraint(text=sentence, quote=sentence, turns=(turn.number,)))
            elif goal is None and turn.role == "user" and (lead or _says_something(sentence)):
                lead.append(sentence)
        if goal is None and lead:
            goal = _goal(turn, lead)
    return goal, constraints


def _says_something(sentence: str) -> bool:
    """Three words or more once a ``Goal:`` label is dropped (not a greeting)."""
    return len(_LABEL.sub("", sentence).split()) >= 3


def _goal(turn: Turn, lead: list[str]) -> Goal:
    """The leading sentences, as long as they stay one span of the turn (no rule or
    heading in between) and under :data:`GOAL_CHARS`."""
    quote = _LABEL.sub("", lead[0])
    for sentence in lead[1:]:
        candidate = f"{quote} {sentence}"
        if len(candidate) > GOAL_CHARS or not _occurs(candidate, turn.text):
            break
        quote = candidate
    return Goal(text=quote, quote=quote, turns=(turn.number,))


def _occurs(span: str, text: str) -> bool:
    from skillstate.extract.check import normalized

    return normalized(span) in normalized(text)


# ---------------------------------------------------------------- facts


def _facts(transcript: Transcript, target: Target) -> Iterator[Fact]:
    typed = bool(target.typed)
    for turn in transcript.turns:
        seen: set[str] = set()  # the first value of a key in one turn (top level first)
        free_ok = not typed and turn.role in ("user", "system")
        for key, raw, quote in _pairs(turn):
            path = _path(key, target, free_ok)
            if path is None or path in seen:
                continue
            value = _value(raw)
            if value is None or value == "" or isinstance(value, dict | list):
                continue
            try:
                value = target.fact_value(path, value)
            except Rejected:
                continue
            seen.add(path)
            yield Fact(key=path, value=value, quote=quote, turns=(turn.number,))


def _pairs(turn: Turn) -> Iterator[tuple[str, str, str]]:
    for line in turn.text.split("\n"):
        found = _KEY_VALUE.match(line)
        if found is not None:
            yield found.group(1), found.group(2), line.strip()
    if turn.role == "user":
        for found in _IS.finditer(turn.text):
            yield found.group(1), found.group(2), found.group(0)


def _path(key: str, target: Target, free_ok: bool) -> str | None:
    name = re.sub(r"[\s-]+", "_", key.strip()).lower()
    if name in target.typed:
        return name
    if not free_ok:
        return None
    try:
        return target.fact_path(f"facts.{name}")
    except Rejected:
        return None


def _value(raw: str) -> Any:
    text = raw.strip().rstrip(",")
    try:
        return json.loads(text)
    except ValueError:
        return text.rstrip(".").strip()


# ---------------------------------------------------------------- steps


def _completed(transcript: Transcript, target: Target) -> Iterator[Step]:
    turns = transcript.turns
    for index, turn in enumerate(turns):
        if turn.role != "assistant":
            continue
        for found in _CALL.finditer(turn.text):
            name = found.group(1) or found.group(2)
            if name not in target.skills:
                continue
            answer = turns[index + 1] if index + 1 < len(turns) else None
            if answer is not None and answer.role == "tool" and _ERROR.match(answer.text):
                continue
            yield Step(name=name, quote=found.group(0), turns=(turn.number,))


def _pending(transcript: Transcript, target: Target, completed: list[Step]) -> Iterator[Step]:
    done_after: dict[str, int] = {}
    for step in completed:
        done_after[step.name] = max(done_after.get(step.name, 0), *step.turns)
    named: set[str] = set()
    for turn in transcript.turns:
        if turn.role != "user":
            continue
        for name in target.skills:
            if name in named or done_after.get(name, 0) > turn.number:
                continue
            for spelled in dict.fromkeys((name, name.replace("_", " "))):
                found = re.search(rf"\b{re.escape(spelled)}\b", turn.text, re.IGNORECASE)
                if found is not None:
                    named.add(name)
                    yield Step(name=name, quote=found.group(0), turns=(turn.number,))
                    break


# ---------------------------------------------------------------- evidence


def _evidence(transcript: Transcript, target: Target, items: Extraction) -> tuple[Evidence, ...]:
    cited: list[int] = []
    groups: list[Any] = [
        [items.goal] if items.goal else [],
        items.constraints,
        items.facts,
        items.completed_steps,
        items.pending_steps,
    ]
    for group in groups:
        for item in group:
            cited.extend(item.turns)
    tools = [t.number for t in transcript.turns if t.role == "tool"]
    chosen = list(dict.fromkeys(cited))
    chosen = chosen[-target.max_evidence :]
    for number in reversed(tools):
        if len(chosen) >= target.max_evidence:
            break
        if number not in chosen:
            chosen.append(number)
    out = []
    for number in sorted(chosen):
        turn = transcript.turns[number - 1]
        first = next((line.strip() for line in turn.text.split("\n") if line.strip()), "")
        quote = first[:SUMMARY_CHARS]
        who = f"{turn.role} {turn.name}" if turn.name else turn.role
        summary = quote or f"(an empty {who} turn)"
        out.append(Evidence(summary=summary, quote=quote, turns=(number,)))
    return tuple(out)
