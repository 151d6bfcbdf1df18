"""The model extractor: a provider reads the numbered turns and replies with the items.

The reply is constrained to :func:`extraction_schema` (JSON-schema structured output,
a grammar for a local model) and then validated twice, in the repair-loop style of the
decision policies (:class:`~skillstate.engine.policy.ModelPolicy`): a reply that is
not an extraction (not JSON, a missing field) goes back with the error; so does one
whose items do not hold up (a turn that does not exist, a quote not in its turn, a
key the card cannot hold), listed item by item. At most ``max_repairs`` replies go
back. The last reply's items that still do not hold up are dropped, each with a note;
a model that never produced an extraction raises
:class:`~skillstate.errors.ExtractionFailed`.

The turns the model reads are already masked (the caller masks the transcript before
anything reads it), and each is cut to ``turn_chars`` characters for the prompt;
quotes are still checked against the whole turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.errors import ExtractionFailed
from skillstate.extract.check import Problem, check
from skillstate.extract.proposal import Extraction, ExtractorInfo
from skillstate.extract.target import Target
from skillstate.extract.transcript import Transcript
from skillstate.llm.base import Message, Provider, Usage

__all__ = [
    "MAX_ITEMS",
    "REPLY_TOKENS",
    "TURN_CHARS",
    "extraction_schema",
    "model_extract",
    "prompt",
]

TURN_CHARS = 2000
"""Characters of one turn the model reads (the rest is marked as cut)."""
REPLY_TOKENS = 2048
"""Completion tokens a reply may take: room for every list at its bound."""
MAX_LISTED = 8
"""Problems listed in one repair message."""
_TEXT = 300
MAX_ITEMS = 16
"""Items a reply may give per list (constraints, facts, steps, evidence). Each bound is a
grammar rule for a local model, and what its reply may grow to: a small model that
repeats an item fills the list (Gemma 3 270M makes about a token a second under a
grammar on two CPU cores, so a pipeline check lowers it)."""

SYSTEM = """\
You extract the state card of one task of the {agent} agent from a conversation.
Reply with one JSON object and nothing else, with these fields:
- "goal": {{"text", "quote", "turns"}}: what the user wants done, in a sentence or two.
- "constraints": [{{"text", "quote", "turns"}}]: each rule the user set (must, never,
  only, do not...), one per item.
- "facts": [{{"key", "value", "quote", "turns"}}]: what the conversation established.
  Keys: {keys}.
- "completed_steps" / "pending_steps": [{{"name", "quote", "turns"}}]: skills already
  done in the conversation / still to do. Skills: {skills}.
