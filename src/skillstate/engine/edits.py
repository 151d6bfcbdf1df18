"""Changes made by a person rather than by the policy: ``set`` and ``edit``.

A hand edit goes through the same rules as a step. It is validated against the
agent's state class; the agent's invariants must hold afterwards; the task's
step moves only along a declared transition; fields the runtime owns (status,
the step lists, usage, the error log...) change only with ``force``; and the
card must stay consistent (a completed task is in a final step, a waiting one
has a question). It is committed like any step: one atomic compare-and-set
with an event whose actor is ``human``, so the audit log shows who changed what.

These are also the repair path of a corrupted head: the change is applied to
the raw stored document, and it is committed only if the result validates. The
patch is made against the raw stored head (which may predate a schema
migration), because that is what the store replays deltas over.
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.audit import who
from skillstate.engine.agent import Agent
from skillstate.engine.lease import human_lease
from skillstate.errors import (
    InvariantBroken,
    StaleState,
    StateCorrupted,
    StateError,
    TaskNotFound,
    UsageError,
)
from skillstate.events import Event
from skillstate.limits import edit_problem
from skillstate.state.diff import make_patch
from skillstate.state.model import PROTECTED_FIELDS, AgentState, TaskStatus
from skillstate.state.secrets import MASK, mask, sensitive_fields
from skillstate.store.base import Checkpoint, Store
from skillstate.store.chain import CHECKSUM_MISMATCH

__all__ = [
    "HUMAN_READONLY",
    "RUNTIME_OWNED",
    "card_problems",
    "check_edit",
    "edit_in_editor",
    "record_unlock",
    "replace_state",
    "set_agent_reference",
    "set_fields",
]

#: Fields a person may not change at all: they identify the version chain itself,
#: or an effect the runtime is settling.
HUMAN_READONLY = frozenset(
    {"task_id", "version", "schema_version", "card_version", "pending_effect"}
)

#: Fields only the runtime moves; a person changes them with ``force`` (``--force``).
#: ``goal``, ``constraints`` and ``current_step`` are the task's definition and
#: position, ``agent`` names who drives it (checked against the operator's allow-list
#: when used): a person may change those (the step only along a declared transition).
RUNTIME_OWNED = (
    PROTECTED_FIELDS
    - HUMAN_READONLY
    - {
        "goal",
        "constraints",
        "current_step",
        "agent",
    }
)


def _set_fields(
    store: Store,
    agent: Agent[Any],
    task_id: str,
    writes: Mapping[str, Any],
    *,
    force: bool,
    fence: int | None,
) -> AgentState:
    """Apply dotted-path ``writes`` (``facts.total=3``, ``priority=P1``) as one human commit."""
    if not writes:
        raise UsageError("nothing to set: give PATH=VALUE")
    for path, value in writes.items():
        check_edit(path, value)
    head = head_for_repair(store, task_id, force=force)
    before = _parse_or_none(agent, head.state, task_id)
    if before is not None:
        try:
            after = before.with_writes(writes)
        except StateError as exc:
            raise UsageError(str(exc)) from exc
    else:
        after = _repaired(agent, task_id, head.state, writes)
    changed = {path.split(".")[0] for path in writes}
    check_human_change(agent, before, after, changed, force=force)
    hidden = sensitive_fields(agent.state_type)
    shown = {p: MASK if p.split(".")[0] in hidden else v for p, v in writes.items()}
    action: dict[str, Any] = {"kind": "set", "writes": shown}
    if force:
        action["force"] = True
    return _human_commit(store, head, after, action, fence)


def _set_agent_reference(store: Store, task_id: str, ref: object, fence: int | None) -> int:
    """Point a task at another agent without importing the one it names (a repair).

    The stored reference may name code nobody should run (``os:abort``); this is
    how a person takes it back without the agent, or any other, being imported.
    Returns the new version.
    """
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(ref.split(":")):
        raise UsageError(f"agent must be MODULE:ATTR, got {ref!r}")
    check_edit("agent", ref)
    head = store.load(task_id, verify=False)  # only the agent field is taken from it
    document = {**head.state, "agent": ref, "version": head.version + 1}
    event = Event(
        task_id=task_id,
        version=head.version + 1,
        actor="human",
        action={"kind": "set", "writes": {"agent": ref}},
        patch=make_patch(head.state, document),
        **who("human"),
    )
    return store.commit(task_id, head.version, document, event, fence=fence)


def _replace_state(
    store: Store,
    agent: Agent[Any],
    task_id: str,
    expected_version: int,
    document: Mapping[str, Any],
    *,
    force: bool,
    fence: int | None,
) -> AgentState | None:
    """Commit an edited copy of the state read at ``expected_version``; None if unchanged.

    Sensitive fields left as ``***`` (how ``edit`` shows them) keep their value.
    """
    head = head_for_repair(store, task_id, force=force)
    if head.version != expected_version:
        # Someone committed while the editor was open: refuse rather than overwrite.
        raise StaleState(task_id, expected_version, head.version)
    before = _parse_or_none(agent, head.state, task_id)
    current = before.model_dump(mode="json") if before is not None else dict(head.state)
    edited = dict(document)
    for name in sensitive_fields(agent.state_type):
        if edited.get(name) == MASK:
            edited[name] = current.get(name)
    for name in HUMAN_READONLY:
        if name in edited and edited[name] != current.get(name):
            raise UsageError(f"field {name!r} cannot be edited by hand")
        edited[name] = current.get(name)
    try:
        after = agent.state_type.model_validate(edited)
    except ValidationError as exc:
        raise UsageError(f"edited state is invalid: {first_error(exc, 'state')}") from exc
    if before is not None and after == before:
        return None
    changed = {k for k in set(edited) | set(current) if edited.get(k) != current.get(k)}
    for name in sorted(changed):
        # Only what the person wrote: text a skill put in the card earlier stays editable.
        check_edit(name, _fresh(current.get(name), edited.get(name)))
    check_human_change(agent, before, after, changed, force=force)
    action: dict[str, Any] = {"kind": "edit", "fields": sorted(changed)}
    if force:
        action["force"] = True
    return _human_commit(store, head, after, action, fence)


def edit_in_editor(
    store: Store, agent: Agent[Any], task_id: str, *, force: bool = False
) -> AgentState | None:
    """Open the state as YAML in ``$VISUAL``/``$EDITOR`` and commit what was saved.

    Returns None when the file was saved unchanged. Sensitive values are shown as
    ``***`` and kept unless replaced. A corrupted head opens as its raw document,
    with the problem in the header. When the saved text is refused, it is kept in
    a file the error names, to fix and apply with ``edit --file``.
    """
    import shlex
    import subprocess

    head = head_for_repair(store, task_id, force=force)
    problem = ""
    try:
        state = agent.parse_state(head.state, task_id=task_id)
        shown = mask(agent.state_type, state.model_dump(mode="json"))
    except StateCorrupted as exc:
        problem = f"# THE STORED STATE IS CORRUPTED: {exc.reason}\n# Fix it below.\n"
        shown = mask(agent.state_type, dict(head.state))
    text = edit_header(task_id, head.version) + problem + dump_yaml(shown)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.TemporaryDirectory(prefix="skillstate-edit-") as tmp:
        path = os.path.join(tmp, f"{_safe_name(task_id)}.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        try:
            code = subprocess.call([*shlex.split(editor), path])
        except OSError as exc:
            raise UsageError(f"cannot run editor {editor!r}: {exc}") from exc
        if code != 0:
            raise UsageError(f"editor {editor!r} exited with status {code}; nothing was changed")
        with open(path, encoding="utf-8") as handle:
            edited_text = handle.read()
    if edited_text == text:
        return None
    return apply_edit(store, agent, task_id, edited_text, head.version, force=force)


def apply_edit(
    store: Store,
    agent: Agent[Any],
    task_id: str,
    text: str,
    expected_version: int | None = None,
    *,
    force: bool = False,
    keep: bool = True,
) -> AgentState | None:
    """Commit the YAML ``text`` of an edited card (what ``edit`` and ``edit --file`` do).

    ``expected_version`` defaults to the ``version`` the text holds. When the text
    is refused and ``keep`` is true, it is saved to a file that the error names.
    """
    from skillstate._yaml import load_yaml

    try:
        edited = load_yaml(text, what="the edited file")
        if not isinstance(edited, dict):
            raise UsageError("edited file must hold a YAML mapping of fields")
        version = expected_version
        if version is None:
            version = edited.get("version")
            if not isinstance(version, int):
                raise UsageError("edited file has no integer `version` to check against")
        return replace_state(store, agent, task_id, version, edited, force=force)
    except UsageError as exc:
        if not keep:
            raise
        kept = _keep(task_id, text)
        raise UsageError(
            f"{exc}; nothing was changed. Your edit is kept in {kept}: fix it and run "
            f"skillstate edit {task_id} --file {kept}"
        ) from exc


def edit_header(task_id: str, version: int) -> str:
    return (
        f"# skillstate edit: task {task_id}, version {version}.\n"
        "# Save and quit to commit (validated first); quit without saving to cancel.\n"
        "# task_id, version, schema_version and pending_effect cannot change;\n"
        "# fields the runtime owns (status, step lists, errors, usage) need --force;\n"
        "# *** hides a sensitive value, which is kept unless you replace it.\n"
    )


def dump_yaml(document: Mapping[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(dict(document), allow_unicode=True, sort_keys=False)


def check_human_change(
    agent: Agent[Any],
    before: AgentState | None,
    after: AgentState,
    changed: set[str],
    *,
    force: bool,
) -> None:
    """Raise ``UsageError`` unless a person may move the task from ``before`` to ``after``.

    ``before`` is ``None`` when the stored head did not validate (a repair).
    """
    frozen = sorted(changed & HUMAN_READONLY)
    if frozen:
        raise UsageError(f"{frozen[0]!r} cannot be changed by hand (it identifies the chain)")
    owned = sorted(changed & RUNTIME_OWNED)
    if owned and not force:
        raise UsageError(
            f"{', '.join(owned)} {'is' if len(owned) == 1 else 'are'} owned by the runtime; "
            "pass --force to change it by hand"
        )
    machine = agent.machine
    if after.current_step not in machine.steps:
        raise UsageError(
            f"current_step {after.current_step!r} is not a step of agent {agent.name!r} "
            f"(steps: {', '.join(machine.steps)})"
        )
    if (
        before is not None
        and before.current_step != after.current_step
        and not machine.can(before.current_step, after.current_step)
        and not force
    ):
        allowed = ", ".join(sorted(machine.allowed(before.current_step))) or "none"
        raise UsageError(
            f"current_step moves only along declared transitions: {before.current_step} -> "
            f"{after.current_step} is not one (allowed: {allowed}); --force jumps anyway"
        )
    problems = card_problems(agent, after)
    if problems:
        raise UsageError(f"the card would be inconsistent: {problems[0]}")
    broken = agent.broken_invariant(after)
    if broken is not None:
        raise InvariantBroken(f"refused: invariant {broken}")


def check_edit(path: str, value: Any) -> None:
    """Refuse (``UsageError``, one line) a person's write of ``value`` at ``path``.

    The same check for ``set``, ``edit`` and the web inspector: text with control
    characters (but line feed and tab in values), DEL, C1 controls or bidirectional
    overrides, and what :func:`skillstate.limits.problem` refuses everywhere (see
    :func:`skillstate.limits.edit_problem`).
    """
    found = edit_problem({path: value})
    if found is not None:
        raise UsageError(f"value of {path!r} refused: {found}")


def _fresh(old: Any, new: Any) -> Any:
    """The parts of ``new`` that ``old`` did not hold already (what a person wrote)."""
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: _fresh(old.get(k), v) for k, v in new.items() if k not in old or old[k] != v}
    if isinstance(new, list) and isinstance(old, list):
        return [_fresh(old[i] if i < len(old) else None, v) for i, v in enumerate(new)]
    return None if new == old else new


def card_problems(agent: Agent[Any], state: AgentState) -> list[str]:
    """What makes ``state`` inconsistent for ``agent``, whoever wrote it (doctor asks too)."""
    problems: list[str] = []
    machine = agent.machine
    if state.current_step not in machine.steps:
        problems.append(f"current_step {state.current_step!r} is not a declared step")
    if state.status is TaskStatus.COMPLETED and state.current_step not in machine.final:
        problems.append(
            f"status completed but current_step {state.current_step!r} is not a final step"
        )
    if state.status is TaskStatus.WAITING_USER and not state.question:
        problems.append("status waiting_user but there is no question")
    if (state.status is TaskStatus.WAITING_APPROVAL) != (state.pending_approval is not None):
        problems.append("status waiting_approval goes with a pending approval, and only with one")
    if (state.status is TaskStatus.WAITING) != (state.wait is not None):
        problems.append("status waiting goes with a wait (a time or a signal), and only with one")
    pending = any(child.status == "pending" for child in state.children)  # fan-out
    if state.status is TaskStatus.WAITING_CHILDREN and not pending:
        problems.append("status waiting_children but no child is pending")
    if state.status is TaskStatus.RUNNING and pending:
        problems.append("status running with pending children (waiting_children until joined)")
    if state.status.is_terminal and (state.pending_effect or state.compensations):
        problems.append(f"status {state.status.value} with unfinished effects")
    return problems


def _parse_or_none(
    agent: Agent[Any], document: Mapping[str, Any], task_id: str
) -> AgentState | None:
    try:
        state: AgentState = agent.parse_state(document, task_id=task_id)
    except StateCorrupted:
        return None
    return state


def _repaired(
    agent: Agent[Any], task_id: str, document: Mapping[str, Any], writes: Mapping[str, Any]
) -> AgentState:
    """A corrupted head's raw document with ``writes`` applied, if that makes it valid."""
    data = copy.deepcopy(dict(document))
    for path, value in writes.items():
        parts = path.split(".")
        node = data
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    try:
        repaired: AgentState = agent.parse_state(data, task_id=task_id)
    except StateCorrupted as exc:
        raise UsageError(f"the stored state is corrupted and still would be: {exc.reason}") from exc
    return repaired


