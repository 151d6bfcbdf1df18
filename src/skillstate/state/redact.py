"""Redaction: replace secrets by ``"***"`` wherever text leaves the process.

Sealing (:mod:`skillstate.state.secrets`) protects the sensitive *fields* of the card.
A skill still uses the plaintext, and it can travel from there into a tool call's
arguments, a tool's raw output, an error message or a verify reason, all of which
end up in events, artifacts and logs. Secrets also arrive from outside: a token a
tool returns, a phone number a user typed. A :class:`Redactor` scrubs both::

    redactor = RedactionPolicy().redactor(secret_values(state))
    document = redactor.json(document)   # the same object back when nothing matched
    event = redactor.event(event)
    raw = redactor.bytes(raw)

Three things are masked:

* **exact values**: the plaintext of sensitive fields (shorter than
  :data:`MIN_SECRET` characters they are skipped: replacing every ``"on"`` or
  ``"42"`` would mangle the log and hide nothing) and the literal strings of
  ``extra_values`` (any length: someone asked for them);
* **values by shape** (:data:`~skillstate.state.detectors.DETECTORS`: bearer
  tokens, JWTs, API keys, Luhn-valid card numbers, phones, national IDs) inside
  any string, in place: ``"call me at ***"``. A JSON integer whose digits are a
  secret or a detected number becomes the string ``"***"``;
* **values by key name** (:data:`~skillstate.state.detectors.DEFAULT_NAMES`): the
  whole value under a matching JSON key (or of a JSON Patch op whose ``path`` goes
  through one) becomes the string ``"***"``. **This changes the type** of a number,
  list or object; ``null``, booleans and empty values are kept (they hide nothing).
  In free text, the value of ``name=value`` and ``name: value`` is masked likewise.

Sealed values (``enc:v1:...``) are ciphertext: they are never touched, so masking a
state document cannot destroy a sensitive field.

``Redactor(values)`` without a policy masks exact values only, as it always has.
``bool(redactor)`` says whether it has anything to do, which is always true under a
policy with detectors; the cheap no-op test is identity instead: every method
returns its argument itself (no copy) when nothing was masked.
"""

from __future__ import annotations

import builtins
import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any, ClassVar, TypeVar

from skillstate.events import Event, ToolCall
from skillstate.state.detectors import (
    ASSIGNMENT,
    ASSIGNMENT_MIN,
    CONTEXT_CHARS,
    DEEP,
    DEFAULT_NAMES,
    DETECTORS,
    NOT_SENSITIVE,
    SHALLOW,
    SHALLOW_NAMES,
    Detector,
    NameMatcher,
    combine,
)
from skillstate.state.secrets import MASK, PREFIX

__all__ = ["MIN_SECRET", "RedactionPolicy", "Redactor"]

MIN_SECRET = 4
"""Exact values shorter than this are not redacted (see the module docstring)."""

J = TypeVar("J")


