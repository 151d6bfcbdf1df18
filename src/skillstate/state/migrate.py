"""Schema evolution: old checkpoints load into the current state class.

A state class names its schema with ``SCHEMA_VERSION``. When its fields change
incompatibly, bump the version and register a migration for the old one, inside
the class body::

    class TicketState(AgentState):
        SCHEMA_VERSION = 2
        first_name: str = ""
        last_name: str = ""
        priority: str | None = None

        @migration(from_version=1)
        def _split_customer(doc: dict[str, Any]) -> dict[str, Any]:
            first, _, last = doc.pop("customer", "").partition(" ")
            doc["priority"] = doc.pop("prio", None)
            return {**doc, "first_name": first, "last_name": last}

A migration is a plain function of the stored JSON document, not of a model: the
old schema's class usually no longer exists, and stores are schema-agnostic, so
the document is the only thing both versions share. Migrations run one version
at a time (1 → 2 → 3) on every load; the stored records are never rewritten, so
every old checkpoint stays loadable and auditable as it was committed.

The base fields of the card evolve the same way, under their own number
(``card_version``, see :data:`BASE_MIGRATIONS`); they migrate first.

**Loads are strict.** After migration a stored card must hold every field of the
class, no other field, and values that validate *as stored*: a missing
``constraints``, a ``"5"`` where an int belongs, is :class:`StateCorrupted` naming
the field, never filled in with a default or coerced (a task that lost its
constraints would run on without them). Defaults apply when a task is created or
migrated, not when it is loaded: a new field with a default needs a migration
(``doc.setdefault("priority", None)``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from skillstate.errors import SchemaTooNew, StateCorrupted, UsageError

if TYPE_CHECKING:
    from skillstate.state.model import AgentState

__all__ = [
    "MigrationFn",
    "chain_problems",
    "check_migrations",
    "migrate_document",
    "migration",
    "migrations",
    "validate_state",
]

MigrationFn = Callable[[dict[str, Any]], dict[str, Any]]
"""Takes the document at ``from_version`` and returns it at ``from_version + 1``."""


class _Migration(staticmethod):  # type: ignore[type-arg]
    """A registered migration. A ``staticmethod`` so that pydantic ignores it (it
    skips staticmethods when collecting fields and private attributes) and so
    that ``TicketState._split_customer(doc)`` still calls the plain function."""

    from_version: int


def migration(
    from_version: int,
) -> Callable[[MigrationFn], staticmethod[[dict[str, Any]], dict[str, Any]]]:
    """Register the decorated function as the migration from ``from_version``.

    Use it in a state class body. The decorated name stays a static method of the
    class. The return type is a ``staticmethod`` on purpose: typed as a plain
    callable, mypy would bind ``doc`` as ``self`` and reject the definition.
    """
    if isinstance(from_version, bool) or not isinstance(from_version, int) or from_version < 1:
        raise UsageError(f"@migration(from_version=...) needs an int >= 1, got {from_version!r}")

    def register(fn: MigrationFn) -> staticmethod[[dict[str, Any]], dict[str, Any]]:
        # ``@migration(...)`` stacked on ``@staticmethod`` works too.
        func = fn.__func__ if isinstance(fn, staticmethod) else fn
        if not callable(func):
            raise UsageError(f"@migration(from_version={from_version}) decorates a non-callable")
        wrapped = _Migration(func)
        wrapped.from_version = from_version
        return wrapped

    return register


def _declared(cls: type) -> dict[int, list[str]]:
    """Names of the migrations declared in ``cls``'s own body, by ``from_version``."""
    found: dict[int, list[str]] = {}
    for name, value in vars(cls).items():
        if isinstance(value, _Migration):
            found.setdefault(value.from_version, []).append(name)
    return found


def migrations(cls: type[AgentState]) -> dict[int, MigrationFn]:
    """The migrations ``cls`` applies, by ``from_version``, its parents' included.

    A subclass's migration replaces a parent's for the same ``from_version``.
    """
    result: dict[int, MigrationFn] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, _Migration):
                result[value.from_version] = getattr(klass, name)
    return dict(sorted(result.items()))