- "evidence": [{{"summary", "quote", "turns"}}]: the turns worth keeping, one line each.
"turns" lists the numbers of the turns an item comes from ([turn N] below); "quote"
copies words exactly from one of those turns that show the item. Leave out anything
the conversation does not say."""

REPAIR_SHAPE = (
    "That reply was invalid: {error}. Reply again with one JSON object matching the schema."
)
REPAIR_ITEMS = (
    "These items do not hold up: {problems}. Fix their turns and quotes (copy the words "
    "exactly from the turn) or leave them out, and reply again with the whole JSON object."
)


@dataclass(frozen=True)
class Extracted:
    """What the model extractor returns: the items kept, the rejections, the cost."""

    items: Extraction
    problems: list[Problem]
    info: ExtractorInfo


def extraction_schema(target: Target, *, max_items: int = MAX_ITEMS) -> dict[str, Any]:
    """The response schema: every string and list bounded, so a grammar ends."""

    def text(n: int = _TEXT) -> dict[str, Any]:
        return {"type": "string", "maxLength": n}

    turns = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4}

    def item(**fields: dict[str, Any]) -> dict[str, Any]:
        props = {**fields, "quote": text(), "turns": turns}
        return {
            "type": "object",
            "properties": props,
            "required": list(props),
            "additionalProperties": False,
        }

    value = {"type": ["string", "number", "integer", "boolean", "null"]}
    names = list(target.skills) or None
    step_name = {"type": "string", "enum": names} if names else text(100)
    plan_name = {"type": "string", "enum": [*target.skills, *target.steps]} if names else text(100)

    def listed(node: dict[str, Any]) -> dict[str, Any]:
        return {"type": "array", "items": node, "maxItems": max_items}

    props = {
        "goal": item(text=text(500)),
        "constraints": listed(item(text=text())),
        "facts": listed(item(key=text(80), value=value)),
        "completed_steps": listed(item(name=step_name)),
        "pending_steps": listed(item(name=plan_name)),
        "evidence": listed(item(summary=text(200))),
    }
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def prompt(
    transcript: Transcript, target: Target, *, turn_chars: int = TURN_CHARS
) -> list[Message]:
    """The messages of the first call: the instructions, then the numbered turns."""
    keys = [f"{name} ({typed.kind})" for name, typed in target.typed.items()]
    keys.append('"facts.NAME" for any other fact worth keeping')
    skills = ", ".join(f"{n} ({d})" for n, d in target.skills.items()) or "(none known)"
    system = SYSTEM.format(agent=target.agent or "new", keys="; ".join(keys), skills=skills)
    lines = []
    for turn in transcript.turns:
        text = turn.text
        if len(text) > turn_chars:
            text = f"{text[:turn_chars]}… [cut: {len(text) - turn_chars:,} more characters]"
        who = f"{turn.role} {turn.name}" if turn.name else turn.role
        lines.append(f"[turn {turn.number}] {who}: {text}")
    return [Message("system", system), Message("user", "\n\n".join(lines))]


def model_extract(
    provider: Provider,
    transcript: Transcript,
    target: Target,
    *,
    max_repairs: int = 2,
    turn_chars: int = TURN_CHARS,
    max_tokens: int = REPLY_TOKENS,
    max_items: int = MAX_ITEMS,
) -> Extracted:
    """The items ``provider`` extracts, checked, after at most ``max_repairs`` repairs."""
    messages = prompt(transcript, target, turn_chars=turn_chars)
    schema = extraction_schema(target, max_items=max_items)
    usage = Usage()
    best: tuple[Extraction, list[Problem]] | None = None
    error = "no reply"
    calls = 0
    for attempt in range(max_repairs + 1):
        completion = provider.complete(messages, schema=schema, max_tokens=max_tokens)
        calls += 1
        usage = usage + completion.usage
        try:
            extraction = parse_reply(completion.text)
        except ValueError as exc:
            error = str(exc)
            repair = REPAIR_SHAPE.format(error=error)
        else:
            best = check(extraction, transcript, target)
            if not best[1]:
                break
            listed = "; ".join(str(p) for p in best[1][:MAX_LISTED])
            more = len(best[1]) - MAX_LISTED
            repair = REPAIR_ITEMS.format(problems=listed + (f" (+{more} more)" if more > 0 else ""))
        if attempt < max_repairs:
            messages = [*messages, Message("assistant", completion.text), Message("user", repair)]
    if best is None:
        raise ExtractionFailed(f"no valid extraction after {calls} model call(s): {error}")
    info = ExtractorInfo(
        name=provider.name,
        calls=calls,
        repairs=calls - 1,
        prompt_tokens=usage.prompt,
        completion_tokens=usage.completion,
    )
    return Extracted(best[0], best[1], info)


def parse_reply(text: str) -> Extraction:
    """A reply as an :class:`Extraction`, or ``ValueError`` saying what is wrong (one line)."""
    if not text.strip():
        raise ValueError("an empty reply")
    try:
        data = json.loads(_json_part(text))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:
        raise ValueError("not JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    data = {k: v for k, v in data.items() if not (k == "goal" and _empty_goal(v))}
    try:
        return Extraction.model_validate(data)
    except ValidationError as exc:
        raise ValueError(first_error(exc, "reply")) from None


def _empty_goal(value: Any) -> bool:
    """A goal the model left blank (a grammar makes it give one): no goal."""
    return value is None or (isinstance(value, dict) and not str(value.get("text", "")).strip())


def _json_part(text: str) -> str:
    """The reply without a Markdown code fence around it (models add one)."""
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[-1]
        stripped = stripped.rsplit("```", 1)[0]
    return stripped