@dataclass(frozen=True)
class RedactionPolicy:
    """What to mask beyond exact secret values: key names and value shapes.

    ``RedactionPolicy()`` is the default set; ``RedactionPolicy.OFF`` masks nothing
    by pattern (only the exact secrets a redactor is given). Lists passed for any
    field are stored as tuples, so a policy is hashable and its compiled form is
    built once and shared.
    """

    names: tuple[str, ...] = DEFAULT_NAMES
    """Key names whose values are masked whole (trailing-word match, case-insensitive)."""
    values: tuple[Detector, ...] = DETECTORS
    """Value detectors applied inside every string; see :meth:`without`."""
    extra_names: tuple[str, ...] = ()
    """Names added to :attr:`names` (use this to keep the defaults)."""
    extra_values: tuple[str | re.Pattern[str] | Detector, ...] = ()
    """Additions: a ``str`` is a literal value, a compiled regex is masked where it matches."""
    exempt_names: tuple[str, ...] = ()
    """Names never masked by name (same trailing-word match); values inside are still scanned."""
    shallow_names: tuple[str, ...] = SHALLOW_NAMES
    """Names (of :attr:`names` and :attr:`extra_names`) that mask a plain value but not a
    structure: an object under one is judged key by key and value by value. Under any
    other name every leaf is masked (see :data:`~skillstate.state.detectors.SHALLOW_NAMES`)."""
    assignments: bool = True
    """In free text, mask ``value`` in ``name=value``/``name: value`` when ``name`` matches."""

    OFF: ClassVar[RedactionPolicy]
    """No pattern redaction at all: only exact secrets."""

    def __post_init__(self) -> None:
        for name in (
            "names",
            "values",
            "extra_names",
            "extra_values",
            "exempt_names",
            "shallow_names",
        ):
            value = getattr(self, name)
            if isinstance(value, (str, Detector, re.Pattern)):
                raise TypeError(f"RedactionPolicy.{name} takes a sequence, not a single item")
            object.__setattr__(self, name, tuple(value))

    @classmethod
    def off(cls) -> RedactionPolicy:
        """A policy that masks only exact secrets (the behaviour before policies)."""
        return cls(names=(), values=(), assignments=False)

    def without(self, *detectors: str) -> RedactionPolicy:
        """This policy without the named value detectors (``"phone_cn"``, ``"card_number"``)."""
        known = {d.name for d in self.values}
        unknown = sorted(set(detectors) - known)
        if unknown:
            raise ValueError(f"unknown detector(s) {unknown}; this policy has {sorted(known)}")
        return replace(self, values=tuple(d for d in self.values if d.name not in detectors))

    def redactor(self, secrets: Iterable[str] = ()) -> Redactor:
        """A :class:`Redactor` for ``secrets`` (exact values) and everything this policy detects.

        Built once per set of secrets and kept on the policy (a redactor is immutable):
        a runtime asks for one several times per step with the same task's secrets,
        and building one sorts, escapes and compiles them all again.
        """
        key = frozenset(secrets)
        cache: dict[frozenset[str], Redactor] = self.__dict__.setdefault("_redactors", {})
        found = cache.get(key)
        if found is None:
            if len(cache) >= _REDACTORS_KEPT:
                cache.clear()  # secrets rotated many times: start over rather than grow
            found = cache[key] = Redactor(key, policy=self)
        return found

    def __getstate__(self) -> dict[str, Any]:
        # The caches stay behind: they hold the secrets in plain text.
        return {k: v for k, v in self.__dict__.items() if k not in ("_compiled", "_redactors")}

    def masks_name(self, name: str) -> bool:
        """Whether a plain value under a key called ``name`` is masked."""
        return bool(_compile(self).names[name])


RedactionPolicy.OFF = RedactionPolicy.off()

# ---------------------------------------------------------------- compiled form

_NOT_SECRET = frozenset({"null", "none", "true", "false", MASK})
"""Values ``name=value`` masking leaves alone: they hide nothing."""

_Span = tuple[int, int, int]
"""(mask start, mask end, resume the scan at)."""


def _sub(
    s: str,
    rx: re.Pattern[str],
    m: re.Match[str] | None,
    judge: Callable[[str, re.Match[str]], _Span | None],
) -> str:
    """``s`` with the spans ``judge`` accepts among ``rx``'s matches (from ``m``) masked."""
    out: list[str] = []
    last = 0
    while m is not None:
        span = judge(s, m)
        if span is None:
            # Rejected: a real secret may still start inside the look-alike.
            m = rx.search(s, m.start() + 1)
            continue
        a, b, resume = span
        out += (s[last:a], MASK)
        last = b
        m = rx.search(s, max(resume, a + 1))
    if not out:
        return s
    out.append(s[last:])
    return "".join(out)