def _keep(task_id: str, text: str) -> str:
    """Save a refused edit where the person can find it again."""
    fd, path = tempfile.mkstemp(prefix=f"skillstate-edit-{_safe_name(task_id)}-", suffix=".yaml")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _safe_name(task_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id)[:80] or "task"


def record_unlock(
    store: Store, task_id: str, worker: str, generation: int, *, force: bool
) -> int | None:
    """Log a cleared lease as a human event (under a lease of its own: see set_fields)."""
    with human_lease(store, task_id) as fence:
        return _record_unlock(store, task_id, worker, generation, force=force, fence=fence)


def _record_unlock(
    store: Store, task_id: str, worker: str, generation: int, *, force: bool, fence: int | None
) -> int | None:
    """Log a cleared lease as a human event (the card is unchanged but for its version).

    Returns the new version; ``None`` when the head cannot be read cleanly (the lease
    is cleared all the same; ``doctor`` tells what else is wrong).
    """
    try:
        head = store.load(task_id)
    except (StateCorrupted, TaskNotFound):
        return None
    document = {**head.state, "version": head.version + 1}
    action: dict[str, Any] = {"kind": "unlock", "worker": worker, "generation": generation}
    if force:
        action["force"] = True
    event = Event(
        task_id=task_id,
        version=head.version + 1,
        actor="human",
        action=action,
        patch=make_patch(head.state, document),
        **who("human"),
    )
    return store.commit(task_id, head.version, document, event, fence=fence)


