"""Reading a conversation: OpenAI chat messages (JSON or JSONL) or plain text turns.

Every reader gives the same :class:`Transcript`: turns numbered from 1 in the order
the file holds them, each with its role and its text. What the extractor cites, what
a person reviews and what the store keeps as evidence are these numbered turns.

Accepted:

* **OpenAI chat format**: a JSON list of ``{"role", "content"}`` messages, a JSON
  object with a ``"messages"`` list, or JSONL with one message per line. ``content``
  is a string, ``null`` or a list of parts (``{"type": "text", "text": ...}``; a part
  that is not text is shown as ``[image_url]`` and the like). An assistant message's
  ``tool_calls`` become ``[tool call] NAME(ARGUMENTS)`` lines of its turn; a ``tool``
  message is a turn of its own, named after the call it answers. Roles: ``system``,
  ``developer`` (read as system), ``user``, ``assistant``, ``tool``, ``function``
  (read as tool).
* **Plain text**: a line ``user: ...`` (or ``assistant:``, ``system:``, ``tool:``, any
  case) starts a turn; the lines after it, blank lines included, belong to it until
  the next such line.

Anything else is refused with one :class:`~skillstate.errors.UsageError` line naming
the file and the line or turn: a file that is not UTF-8 text, holds a NUL byte, is
larger than :data:`MAX_BYTES` or has more than :data:`MAX_TURNS` turns, or holds no
turn at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from skillstate.errors import UsageError
from skillstate.limits import DEFAULT_LIMITS

__all__ = [
    "MAX_BYTES",
    "MAX_TURNS",
    "Role",
    "Transcript",
    "Turn",
    "parse_transcript",
    "read_transcript",
]

MAX_BYTES = 4 * 1024 * 1024
"""The largest transcript file read (4 MiB): a conversation, not a data dump."""
MAX_TURNS = 2000
"""The most turns a transcript may have."""

Role = Literal["system", "user", "assistant", "tool"]
Format = Literal["openai", "jsonl", "text"]
_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}
_TEXT_TURN = re.compile(r"^(user|assistant|system|tool)\s*:[ \t]?(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Turn:
    """One message of the conversation."""

    number: int
    """Its place, from 1: what citations name."""
    role: Role
    text: str
    name: str | None = None
    """The tool a ``tool`` turn answers (when the file says)."""


@dataclass(frozen=True)
class Transcript:
    """A conversation as numbered turns, with where it came from."""

    source: str
    """The file's name (not its directory: proposals travel)."""
    format: Format
    turns: tuple[Turn, ...]

    def turn(self, number: int) -> Turn | None:
        """Turn ``number`` (from 1), or ``None`` when the transcript has no such turn."""
        if 1 <= number <= len(self.turns):
            return self.turns[number - 1]
        return None

    @property
    def digest(self) -> str:
        """``sha256:`` of the turns (role, name, text): what a proposal pins its
        transcript with, so a turn edited in the review is noticed."""
        rows = [[t.number, t.role, t.name, t.text] for t in self.turns]
        text = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def masked(self, mask: Any) -> Transcript:
        """The transcript with every turn's text passed through ``mask`` (a
        :class:`~skillstate.state.redact.Redactor`'s ``text``)."""
        turns = tuple(replace(t, text=mask(t.text)) for t in self.turns)
        return replace(self, turns=turns)


def read_transcript(path: str | os.PathLike[str]) -> Transcript:
    """The transcript in the file at ``path`` (see the module docstring for the formats)."""
    file = Path(path)
    name = file.name or str(path)
    try:
        size = file.stat().st_size
        if size > MAX_BYTES:
            raise UsageError(
                f"transcript {name}: {size:,} bytes is over the bound of {MAX_BYTES:,} bytes"
            )
        data = file.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"cannot read transcript {name}: {reason}") from None
    suffix = file.suffix.lower()
    hint: Literal["json", "jsonl"] | None = None
    if suffix in (".json", ".jsonl"):
        hint = "jsonl" if suffix == ".jsonl" else "json"
    return parse_transcript(data, source=name, hint=hint)


def parse_transcript(
    data: bytes | str, *, source: str, hint: Literal["json", "jsonl"] | None = None
) -> Transcript:
    """The transcript ``data`` holds; ``source`` names it in errors. ``hint`` (the file's
    suffix) reads it as JSON or as JSONL whatever its first character looks like."""
    text = _decoded(data, source)
    if not text.strip():
        raise UsageError(f"transcript {source} is empty")
    stripped = text.lstrip()
    if hint == "jsonl":
        turns = _jsonl(text, source)
        fmt: Format = "jsonl"
    elif hint == "json" or stripped[0] in "[{":
        fmt, turns = _json_or_jsonl(text, source)
    else:
        turns = _plain(text, source)
        fmt = "text"
    if not turns:
        raise UsageError(f"transcript {source} holds no turns")
    if len(turns) > MAX_TURNS:
        raise UsageError(
            f"transcript {source} has {len(turns):,} turns, over the bound of {MAX_TURNS:,}"
        )
    return Transcript(source=source, format=fmt, turns=tuple(turns))


# ---------------------------------------------------------------- decoding


