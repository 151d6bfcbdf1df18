"""Cassettes of an evaluation run: what ``eval --replay`` needs to run a task again.

Each recorded run directory (``runs/<task>-<variant>-<seed>/run/``) gets, beside its
``state.db``:

``recording.json``
    the manifest: the task spec, the variant and its settings, the seed, the model,
    the run's limits, where its environment was built, how it stopped.
``tools.cassette.json``
    every tool call the run's skills made, in order: name, arguments (redacted for
    display) and their digest (of the real ones: what a replay matches on), and the
    output or the error.
``model.cassette.json``
    the model's requests and replies, in the format of
    :class:`~skillstate.llm.replay.ReplayProvider` (none for the oracle: a replay
    rebuilds it, it follows the task's reference plan).

**Recording must not change what the run measures.** The recorders sit between the
runtime and the tools/provider and hand every result through untouched; they only
keep a reference (tool outputs a JSON copy, so a skill that mutates its result cannot
change the record) and do the costly work (redaction, digests, writing) once, after
the run, outside every timed step. The model cassette is written once at the end for
the same reason (:class:`~skillstate.llm.replay.RecordingProvider` rewrites its file
after every call).

**Secrets.** Outputs and arguments pass through the project's redactor
(:mod:`skillstate.state.redact`) before they are written. An output the redactor
changed cannot be served faithfully: it is kept masked, for display only, and a
replay runs the tool instead (``served: false``); so is an output that does not
survive JSON unchanged (a tuple, an object).
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import functools
import hashlib
import inspect
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillstate.errors import UsageError
from skillstate.llm.base import Completion, Message, Provider
from skillstate.llm.replay import cassette_entry, schema_sha
from skillstate.state.redact import Redactor

__all__ = [
    "FORMAT",
    "MANIFEST",
    "MODEL_CASSETTE",
    "TOOL_CASSETTE",
    "ModelRecorder",
    "ToolEntry",
    "ToolRecorder",
    "args_digest",
    "call_arguments",
    "display",
    "load_tool_cassette",
    "model_entry",
    "output_digest",
    "plain_tool",
    "read_json",
    "write_json_atomic",
]

FORMAT = 1
MANIFEST = "recording.json"
TOOL_CASSETTE = "tools.cassette.json"
MODEL_CASSETTE = "model.cassette.json"
_SHOWN = 2000
"""Characters of an output kept for display when it cannot be served."""


def args_digest(args: Mapping[str, Any]) -> str:
    """The sha256 of a tool call's arguments (canonical JSON: sorted keys, compact)."""
    text = json.dumps(
        dict(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def output_digest(value: Any) -> str:
    """The sha256 of a tool output's JSON rendering (a replay's drift check)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_json_atomic(
    path: Path, document: Any, *, indent: int = 1, mode: int | None = None
) -> None:
    """Write ``document`` as JSON to ``path`` through a temporary file and a rename.

    The file keeps the mode of the one it replaces; a new one gets ``mode``, or the
    temporary file's owner-only mode (cassettes hold tool outputs: private, like the
    store beside them).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if mode is not None:
            os.chmod(tmp, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=indent, ensure_ascii=False)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------- the tool cassette


@dataclass(frozen=True)
class ToolEntry:
    """One recorded tool call."""

    tool: str
    args: dict[str, Any]
    """The arguments as written (redacted: for display, not for matching)."""
    args_sha: str
    """Digest of the real arguments (:func:`args_digest`): what a replay matches on."""
    ok: bool
    served: bool
    """A replay returns (or raises) the recorded result instead of running the tool."""
    output: Any = None
    output_sha: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    error_args: list[Any] | None = None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "tool": self.tool,
            "args": self.args,
            "args_sha": self.args_sha,
            "ok": self.ok,
            "served": self.served,
        }
        if self.ok:
            data |= {"output": self.output, "output_sha": self.output_sha}
        else:
            data["error"] = {
                "type": self.error_type,
                "message": self.error_message,
                "args": self.error_args,
            }
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolEntry:
        error = data.get("error") or {}
        ok = bool(data["ok"])
        args = data.get("args", {})
        if not isinstance(data["tool"], str) or not isinstance(args, dict):
            raise TypeError("tool must be a string and args an object")
        return cls(
            tool=data["tool"],
            args=args,
            args_sha=str(data["args_sha"]),
            ok=ok,
            served=bool(data.get("served", False)),
            output=data.get("output"),
            output_sha=data.get("output_sha"),
            error_type=None if ok else str(error.get("type") or "Exception"),
            error_message=None if ok else str(error.get("message") or ""),
            error_args=None if ok else error.get("args"),
        )

    def recorded_error(self) -> Exception:
        """The recorded exception, rebuilt: a built-in type or one already imported
        (nothing is imported on a cassette's word), else a stand-in of the same name."""
        name = self.error_type or "Exception"
        message = self.error_message or ""
        found = _exception_type(name)
        if found is not None and self.error_args is not None:
            try:
                rebuilt = found(*self.error_args)
            except Exception:  # a constructor with other arguments: the stand-in
                rebuilt = None
            if rebuilt is not None and str(rebuilt) == message:
                return rebuilt
        return _stand_in(name.rpartition(".")[2])(message)