def head_for_repair(store: Store, task_id: str, *, force: bool) -> Checkpoint:
    """The head a hand edit starts from, damaged or not.

    A head that fails its checksum was changed outside skillstate: committing over
    it would make that change look like skillstate's own, so it needs ``force``
    (after the person has looked at it: ``show --json``). Any other damage is what
    ``set`` and ``edit`` are there to repair.
    """
    try:
        return store.load(task_id)
    except StateCorrupted as exc:
        if exc.reason == CHECKSUM_MISMATCH and not force:
            raise StateCorrupted(
                task_id,
                exc.version,
                f"{exc.reason}; look at it (skillstate show {task_id} --json) and pass --force "
                "to commit your change over it",
            ) from exc
        return store.load(task_id, verify=False)


def _human_commit(
    store: Store, head: Checkpoint, after: AgentState, action: dict[str, Any], fence: int | None
) -> AgentState:
    version = head.version  # the row's version: the damaged document's may disagree
    final = after.replace(version=version + 1)
    document = final.to_json()
    event = Event(
        task_id=final.task_id,
        version=final.version,
        actor="human",
        action=action,
        patch=make_patch(head.state, document),
        **who("human"),
    )
    store.commit(final.task_id, version, document, event, fence=fence)
    return final


# ---------------------------------------------------------------- leased entry points
# A person's change holds the task's lease for its read, its checks and its commit
# (engine.lease.human_lease), and the commit carries the lease's fencing token.


def set_fields(
    store: Store, agent: Agent[Any], task_id: str, writes: Mapping[str, Any], *, force: bool = False
) -> AgentState:
    """Apply dotted-path ``writes`` (``facts.total=3``, ``priority=P1``) as one human commit."""
    with human_lease(store, task_id) as fence:
        return _set_fields(store, agent, task_id, writes, force=force, fence=fence)


def set_agent_reference(store: Store, task_id: str, ref: object) -> int:
    """Point a task at another agent without importing the one it names (a repair).

    The stored reference may name code nobody should run (``os:abort``); this is
    how a person takes it back without the agent, or any other, being imported.
    Returns the new version.
    """
    with human_lease(store, task_id) as fence:
        return _set_agent_reference(store, task_id, ref, fence)


def replace_state(
    store: Store,
    agent: Agent[Any],
    task_id: str,
    expected_version: int,
    document: Mapping[str, Any],
    *,
    force: bool = False,
) -> AgentState | None:
    """Commit an edited copy of the state read at ``expected_version``; None if unchanged.

    Sensitive fields left as ``***`` (how ``edit`` shows them) keep their value.
    """
    with human_lease(store, task_id) as fence:
        return _replace_state(
            store, agent, task_id, expected_version, document, force=force, fence=fence
        )
