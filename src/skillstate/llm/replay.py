"""Providers that need no model: recorded replies, and replies computed by a function.

A run against a real model is slow, costs money and is not reproducible (servers
change, sampling is not bit-exact across hardware). So a run can be *recorded*
once with :class:`RecordingProvider` into a cassette, a JSON file holding each
request and its reply, and *replayed* any number of times with
:class:`ReplayProvider`, which checks that the run asks exactly what it asked
when recorded. A replay whose requests drift (a prompt view changed, a schema
gained a field) fails loudly on the first differing entry instead of quietly
feeding replies to the wrong questions.

:class:`ScriptedProvider` is the in-process "model" of benchmarks and tests: a
Python function decides each reply, so a model policy can be driven through its
whole loop (prompting, parsing, repairs) deterministically.

Cassette format (a JSON list, one entry per call, in call order)::

    [{"request": {"messages": [{"role": "system", "content": "..."}, ...],
                  "schema_sha": "9f2c...",   # sha256 of the canonical schema, or null
                  "max_tokens": 200},        # or null
      "response": {"text": "{...}",
                   "usage": {"prompt": 512, "completion": 41, "cached": 0,
                             "estimated": false},
                   "model": "gpt-4o-mini-2024-07-18",
                   "duration_ms": 812.5}}]   # informational; replays take ~0 ms

Only the schema's hash is stored: schemas are large, identical across calls, and
all a replay needs to know is whether the schema changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from skillstate.errors import ProviderError, UsageError
from skillstate.llm.base import Completion, Message, Provider, Usage, count_messages
from skillstate.llm.tokens import count_tokens

__all__ = [
    "RecordingProvider",
    "ReplayProvider",
    "ScriptRule",
    "ScriptedProvider",
    "cassette_entry",
    "schema_sha",
]

ScriptRule = Callable[[Sequence[Message], dict[str, Any] | None], str]
"""``rule(messages, schema) -> reply text`` for :class:`ScriptedProvider`."""

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_SNIPPET = 40
"""Characters of context shown around the first difference in a mismatch error."""


def schema_sha(schema: dict[str, Any] | None) -> str | None:
    """The sha256 of ``schema``'s canonical JSON (sorted keys, compact), or ``None``.

    Canonical so that a schema rebuilt with its keys in another order still matches.
    """
    if schema is None:
        return None
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _request(
    messages: Sequence[Message], schema: dict[str, Any] | None, max_tokens: int | None
) -> dict[str, Any]:
    return {
        "messages": [m.as_dict() for m in messages],
        "schema_sha": schema_sha(schema),
        "max_tokens": max_tokens,
    }


def cassette_entry(
    messages: Sequence[Message], sha: str | None, max_tokens: int | None, completion: Completion
) -> dict[str, Any]:
    """One cassette entry: the request (``sha``: its schema's :func:`schema_sha`) and the
    reply, as :class:`RecordingProvider` writes it and :class:`ReplayProvider` reads it."""
    return {
        "request": {
            "messages": [m.as_dict() for m in messages],
            "schema_sha": sha,
            "max_tokens": max_tokens,
        },
        "response": {
            "text": completion.text,
            "usage": _usage_dict(completion.usage),
            "model": completion.model,
            "duration_ms": round(completion.duration_ms, 3),
        },
    }


def _usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt": usage.prompt,
        "completion": usage.completion,
        "cached": usage.cached,
        "estimated": usage.estimated,
    }


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# ---------------------------------------------------------------------- replay


class ReplayProvider:
    """Plays a cassette's replies back, in order, checking each request against it.

    The cassette is read once, at construction. Each :meth:`complete` must send
    the same messages, schema (by hash) and ``max_tokens`` as the entry it
    consumes; otherwise it raises :class:`ProviderError` naming the entry and the
    first difference, and the entry stays unconsumed.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = f"replay:{self.path.name}"
        self._entries = _load_cassette(self.path)
        self._next = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """Entries not replayed yet (a finished replay of the same run leaves 0)."""
        return len(self._entries) - self._next

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        started = time.perf_counter()
        with self._lock:
            index = self._next
            if index >= len(self._entries):
                raise ProviderError(
                    f"{self.name}: request {index + 1} is past the end of the recording "
                    f"({len(self._entries)} entries)"
                )
            entry = self._entries[index]
            difference = _difference(entry["request"], _request(messages, schema, max_tokens))
            if difference is not None:
                raise ProviderError(
                    f"{self.name}: entry {index + 1} of {len(self._entries)} does not match "
                    f"the request: {difference}"
                )
            self._next += 1
        response = entry["response"]
        raw: dict[str, Any] = {"cassette_entry": index + 1}
        if "duration_ms" in response:
            raw["recorded_duration_ms"] = response["duration_ms"]
        return Completion(
            text=response["text"],
            usage=response["usage"],
            model=response["model"],
            duration_ms=(time.perf_counter() - started) * 1000,
            raw=raw,
        )


def _load_cassette(path: Path) -> list[dict[str, Any]]:
    """The cassette's entries, validated up front so a bad file fails before the run.

    Usage is turned into :class:`Usage` here, once. The cassette is named by the
    operator (``--model replay:FILE``): a file that is not one is bad input
    (:class:`~skillstate.errors.UsageError`, exit 2), not a failed model call.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read cassette {str(path)!r}: {_one_line(exc)}") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"cassette {str(path)!r} is not JSON: {_one_line(exc)}") from exc
    except ValueError as exc:  # not UTF-8, or an integer past the int-string limit
        reason = "it holds an integer too long to read" if "digits" in str(exc) else exc
        raise UsageError(f"cassette {str(path)!r} is not JSON: {reason}") from exc
    except RecursionError:
        raise UsageError(f"cassette {str(path)!r} is nested too deeply") from None
    if not isinstance(data, list):
        raise UsageError(f"cassette {str(path)!r} is not a JSON list of entries")
    entries: list[dict[str, Any]] = []
    for number, item in enumerate(data, start=1):
        try:
            entries.append(_parse_entry(item))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(
                f"cassette {str(path)!r} entry {number} is malformed: {_one_line(exc)}"
            ) from exc
    return entries


def _parse_entry(item: Any) -> dict[str, Any]:
    request, response = item["request"], item["response"]
    messages = request["messages"]
    if not isinstance(messages, list):
        raise TypeError("request.messages is not a list")
    for message in messages:
        if message["role"] not in _ROLES or not isinstance(message["content"], str):
            raise ValueError(f"bad message {message!r}")
    if not isinstance(response["text"], str):
        raise TypeError("response.text is not a string")
    usage = response.get("usage")
    usage = {} if usage is None else usage
    if not isinstance(usage, dict):
        raise TypeError("response.usage is not an object")
    parsed_usage = Usage(
        prompt=_count(usage, "prompt"),
        completion=_count(usage, "completion"),
        cached=_count(usage, "cached"),
        estimated=bool(usage.get("estimated", False)),
    )
    parsed_response: dict[str, Any] = {
        "text": response["text"],
        "usage": parsed_usage,
        "model": str(response.get("model", "")),
    }
    if "duration_ms" in response:
        parsed_response["duration_ms"] = response["duration_ms"]
    return {
        "request": {
            "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
            "schema_sha": request.get("schema_sha"),
            "max_tokens": request.get("max_tokens"),
        },
        "response": parsed_response,
    }


def _count(usage: dict[str, Any], name: str) -> int:
    """A token count of a recorded usage: a whole number, not negative (nor a bool)."""
    value = usage.get(name, 0)
    if type(value) is not int or value < 0:
        raise ValueError(f"usage.{name} is not a token count: {str(value)[:40]!r}")
    return value


def _difference(recorded: dict[str, Any], actual: dict[str, Any]) -> str | None:
    """The first way ``actual`` differs from ``recorded``, in words, or ``None``."""
    old, new = recorded["messages"], actual["messages"]
    if len(old) != len(new):
        return f"{len(new)} messages sent, {len(old)} recorded"
    for number, (was, now) in enumerate(zip(old, new, strict=True), start=1):
        if was["role"] != now["role"]:
            return f"message {number} has role {now['role']!r}, recorded {was['role']!r}"
        if was["content"] != now["content"]:
            where = _text_difference(was["content"], now["content"])
            return f"message {number} ({now['role']}) content {where}"
    if recorded["schema_sha"] != actual["schema_sha"]:
        if recorded["schema_sha"] is None:
            return "a schema was sent, none recorded"
        if actual["schema_sha"] is None:
            return "no schema was sent, one was recorded"
        return (
            f"schema differs (sha256 {actual['schema_sha'][:12]}…, "
            f"recorded {recorded['schema_sha'][:12]}…)"
        )
    if recorded["max_tokens"] != actual["max_tokens"]:
        return f"max_tokens is {actual['max_tokens']}, recorded {recorded['max_tokens']}"
    return None


def _text_difference(was: str, now: str) -> str:
    """Where two texts first differ, with a little context from each (``repr``: one line)."""
    at = next(
        (i for i, (a, b) in enumerate(zip(was, now, strict=False)) if a != b),
        min(len(was), len(now)),
    )
    start = max(0, at - _SNIPPET // 2)
    return (
        f"differs at character {at}: got {now[start : start + _SNIPPET]!r}, "
        f"recorded {was[start : start + _SNIPPET]!r}"
    )


# ---------------------------------------------------------------------- record


class RecordingProvider:
    """Wraps ``inner`` and writes each request and reply to a cassette at ``path``.

    The cassette is rewritten atomically (temporary file, fsync, rename) after
    every call, so a run that crashes halfway leaves a valid cassette of the
    calls made so far. It starts empty: an existing file at ``path`` is replaced.
    Failed calls raise as usual and are not recorded. ``name`` is the inner
    provider's, so reports of a recorded run read like those of a plain one.
    """

    def __init__(self, inner: Provider, path: str | os.PathLike[str]) -> None:
        self.inner = inner
        self.path = Path(path)
        self.name = inner.name
        self._entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._write()  # fail now, not after the first (possibly paid) call

    @property
    def recorded(self) -> int:
        """Calls recorded so far."""
        return len(self._entries)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        completion = self.inner.complete(messages, schema=schema, max_tokens=max_tokens)
        entry = cassette_entry(messages, schema_sha(schema), max_tokens, completion)
        with self._lock:
            self._entries.append(entry)
            self._write()
        return completion

    def _write(self) -> None:
        text = json.dumps(self._entries, ensure_ascii=False, indent=2) + "\n"
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise ProviderError(
                f"cannot write cassette {str(self.path)!r}: {_one_line(exc)}"
            ) from exc


# ---------------------------------------------------------------------- scripted


class ScriptedProvider:
    """A deterministic "model" whose replies come from ``rule(messages, schema)``.

    Usage is counted offline (``estimated=True``) with the same tokenizer as the
    views, so token accounting in benchmarks behaves as it would with a model
    that reports nothing. ``max_tokens`` is not enforced: the rule is trusted.
    A :class:`ProviderError` raised by the rule passes through, which is how a
    test simulates a failing model; the rule's other exceptions are bugs and
    propagate unchanged.
    """

    def __init__(self, rule: ScriptRule, *, name: str = "scripted") -> None:
        self.rule = rule
        self.name = name
        self.calls = 0

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        started = time.perf_counter()
        self.calls += 1
        text = self.rule(messages, schema)
        if not isinstance(text, str):
            raise TypeError(f"scripted rule returned {type(text).__name__}, not str")
        usage = Usage(
            prompt=count_messages(messages), completion=count_tokens(text), estimated=True
        )
        return Completion(
            text=text,
            usage=usage,
            model=self.name,
            duration_ms=(time.perf_counter() - started) * 1000,
        )