def _exception_type(name: str) -> type[Exception] | None:
    module, _, qualname = name.rpartition(".")
    owner: Any = builtins if module in {"", "builtins"} else sys.modules.get(module)
    found = getattr(owner, qualname, None) if owner is not None else None
    return found if isinstance(found, type) and issubclass(found, Exception) else None


@functools.cache
def _stand_in(name: str) -> type[Exception]:
    # Same class name, so "Name: message" in an event reads as it did when recorded.
    return type(name, (RuntimeError,), {"__module__": __name__})


def _qualified(exc: BaseException) -> str:
    kind = type(exc)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _exact_json(value: Any) -> Any:
    """``value``'s JSON copy if it survives JSON unchanged (types included); else raise."""
    copied = json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
    if not _same(value, copied):
        raise TypeError("changes through JSON")
    return copied


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@dataclass
class _Call:
    """A call as it happened, before the post-run work (redaction, digests)."""

    tool: str
    args: dict[str, Any]
    output: Any = None
    exact: bool = True
    error: BaseException | None = None


class ToolRecorder:
    """Wraps an environment's tools; every call goes through unchanged and is noted."""

    def __init__(self) -> None:
        self.calls: list[_Call] = []

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)  # keeps the signature: the raw-tools variants read it
        def call(*args: Any, **kwargs: Any) -> Any:
            noted = _Call(name, call_arguments(fn, args, kwargs))
            self.calls.append(noted)
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                noted.error = exc
                raise
            try:
                noted.output = _exact_json(result)
            except (TypeError, ValueError, RecursionError):
                noted.output, noted.exact = display(result), False
            return result

        return call

    def entries(self, redactor: Redactor) -> list[ToolEntry]:
        return [_entry(call, redactor) for call in self.calls]


def plain_tool(fn: object) -> bool:
    """A plain function (recorded and replayed); a per-task factory or a gated tool is
    left alone: its call goes through the runtime's own machinery."""
    from skillstate.control.gates import Gated
    from skillstate.engine.agent import PerTask

    return callable(fn) and not isinstance(fn, PerTask | Gated)


def call_arguments(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    if not args:
        return copy.deepcopy(kwargs)
    # Skills call tools by keyword (ctx.call); positional calls are named by the signature.
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return copy.deepcopy({**{f"_{i}": a for i, a in enumerate(args)}, **kwargs})
    return copy.deepcopy(dict(bound.arguments))


def display(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def _entry(call: _Call, redactor: Redactor) -> ToolEntry:
    args = redactor.json(call.args)
    sha = args_digest(call.args)
    if call.error is not None:
        exc = call.error
        error_args = None
        with contextlib.suppress(TypeError, ValueError, RecursionError):
            error_args = _exact_json(list(exc.args))
        message = redactor.text(str(exc))
        if error_args is not None and redactor.json(error_args) is not error_args:
            error_args = None  # masked: the rebuilt message would not be the real one
        return ToolEntry(
            tool=call.tool,
            args=args,
            args_sha=sha,
            ok=False,
            served=message == str(exc),
            error_type=_qualified(exc),
            error_message=message,
            error_args=error_args,
        )
    shown = redactor.json(call.output)
    return ToolEntry(
        tool=call.tool,
        args=args,
        args_sha=sha,
        ok=True,
        served=call.exact and shown is call.output,
        output=shown,
        output_sha=output_digest(call.output),
    )


def load_tool_cassette(path: Path) -> list[ToolEntry]:
    """The entries of a tool cassette; a :class:`UsageError` naming the file otherwise."""
    data = read_json(path, "tool cassette")
    calls = data.get("calls") if isinstance(data, dict) else None
    if not isinstance(calls, list):
        raise UsageError(f"tool cassette {str(path)!r} has no list of calls")
    entries: list[ToolEntry] = []
    for number, item in enumerate(calls, start=1):
        try:
            entries.append(ToolEntry.from_json(item))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(
                f"tool cassette {str(path)!r} call {number} is malformed: {exc}"
            ) from None
    return entries


def read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    except RecursionError:
        raise UsageError(f"{what} {str(path)!r} is nested too deeply") from None
    except ValueError as exc:
        raise UsageError(f"{what} {str(path)!r} is not JSON: {exc}") from None


# ---------------------------------------------------------------------- the model cassette


class ModelRecorder:
    """Wraps a provider; each reply goes back unchanged and is kept for the cassette."""

    def __init__(
        self, inner: Provider, sink: list[tuple[list[Message], str | None, int | None, Completion]]
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._sink = sink

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        completion = self.inner.complete(messages, schema=schema, max_tokens=max_tokens)
        self._sink.append((list(messages), schema_sha(schema), max_tokens, completion))
        return completion


def model_entry(
    messages: list[Message], sha: str | None, max_tokens: int | None, completion: Completion
) -> dict[str, Any]:
    """The cassette entry of one recorded reply, in :class:`ReplayProvider`'s format."""
    return cassette_entry(messages, sha, max_tokens, completion)