def check_migrations(cls: type[AgentState]) -> None:
    """Class-creation checks: one migration per version, each below ``SCHEMA_VERSION``.

    Called for every ``AgentState`` subclass as it is defined, so a mistake fails
    at import time rather than on the first old task someone loads.
    """
    known = cls.SCHEMA_VERSION
    if isinstance(known, bool) or not isinstance(known, int) or known < 1:
        raise UsageError(f"{cls.__name__}.SCHEMA_VERSION must be an int >= 1, got {known!r}")
    for version, names in _declared(cls).items():
        if len(names) > 1:
            raise UsageError(
                f"{cls.__name__} declares {len(names)} migrations from schema version "
                f"{version}: {', '.join(names)}"
            )
    too_new = [v for v in migrations(cls) if v >= known]
    if too_new:
        raise UsageError(
            f"{cls.__name__} has a migration from schema version {too_new[0]}, but its "
            f"SCHEMA_VERSION is {known}; from_version must be lower"
        )


def chain_problems(cls: type[AgentState]) -> list[str]:
    """Gaps in the chain from the lowest registered version up to ``SCHEMA_VERSION``.

    A gap means some old checkpoints would load up to it and then stop, which an
    agent should refuse when it is built, not when such a task turns up.
    """
    steps = migrations(cls)
    if not steps:
        return []
    missing = [v for v in range(min(steps), cls.SCHEMA_VERSION) if v not in steps]
    return [f"{cls.__name__} has no migration from schema version {v} to {v + 1}" for v in missing]


def migrate_document(
    cls: type[AgentState], doc: Mapping[str, Any], *, task_id: str | None = None
) -> tuple[dict[str, Any], list[int]]:
    """``doc`` brought to ``cls.SCHEMA_VERSION``, and the versions it was migrated from.

    A document without ``schema_version`` predates versioning and counts as 1.
    The second item lists the ``from_version`` of each migration applied, oldest
    first; it is empty when the document was already current. ``doc`` itself is
    never modified. Raises :class:`~skillstate.errors.SchemaTooNew` for a version
    newer than ``cls`` knows, and :class:`~skillstate.errors.StateCorrupted` for
    a bad version, a missing migration or one that fails.
    """
    tid = task_id or _text(doc.get("task_id"))
    at = _int(doc.get("version"))
    doc = _migrate_base(doc, tid, at)
    known = cls.SCHEMA_VERSION
    found = doc.get("schema_version", 1)
    if _int(found) is None or found < 1:
        raise StateCorrupted(
            tid, at, f"schema version must be an int >= 1, got {found!r}", field="schema_version"
        )
    if found > known:
        raise SchemaTooNew(tid, found, known)
    current = dict(doc)
    if found == known:
        return current, []
    steps = migrations(cls)
    passed: list[int] = []
    for version in range(found, known):
        step = steps.get(version)
        if step is None:
            raise StateCorrupted(
                tid,
                at,
                f"no migration from schema version {version} to {version + 1} for {cls.__name__}",
            )
        name = getattr(step, "__name__", "migration")
        try:
            # A deep copy: a migration that edits its argument in place must not reach
            # into the caller's document (a memory store's head, say).
            result = step(copy.deepcopy(current))
        except Exception as exc:
            raise StateCorrupted(
                tid,
                at,
                f"migration {cls.__name__}.{name} from schema version {version} failed: "
                f"{type(exc).__name__}: {_one_line(str(exc))}",
            ) from exc
        if not isinstance(result, dict):
            raise StateCorrupted(
                tid,
                at,
                f"migration {cls.__name__}.{name} from schema version {version} returned "
                f"{type(result).__name__}, not a dict",
            )
        # Set here rather than trusted from the function: which step ran decides the
        # version, so a migration need not (and cannot wrongly) touch it.
        result["schema_version"] = version + 1
        current = result
        passed.append(version)
    return current, passed


