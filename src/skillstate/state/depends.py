"""What a step read and wrote, and which later steps a stale one takes with it.

A step's record keeps the paths of the card its skill declared it ``reads`` and the
dotted paths it wrote (:class:`~skillstate.state.model.StepRecord`). When a step
goes stale (its fingerprint changed), every later step that read something a stale
step wrote is stale too, transitively: its result was computed from a value the
world no longer backs. The rules, in one place:

* Paths overlap when one is the other or a prefix of it at a dot: ``report``
  covers ``report.title``. A read that names neither ``facts`` nor a path under it
  also covers the fact of that key (``total`` covers ``facts.total``), as the view
  reads ``reads`` (:func:`skillstate.state.view_text._fields`).
* A skill that declares no ``reads`` depends on **every** step before it that can
  go stale: nothing says it did not read their results, so it is not trusted.
  Declare ``reads`` to narrow it.
* A later step that **wrote** a path a stale step wrote is stale too (its own
  value would otherwise be overwritten when the stale step's writes are put back).
* Only skill steps are redone: a question, a revision or a finish is not.
* A record from before card version 6 goes stale only as it did then: when its own
  fingerprint changed (its ``writes`` are its ``undo``'s paths), or as a dependent
  when it kept an ``undo`` (its ``reads`` are unknown: it depends on everything).

Which steps keep their ``undo`` (the values their writes replaced) and their paths
follows from the same rules: a step that can go stale, because it has fingerprints or
because it depends on a step in the card's window that can (:func:`can_go_stale`).
Only those can be found stale; the others never need either, so a task that
fingerprints nothing carries neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from skillstate._json import get_path
from skillstate.errors import SecretKeyMissing
from skillstate.state.secrets import ENV_KEY, is_sealed, open_text, seal_text, sensitive_fields

if TYPE_CHECKING:
    from skillstate.state.model import AgentState, Fingerprint, StepRecord

__all__ = [
    "StepPaths",
    "can_go_stale",
    "dependents",
    "depends_on",
    "open_undo",
    "overlaps",
    "read_overlap",
    "undo_values",
]


def overlaps(a: str, b: str) -> bool:
    """Whether dotted paths ``a`` and ``b`` overlap (one is, or is under, the other)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _forms(read: str) -> tuple[str, ...]:
    """The paths a declared read may mean: itself, and the fact of that key."""
    if read == "facts" or read.startswith("facts."):
        return (read,)
    return (read, f"facts.{read}")


def read_overlap(reads: Sequence[str] | None, writes: Sequence[str] | None) -> str | None:
    """The first read in ``reads`` that overlaps a path in ``writes`` (``"*"`` when either
    side is unknown and ``writes`` may hold something); ``None``: they are independent."""
    if writes is not None and not writes:
        return None
    if reads is None or writes is None:
        return "*"
    for read in reads:
        for form in _forms(read):
            if any(overlaps(form, w) for w in writes):
                return read
    return None


class StepPaths(Protocol):
    """The parts of a step record the dependency rules read."""

    @property
    def id(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def reads(self) -> tuple[str, ...] | None: ...
    @property
    def writes(self) -> tuple[str, ...] | None: ...


def depends_on(later: StepPaths, earlier: StepPaths) -> str | None:
    """Why ``later`` must be redone when ``earlier`` is stale, as a phrase for the error
    log; ``None``: it need not be."""
    if later.action != "call_skill":
        return None
    if later.reads is None:
        return f"it declares no reads and stale step {earlier.id} came before it"
    read = read_overlap(later.reads, earlier.writes)
    if read == "*":
        return f"stale step {earlier.id} predates card version 6 (what it wrote is unknown)"
    if read is not None:
        return f"it reads {read}, which stale step {earlier.id} wrote"
    written = _write_overlap(later.writes, earlier.writes)
    if written is not None:
        return f"it wrote {written} after stale step {earlier.id} did"
    return None


def _write_overlap(mine: Sequence[str] | None, theirs: Sequence[str] | None) -> str | None:
    if mine is None or theirs is None:
        maybe = (mine is None or bool(mine)) and (theirs is None or bool(theirs))
        return "what it wrote" if maybe else None
    return next((m for m in mine if any(overlaps(m, t) for t in theirs)), None)


def can_go_stale(
    *,
    reads: Sequence[str] | None,
    writes: Sequence[str],
    fingerprints: Sequence[Fingerprint],
    window: Iterable[StepRecord],
) -> bool:
    """Whether a new skill step may ever be found stale, so that it must keep its ``undo``.

    It may when it recorded fingerprints, or when it depends on a step of the card's
    ``window`` that may (a step keeps ``undo`` exactly when it may: that is the mark).
    """
    if fingerprints:
        return True
    probe = _Probe(reads=None if reads is None else tuple(reads), writes=tuple(writes))
    return any(e.undo is not None and depends_on(probe, e) is not None for e in window)


@dataclass(frozen=True)
class _Probe:
    """A step not recorded yet, as :func:`depends_on` reads it."""

    reads: tuple[str, ...] | None
    writes: tuple[str, ...]
    id: str = "(new)"
    action: str = "call_skill"


def dependents(
    records: Sequence[StepRecord], stale: Mapping[str, str]
) -> list[tuple[StepRecord, str]]:
    """The stale records, in order, each with why: those ``stale`` maps (id -> reason),
    and every later one that can go stale (it kept ``undo``) and depends on one of
    them, transitively."""
    out: list[tuple[StepRecord, str]] = []
    for record in records:
        reason = stale.get(record.id)
        candidate = record.undo is not None or bool(record.fingerprints)
        for earlier, _ in out:
            if reason is not None or not candidate:
                break
            reason = depends_on(record, earlier)
        if reason is not None:
            out.append((record, reason))
    return out


# ---------------------------------------------------------------- undo values


def undo_values(state: AgentState, writes: Iterable[str]) -> dict[str, Any]:
    """The values ``writes`` replace in ``state`` (dotted path -> old JSON value).

    A value under a sensitive field is sealed (``enc:v1:...``), as the field itself is
    in the store: the card never holds a secret in the clear, not even an old one.
    """
    paths = list(writes)
    tops = {p.partition(".")[0] for p in paths}
    document = state.model_dump(mode="json", include=tops)
    hidden = sensitive_fields(type(state))
    out: dict[str, Any] = {}
    for path in paths:
        value = get_path(document, path)
        if path.partition(".")[0] in hidden and value is not None:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            token = seal_text(f"undo:{path}", text)
            if token is None:
                raise SecretKeyMissing(
                    f"field {path!r} is sensitive: set {ENV_KEY} to keep the value a step "
                    "replaced in it (a stale step puts it back)"
                )
            value = token
        out[path] = value
    return out


def open_undo(state: AgentState, undo: Mapping[str, Any]) -> dict[str, Any]:
    """``undo`` with sealed values of sensitive fields opened, ready for ``with_writes``."""
    hidden = sensitive_fields(type(state))
    if not hidden:
        return dict(undo)
    out: dict[str, Any] = {}
    for path, value in undo.items():
        if not (path.partition(".")[0] in hidden and is_sealed(value)):
            out[path] = value
            continue
        text = open_text(f"undo:{path}", value)
        if text is None:
            raise SecretKeyMissing(
                f"the old value of sensitive field {path!r} is sealed: set {ENV_KEY}"
            )
        out[path] = json.loads(text)
    return out