class _Compiled:
    """A policy turned into regexes and a name matcher (one per policy, cached)."""

    def __init__(self, policy: RedactionPolicy) -> None:
        self.names = NameMatcher(
            policy.names + policy.extra_names, policy.exempt_names, policy.shallow_names
        )
        extras = policy.extra_values
        self.literals = tuple(v for v in extras if isinstance(v, str) and v)
        self.patterns = tuple(v for v in extras if isinstance(v, re.Pattern))
        found = (*policy.values, *(v for v in extras if isinstance(v, Detector)))
        self.detectors: tuple[Detector, ...] = found
        self.assign = policy.assignments and self.names.active
        lengths = [d.min_length for d in found] + [ASSIGNMENT_MIN] * self.assign
        self.min_length = 1 if self.patterns else min(lengths, default=1 << 30)
        try:
            self.singles = tuple(re.compile(d.pattern) for d in found)
            self.passes = combine(found)
        except re.error as exc:
            raise ValueError(f"a redaction detector pattern does not compile: {exc}") from exc

    def scan(self, s: str, keys: tuple[str, ...] = ()) -> str:
        """``s`` with detected values (and, in free text, ``name=value`` values) masked.

        ``keys`` are the JSON keys ``s`` sits under (its own, its parent's): context
        for the detectors that need it. Repeated until nothing changes, which makes
        redaction idempotent: a number skipped because it touched another
        ("13812345678 4000 0566 5566 5556") is taken once its neighbour has become ``***``.
        """
        hit = self._hit if not keys else functools.partial(self._hit, keys=keys)
        for _ in range(4):
            clean = s
            for rx in self.passes:
                m = rx.search(clean)  # the common case, no candidate at all, costs one C call
                if m is not None:
                    clean = _sub(clean, rx, m, hit)
            if self.assign and ("=" in clean or ":" in clean):
                m = ASSIGNMENT.search(clean)
                clean = clean if m is None else _sub(clean, ASSIGNMENT, m, self._assignment)
            for pattern in self.patterns:
                clean = pattern.sub(MASK, clean)
            if clean is s or clean == s:
                break
            s = clean
        return s

    def _hit(self, s: str, m: re.Match[str], keys: tuple[str, ...] = ()) -> _Span | None:
        """Where to mask for the match ``m``, or ``None`` for a look-alike.

        When the detector that matched rejects it, the later ones get a chance at the
        same position (an 18-digit run failing the ID checksum may be a card number).
        """
        first = int(m.lastgroup[1:]) if m.lastgroup else 0
        for i in range(first, len(self.detectors)):
            found = m if i == first else self.singles[i].match(s, m.start())
            if found is None:
                continue
            d = self.detectors[i]
            if d.validate is not None and not d.validate(found.group(0)):
                continue
            if d.context is not None and not _in_context(d.context, s, found, keys):
                continue
            a, b = found.span(d.secret_group) if d.secret_group else found.span()
            return a, b, found.end()
        return None

    def _assignment(self, s: str, m: re.Match[str]) -> _Span | None:
        group = "dq" if m.group("dq") is not None else "sq" if m.group("sq") is not None else "bare"
        a, b = m.span(group)
        if s[a:b].lower() in _NOT_SECRET or not self.names[s[m.start() : m.end("key")]]:
            return None
        return a, b, m.end()


def _in_context(context: re.Pattern[str], s: str, m: re.Match[str], keys: tuple[str, ...]) -> bool:
    """Whether the match ``m`` in ``s`` is written in groups, or ``context`` is found just
    before it or in the keys it sits under."""
    hit = m.group(0)
    return (
        " " in hit
        or "-" in hit
        or context.search(s, max(0, m.start() - CONTEXT_CHARS), m.start()) is not None
        or any(context.search(k) is not None for k in keys)
    )


def _compile(policy: RedactionPolicy) -> _Compiled:
    # Kept on the policy itself: an lru_cache would hash the whole (frozen) policy,
    # every detector in it, on each call, which cost more than the scans it saves.
    compiled: _Compiled | None = policy.__dict__.get("_compiled")
    if compiled is None:
        compiled = _Compiled(policy)
        object.__setattr__(policy, "_compiled", compiled)
    return compiled


_CLEAN_LEN = 256
"""Strings up to this long are remembered as clean once scanned (see ``Redactor.text``)."""
_CLEAN_KEPT = 8192
"""At most this many per redactor; then it starts over rather than grow."""

_REDACTORS_KEPT = 64
"""Redactors a policy keeps, one per distinct set of secrets (see ``redactor``)."""


_SEALED = re.compile(re.escape(PREFIX) + r"[A-Za-z0-9_-]{98,}={0,2}")
"""A sealed value (:func:`~skillstate.state.secrets.is_sealed`'s shape, cheaply): never
masked. The prefix alone is not enough, or ``enc:v1:`` would hide anything after it."""