def validate_state(
    cls: type[AgentState], doc: Mapping[str, Any], *, task_id: str | None = None
) -> AgentState:
    """``doc`` migrated (:func:`migrate_document`) and strictly validated into ``cls``.

    A document that does not validate, lacks a field, or holds a value that only
    validates by being changed is :class:`~skillstate.errors.StateCorrupted` whose
    ``field`` is the dotted path of the first problem (``completed_steps.0.id``).
    """
    tid = task_id or _text(doc.get("task_id"))
    document, _ = migrate_document(cls, doc, task_id=tid)
    at = _int(doc.get("version"))
    missing = [name for name in cls.model_fields if name not in document]
    if missing:
        raise StateCorrupted(
            tid,
            at,
            "missing from the stored card (a stored card holds every field; defaults apply "
            "only when a task is created or migrated)",
            field=missing[0],
        )
    try:
        state = cls.model_validate(document)
    except ValidationError as exc:
        for error in exc.errors():
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, UsageError):
                # A validator refusing on purpose (a missing secret key, say) is a
                # setup problem to fix, not a broken record: keep its own error.
                raise cause from exc
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        # The message, never the bad value: it may be a secret or a large blob.
        reason = _one_line(str(first["msg"])) + more
        raise StateCorrupted(tid, _int(doc.get("version")), reason, field=where) from exc
    changed = _coerced(state, document)
    if changed is not None:
        raise StateCorrupted(
            tid, at, "holds a value of the wrong type (it would only load changed)", field=changed
        )
    return state


def _coerced(state: AgentState, document: Mapping[str, Any]) -> str | None:
    """The first field whose stored value validation changed (``"5"`` into ``5``)."""
    from skillstate.state.secrets import sensitive_fields

    hidden = sensitive_fields(type(state))
    dumped = state.model_dump(mode="json")
    for name, value in dumped.items():
        if name in hidden or name == "schema_version":
            continue  # sealed in the document, plain in the model; set by the migration
        if value != document.get(name):
            return _first_difference(name, value, document.get(name))
    return None


def _first_difference(path: str, model: Any, stored: Any) -> str:
    if isinstance(model, dict) and isinstance(stored, dict):
        for key in model:
            if model[key] != stored.get(key):
                return _first_difference(f"{path}.{key}", model[key], stored.get(key))
    if isinstance(model, list) and isinstance(stored, list) and len(model) == len(stored):
        for index, (a, b) in enumerate(zip(model, stored, strict=True)):
            if a != b:
                return _first_difference(f"{path}.{index}", a, b)
    return path


def _migrate_base(doc: Mapping[str, Any], tid: str, at: int | None) -> Mapping[str, Any]:
    """``doc`` with its base fields brought to the current ``card_version``."""
    from skillstate.state.model import CARD_VERSION

    found = doc.get("card_version", 1)
    if _int(found) is None or found < 1:
        raise StateCorrupted(tid, at, f"must be an int >= 1, got {found!r}", field="card_version")
    if found > CARD_VERSION:
        raise SchemaTooNew(tid, found, CARD_VERSION)
    if found == CARD_VERSION:
        return doc
    current = copy.deepcopy(dict(doc))
    for version in range(found, CARD_VERSION):
        current = BASE_MIGRATIONS[version](current)
        current["card_version"] = version + 1
    return current


def _base_1_to_2(doc: dict[str, Any]) -> dict[str, Any]:
    """Fields added by the stall guard, effect-aware rollback and stale-step undo."""
    steps = doc.get("completed_steps")
    doc.setdefault("steps_taken", len(steps) if isinstance(steps, list) else 0)
    doc.setdefault("tried", [])
    doc.setdefault("no_progress", 0)
    doc.setdefault("compensations", [])
    doc.setdefault("effect_generations", {})
    for record in steps if isinstance(steps, list) else ():
        if isinstance(record, dict):
            record.setdefault("undo", None)
    for entry in doc.get("errors") or ():
        if isinstance(entry, dict):
            entry.setdefault("permanent", False)
    return doc