def _decoded(data: bytes | str, source: str) -> str:
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            raise UsageError(
                f"transcript {source}: {len(data):,} bytes is over the bound of {MAX_BYTES:,} bytes"
            )
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise UsageError(
                f"transcript {source} line {line}: not UTF-8 text (byte {exc.start})"
            ) from None
    else:
        text = data
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise UsageError(f"transcript {source} line {line}: a NUL byte (not a transcript)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _json_or_jsonl(text: str, source: str) -> tuple[Format, list[Turn]]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as whole:
        lines = [line for line in text.split("\n") if line.strip()]
        if len(lines) > 1 and lines[0].lstrip().startswith("{"):
            return "jsonl", _jsonl(text, source)
        raise UsageError(
            f"transcript {source} line {whole.lineno}: not JSON ({whole.msg})"
        ) from None
    except (ValueError, RecursionError):
        raise UsageError(f"transcript {source}: JSON nested too deeply or too large") from None
    if isinstance(value, Mapping) and "messages" in value:
        value = value["messages"]
        if not isinstance(value, list):
            raise UsageError(f"transcript {source}: 'messages' is not a list")
    elif isinstance(value, Mapping):
        value = [value]  # one message
    if not isinstance(value, list):
        raise UsageError(
            f"transcript {source}: JSON {type(value).__name__} is not a list of messages"
        )
    return "openai", _messages(value, source, lines=None)


def _jsonl(text: str, source: str) -> list[Turn]:
    messages: list[Any] = []
    lines: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise UsageError(f"transcript {source} line {number}: not JSON ({exc.msg})") from None
        except (ValueError, RecursionError):
            raise UsageError(f"transcript {source} line {number}: JSON too deep or large") from None
        lines.append(number)
    return _messages(messages, source, lines=lines)


# ---------------------------------------------------------------- OpenAI messages


def _messages(items: Sequence[Any], source: str, *, lines: Sequence[int] | None) -> list[Turn]:
    if len(items) > MAX_TURNS:
        raise UsageError(
            f"transcript {source} has {len(items):,} turns, over the bound of {MAX_TURNS:,}"
        )
    calls: dict[str, str] = {}  # tool_call_id -> function name, for the tool turns
    turns: list[Turn] = []
    for index, item in enumerate(items):
        number = index + 1
        where = f"line {lines[index]} (turn {number})" if lines else f"turn {number}"
        turns.append(_message(item, number, calls, f"transcript {source} {where}"))
    return turns


def _message(item: Any, number: int, calls: dict[str, str], where: str) -> Turn:
    if not isinstance(item, Mapping):
        raise UsageError(f"{where}: a message is a JSON object, not {type(item).__name__}")
    raw_role = item.get("role")
    role = _ROLES.get(raw_role) if isinstance(raw_role, str) else None
    if role is None:
        raise UsageError(f"{where}: role {str(raw_role)[:40]!r} is not one of {', '.join(_ROLES)}")
    parts = [_content(item.get("content"), where)]
    for call_id, function, arguments in _tool_calls(item.get("tool_calls"), where):
        if call_id:
            calls[call_id] = function
        parts.append(f"[tool call] {function}({arguments})")
    name = item.get("name")
    if role == "tool" and not isinstance(name, str):
        name = calls.get(str(item.get("tool_call_id")))
    text = "\n".join(p for p in parts if p)
    _check_text(text, where)
    return Turn(number, role, text, name if isinstance(name, str) and name else None)


def _content(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise UsageError(f"{where}: content is a string or a list of parts")
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part, Mapping) and isinstance(part.get("type"), str):
            texts.append(f"[{part['type'][:40]}]")
        else:
            raise UsageError(f"{where}: a content part is neither text nor a typed part")
    return "\n".join(texts)


def _tool_calls(value: Any, where: str) -> list[tuple[str, str, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise UsageError(f"{where}: tool_calls is not a list")
    out = []
    for call in value:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise UsageError(f"{where}: a tool call has no function name")
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        out.append((str(call.get("id") or ""), function["name"], arguments))
    return out


def _check_text(text: str, where: str) -> None:
    limit = DEFAULT_LIMITS.value_chars * 10
    if len(text) > limit:
        raise UsageError(f"{where}: {len(text):,} characters, over the bound of {limit:,}")


# ---------------------------------------------------------------- plain text


def _plain(text: str, source: str) -> list[Turn]:
    turns: list[Turn] = []
    role: Role | None = None
    lines: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        found = _TEXT_TURN.match(line)
        if found is not None:
            if role is not None:
                turns.append(_text_turn(len(turns) + 1, role, lines, source))
            role = _ROLES[found.group(1).lower()]
            lines = [found.group(2)]
        elif role is None:
            if line.strip():
                raise UsageError(
                    f"transcript {source} line {number}: expected 'user:' or 'assistant:' "
                    "to start a turn (plain text turns are 'ROLE: text')"
                )
        else:
            lines.append(line)
    if role is not None:
        turns.append(_text_turn(len(turns) + 1, role, lines, source))
    return turns


def _text_turn(number: int, role: Role, lines: list[str], source: str) -> Turn:
    text = "\n".join(lines).strip()
    _check_text(text, f"transcript {source} turn {number}")
    return Turn(number, role, text)