def _variants(secret: str) -> set[str]:
    """The secret as it appears raw and inside JSON text (escaped, ASCII-escaped)."""
    return {
        secret,
        json.dumps(secret, ensure_ascii=False)[1:-1],
        json.dumps(secret, ensure_ascii=True)[1:-1],
    }


def _pointer_keys(path: str) -> Iterable[str]:
    """The keys of a JSON Pointer (``/a/b~1c`` -> ``a``, ``b/c``)."""
    return (p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:])


# ---------------------------------------------------------------- the redactor


class Redactor:
    """Replaces exact secrets, and what a :class:`RedactionPolicy` detects, by ``"***"``.

    Longer secrets are matched first, so a secret that contains another is
    replaced whole rather than leaving its remainder behind. Every method returns
    its argument itself when nothing was masked; containers are copied only along
    the paths that changed (unchanged subtrees are shared with the input).
    """

    def __init__(self, secrets: Iterable[str] = (), policy: RedactionPolicy | None = None) -> None:
        self._c = _compile(policy) if policy is not None else None
        forms = {v for s in secrets if len(s) >= MIN_SECRET for v in _variants(s)}
        if self._c is not None:
            forms |= {v for s in self._c.literals for v in _variants(s)}
        ordered = sorted(forms, key=lambda s: (-len(s), s))
        self._secrets: tuple[str, ...] = tuple(ordered)
        self._exact = frozenset(ordered)
        self._text: re.Pattern[str] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        if ordered:
            # One alternation scans the input once, whatever the number of secrets.
            self._text = re.compile("|".join(re.escape(s) for s in ordered))
            raw = sorted({s.encode("utf-8") for s in ordered}, key=lambda b: (-len(b), b))
            self._bytes = re.compile(b"|".join(re.escape(b) for b in raw))
        c = self._c
        self._names = c.names if c is not None and c.names.active else None
        self._scan = c is not None and (bool(c.passes) or c.assign or bool(c.patterns))
        # Strings shorter than this cannot hold anything to mask: skipped unscanned.
        self._min = min([*(len(s) for s in ordered), c.min_length if c and self._scan else 1 << 30])
        self._clean: set[tuple[str, tuple[str, ...]]] = set()
        self._ops: dict[tuple[Any, ...], int] = {}
        """Patch operations by (op, path, keys) whose op and path hold nothing to mask:
        how sensitive their value is (see :meth:`_op`)."""
        """Short strings (with the keys they sat under) already found to hold nothing
        to mask. A redactor's answer for a string never changes: it is immutable."""

    def __bool__(self) -> bool:
        return self._text is not None or self._scan or self._names is not None

    def __repr__(self) -> str:
        # Never the values themselves: a repr is exactly what ends up in a log.
        extra = ""
        if self._c is not None:
            extra = f", {len(self._c.detectors)} detectors, names={bool(self._names)}"
        return f"Redactor({len(self._secrets)} forms{extra})"

    # ---- text

    def text(self, s: str, keys: tuple[str, ...] = ()) -> str:
        """``s`` with every secret and every detected value replaced by ``"***"``.

        ``keys``: the JSON keys ``s`` sits under, context for detectors that need it."""
        if len(s) < self._min:
            return s
        clean = self._clean
        if (s, keys) in clean:
            return s
        if self._c is not None and _SEALED.fullmatch(s) is not None:
            return s
        out = s if self._text is None else self._text.sub(MASK, s)  # ``s`` itself if no match
        if self._c is not None and self._scan:
            out = self._c.scan(out, keys)
        if out is s and len(s) <= _CLEAN_LEN:
            # The same short strings come back every step (patch ops and paths, skill
            # and step names, record keys): each is scanned once per redactor.
            if len(clean) >= _CLEAN_KEPT:
                clean.clear()
            clean.add((s, keys))
        return out

    # ---- bytes

    def bytes(self, b: builtins.bytes) -> builtins.bytes:
        """Raw bytes (a tool's output artifact) with secrets masked.

        Without a policy: every secret's UTF-8 form is replaced, byte for byte. With
        one: JSON is parsed and masked like :meth:`json` (by name and value), then
        written again (``indent=1`` when the input had line breaks); anything else is
        masked by value only, in place. Invalid UTF-8 bytes pass through unchanged.
        """
        if self._c is None:
            if self._bytes is None:
                return b
            return self._bytes.sub(MASK.encode("ascii"), b)
        text = b.decode("utf-8", "surrogateescape")
        if text.lstrip()[:1] in ("{", "[", '"'):
            try:
                doc = json.loads(text)
            except ValueError:
                pass
            else:
                clean = self._json(doc)
                if clean is doc:
                    return b
                indent = 1 if "\n" in text else None
                out = json.dumps(clean, ensure_ascii=False, indent=indent)
                return out.encode("utf-8", "surrogateescape")
        clean_text = self.text(text)
        return b if clean_text is text else clean_text.encode("utf-8", "surrogateescape")

    # ---- JSON

    def json(self, value: J) -> J:
        """``value`` (JSON-like) with strings redacted and values under sensitive keys masked.

        Dict keys are redacted by value too. Returns ``value`` itself when nothing
        was masked, else a copy that shares the unchanged parts.
        """
        if not self:
            return value
        return self._json(value)  # type: ignore[no-any-return]

    def _json(self, value: Any, keys: tuple[str, ...] = ()) -> Any:
        if isinstance(value, str):
            return value if len(value) < self._min else self.text(value, keys)
        if isinstance(value, dict):
            return self._dict(value, keys)
        if isinstance(value, (list, tuple)):
            return self._items(value, lambda item: self._json(item, keys))
        if isinstance(value, int) and not isinstance(value, bool) and self._c is not None:
            return self._int(value, keys)
        if hasattr(value, "model_dump"):
            return self._json(value.model_dump(mode="json"), keys)
        return value

    @staticmethod
    def _items(value: list[Any] | tuple[Any, ...], clean: Callable[[Any], Any]) -> Any:
        """``value`` with ``clean`` applied to each item; itself when nothing changed."""
        out: list[Any] | None = None
        for i, item in enumerate(value):
            new = clean(item)
            if out is None:
                if new is item:
                    continue
                out = list(value[:i])
            out.append(new)
        if out is None:
            return value
        return out if isinstance(value, list) else tuple(out)

    def _int(self, value: int, keys: tuple[str, ...] = ()) -> Any:
        # A phone or card number stored as a JSON number; small ints are counters.
        if -1000 < value < 1000:
            return value
        t = str(value)
        if t in self._exact or (len(t) >= self._min and self._scan and self.text(t, keys) is not t):
            return MASK
        return value

    def _dict(self, value: dict[Any, Any], keys: tuple[str, ...] = ()) -> dict[Any, Any]:
        if not keys and "op" in value and "path" in value:
            return self._op(value)
        return self._object(value, keys)

    def _op(self, op: dict[Any, Any]) -> dict[Any, Any]:
        """A JSON Patch operation: its value redacted, its ``op`` and ``path`` scanned
        once per redactor (a commit's patch names the same few paths step after step).

        Remembered per (op, path, keys): that the op and path (and the key names)
        hold nothing to mask, and how sensitive the value is by its path. The value
        itself is always redacted, exactly as :meth:`_object` would.
        """
        try:
            sig = (op["op"], op["path"], *op)
            level = self._ops.get(sig)
        except TypeError:  # an op or path that is not text: no shortcut
            return self._object(op)
        if level is None:
            out = self._object(op)
            unchanged = all(k in out and out[k] is v for k, v in op.items() if k != "value")
            if unchanged and ("value" not in op or "value" in out):
                whole = self._patch_level(op) if self._names is not None else NOT_SENSITIVE
                named = self._names["value"] if self._names is not None else NOT_SENSITIVE
                if len(self._ops) >= _CLEAN_KEPT:
                    self._ops.clear()
                self._ops[sig] = whole or named
            return out
        if "value" not in op:
            return op
        v = op["value"]
        nv = self._whole(v, level, ("value",)) if level else self._json(v, ("value",))
        return op if nv is v else {**op, "value": nv}

    def _object(self, value: dict[Any, Any], keys: tuple[str, ...] = ()) -> dict[Any, Any]:
        names, shortest = self._names, self._min  # locals: this loop is the hot path
        whole = self._patch_level(value) if names is not None else NOT_SENSITIVE
        parent = keys[:1]
        out: dict[Any, Any] | None = None
        for i, (k, v) in enumerate(value.items()):
            if isinstance(k, str):
                nk = k if len(k) < shortest else self.text(k)
                level = names[k] if names is not None else NOT_SENSITIVE
                if whole and k == "value":
                    level = whole
                nv = self._whole(v, level, (k, *parent)) if level else self._json(v, (k, *parent))
            else:
                nk, nv = k, self._json(v, keys)
            if out is None:
                if nk is k and nv is v:
                    continue
                out = dict(islice(value.items(), i))
            out[nk] = nv
        return value if out is None else out

    def _patch_level(self, op: dict[Any, Any]) -> int:
        """For a JSON Patch op, how sensitive its ``value`` is by the keys of its ``path``:
        a credential anywhere on the path, or a :data:`SHALLOW` name as its last key."""
        names = self._names
        path = op.get("path") if "value" in op and "op" in op else None
        if names is None or not isinstance(path, str):
            return NOT_SENSITIVE
        keys = list(_pointer_keys(path))
        if any(names[k] == DEEP for k in keys):
            return DEEP
        while keys and (keys[-1].isdigit() or keys[-1] == "-"):
            keys.pop()  # an item of a list under the name is a plain value under it
        return SHALLOW if keys and names[keys[-1]] == SHALLOW else NOT_SENSITIVE

    def _whole(self, v: Any, level: int, keys: tuple[str, ...]) -> Any:
        """What a value under a sensitive key becomes.

        A plain value becomes ``"***"`` unless it hides nothing (``null``, booleans,
        empties, ciphertext). A structure keeps its shape: under a credential every
        leaf is masked; under a :data:`SHALLOW` name (``credit_card``, ``phone``) an
        object is judged key by key and value by value, like any other.
        """
        if v is None or isinstance(v, bool) or v in ("", MASK, {}, []):
            return v
        if isinstance(v, str) and _SEALED.fullmatch(v) is not None:
            return v  # sealed: ciphertext already, and the card needs it back
        if isinstance(v, (list, tuple)):
            return self._items(v, lambda item: self._whole(item, level, keys))
        if isinstance(v, dict):
            if level == SHALLOW:
                return self._dict(v, keys)
            out = {k: self._whole(item, level, keys) for k, item in v.items()}
            return v if all(out[k] is item for k, item in v.items()) else out
        if hasattr(v, "model_dump"):
            return self._whole(v.model_dump(mode="json"), level, keys)
        return MASK

    # ---- events

    def event(self, e: Event, *, patch_clean: bool = False) -> Event:
        """``e`` with its action, tool calls, error, verdict, transition and patch redacted.

        ``patch_clean``: the caller already found nothing to mask in the patch.
        """
        if not self:
            return e
        update: dict[str, Any] = {}
        action = self._json(e.action)
        if action is not e.action:
            update["action"] = action
        calls = tuple(self._call(call) for call in e.tool_calls)
        if any(new is not old for new, old in zip(calls, e.tool_calls, strict=True)):
            update["tool_calls"] = calls
        if e.error is not None and (error := self.text(e.error)) is not e.error:
            update["error"] = error
        if e.reason is not None and (why := self.text(e.reason)) is not e.reason:
            update["reason"] = why  # a person may paste a secret into --reason
        patch = e.patch if patch_clean else self._json(e.patch)
        if patch is not e.patch:
            update["patch"] = patch
        if (
            e.verdict is not None
            and (reason := self.text(e.verdict.reason)) is not e.verdict.reason
        ):
            update["verdict"] = e.verdict.model_copy(update={"reason": reason})
        t = e.skill_transition
        if t is not None and (reason := self.text(t.reason)) is not t.reason:
            update["skill_transition"] = t.model_copy(update={"reason": reason})
        # model_copy skips validation: every value above keeps its validated type.
        return e.model_copy(update=update) if update else e

    def _call(self, call: ToolCall) -> ToolCall:
        args = self._json(call.args)
        summary = self.text(call.summary)
        if args is call.args and summary is call.summary:
            return call
        return call.model_copy(update={"args": args, "summary": summary})