def _base_2_to_3(doc: dict[str, Any]) -> dict[str, Any]:
    """The one-slot inbox becomes the queue of numbered replies; errors get ``trace``."""
    inbox = doc.pop("inbox", None)
    doc.setdefault("inputs", [{"index": 0, "text": inbox}] if isinstance(inbox, str) else [])
    # Earlier replies were not counted; numbering starts after the ones still here.
    doc.setdefault("inputs_received", len(doc["inputs"]))
    for entry in doc.get("errors") or ():
        if isinstance(entry, dict):
            entry.setdefault("trace", None)
    return doc


def _base_3_to_4(doc: dict[str, Any]) -> dict[str, Any]:
    """Replies given ahead of their questions (none on an older card)."""
    doc.setdefault("replies_ahead", [])
    return doc


def _base_4_to_5(doc: dict[str, Any]) -> dict[str, Any]:
    """Long-running control (issue 25): durable waits and signals, a pending approval
    (none on an older card).

    One card version for the whole issue: each feature adds its fields' defaults here."""
    doc.setdefault("wait", None)
    doc.setdefault("signals", {})
    doc.setdefault("pending_approval", None)  # approvals
    doc.setdefault("messages", [])  # messages and cancel
    doc.setdefault("inbox_seen", 0)
    doc.setdefault("cancelling", None)
    return doc


def _base_5_to_6(doc: dict[str, Any]) -> dict[str, Any]:
    """Definitions that evolve (issue 26): each feature adds its fields' defaults here."""
    # Pinned definitions: an old card has no pin; the runtime pins it on its next commit.
    doc.setdefault("definition", None)
    doc.setdefault("carried_patches", [])
    doc.setdefault("skill_instructions", [])  # skill library: loaded SKILL.md instructions
    doc.setdefault("peek", None)  # evidence on demand: the ref the next view shows raw
    doc.setdefault("rejected", [])  # rejected approaches: none on an older card
    doc.setdefault("unchecked_steps", 0)  # transitive staleness
    _step_paths(doc)  # transitive staleness: what older steps wrote, where it is known
    return doc


def _base_6_to_7(doc: dict[str, Any]) -> dict[str, Any]:
    """Learning from finished work (issue 27): each feature adds its fields' defaults here."""
    doc.setdefault("template", None)  # templates: no template hint on an older card
    doc.setdefault("recalled", [])  # cross-task memory: the facts the views show
    doc.setdefault("recalled_from", {})
    doc.setdefault("memory_outbox", [])  # cross-task memory: verified writes not flushed yet
    return doc


def _base_7_to_8(doc: dict[str, Any]) -> dict[str, Any]:
    """Fan-out (issue 28): each feature adds its fields' defaults here."""
    doc.setdefault("parent", None)  # a card from before fan-out is a root task
    doc.setdefault("children", [])
    doc.setdefault("shared_snapshots", [])  # shared records (issue 28)
    doc.setdefault("shared_pending", [])
    return doc


def _base_8_to_9(doc: dict[str, Any]) -> dict[str, Any]:
    """Operations (issue 29): each feature adds its fields' defaults here."""
    doc.setdefault("budget_warnings", [])  # budgets (alerts)
    return doc


def _step_paths(doc: dict[str, Any]) -> None:
    """Transitive staleness (issue 26): an older record that kept an ``undo`` (a
    fingerprinted step) wrote that undo's paths; its ``reads`` stay unknown (it depends
    on everything before it). A record without one never goes stale, as before."""
    records = doc.get("completed_steps")
    if not isinstance(records, list):
        return
    for record in records:
        if isinstance(record, dict) and isinstance(record.get("undo"), dict):
            record.setdefault("writes", list(record["undo"]))


BASE_MIGRATIONS: dict[int, MigrationFn] = {
    1: _base_1_to_2,
    2: _base_2_to_3,
    3: _base_3_to_4,
    4: _base_4_to_5,
    5: _base_5_to_6,
    6: _base_6_to_7,
    7: _base_7_to_8,
    8: _base_8_to_9,
}
"""Migrations of the base card, by the ``card_version`` they start from."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) and value else "<unknown>"


def _one_line(text: str) -> str:
    return " ".join(text.split())
