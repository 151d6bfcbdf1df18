"""Changes made by a person rather than by the policy: set, edit, fork, rollback.

Each is validated against the agent's state class before anything is written,
and committed like any step: one atomic compare-and-set with an event whose
actor is ``human``, so the audit log shows who changed what. The patch is made
against the raw stored head (which may predate a schema migration), because
that is what the store replays deltas over.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.engine.agent import Agent
from skillstate.errors import StateError, TaskNotFound, UsageError
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.state.model import AgentState
from skillstate.state.secrets import sensitive_fields
from skillstate.store.base import Checkpoint, Store

__all__ = [
    "HUMAN_READONLY",
    "edit_in_editor",
    "fork_task",
    "replace_state",
    "rollback_task",
    "set_fields",
]

#: Fields a person may not change: they identify the version chain itself.
HUMAN_READONLY = frozenset({"task_id", "version", "schema_version", "pending_effect"})

MASK = "***"


def set_fields(store: Store, agent: Agent, task_id: str, writes: Mapping[str, Any]) -> AgentState:
    """Apply dotted-path ``writes`` (``facts.total=3``, ``priority=P1``) as one human commit."""
    if not writes:
        raise UsageError("nothing to set: give PATH=VALUE")
    for path in writes:
        if path.split(".")[0] in HUMAN_READONLY:
            raise UsageError(f"{path!r} cannot be set by hand (it identifies the version chain)")
    head = store.load(task_id)
    state = agent.parse_state(head.state)
    try:
        after = state.with_writes(writes)
    except StateError as exc:
        raise UsageError(str(exc)) from exc
    hidden = sensitive_fields(agent.state_type)
    shown = {p: MASK if p.split(".")[0] in hidden else v for p, v in writes.items()}
    return _human_commit(store, head.state, after, {"kind": "set", "writes": shown})


def replace_state(
    store: Store, agent: Agent, task_id: str, expected_version: int, document: Mapping[str, Any]
) -> AgentState | None:
    """Commit an edited copy of the state read at ``expected_version``; None if unchanged.

    Sensitive fields left as ``***`` (how ``edit`` shows them) keep their value.
    """
    head = store.load(task_id)
    state = agent.parse_state(head.state)
    if state.version != expected_version:
        # Someone committed while the editor was open: refuse rather than overwrite.
        from skillstate.errors import StaleState

        raise StaleState(task_id, expected_version, state.version)
    current = state.model_dump(mode="json")
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
    if after == state:
        return None
    changed = sorted(k for k in edited if edited[k] != current.get(k))
    return _human_commit(store, head.state, after, {"kind": "edit", "fields": changed})


def edit_in_editor(store: Store, agent: Agent, task_id: str) -> AgentState | None:
    """Open the state as YAML in ``$VISUAL``/``$EDITOR`` and commit what was saved.

    Returns None when the file was saved unchanged. Sensitive values are shown as
    ``***`` and kept unless replaced.
    """
    import shlex
    import subprocess
    import tempfile

    import yaml

    from skillstate.state.secrets import mask

    state = agent.parse_state(store.load(task_id).state)
    shown = mask(agent.state_type, state.model_dump(mode="json"))
    header = (
        f"# skillstate edit: task {task_id}, version {state.version}.\n"
        "# Save and quit to commit (validated first); quit without saving to cancel.\n"
        "# task_id, version, schema_version and pending_effect cannot change;\n"
        "# *** hides a sensitive value, which is kept unless you replace it.\n"
    )
    text = header + yaml.safe_dump(shown, allow_unicode=True, sort_keys=False)
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
    try:
        edited = yaml.safe_load(edited_text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(f"edited file is not valid YAML: {first}; nothing was changed") from exc
    if not isinstance(edited, dict):
        raise UsageError("edited file must hold a YAML mapping of fields; nothing was changed")
    return replace_state(store, agent, task_id, state.version, edited)


def _safe_name(task_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id)[:80] or "task"


def fork_task(store: Store, agent: Agent, task_id: str, at_version: int, new_id: str) -> AgentState:
    """Start task ``new_id`` from version ``at_version`` of ``task_id`` (version 1 of the fork)."""
    try:
        store.load(new_id)
    except TaskNotFound:
        pass
    else:
        raise UsageError(f"task {new_id!r} already exists; pick another --new-id")
    source = agent.parse_state(_kept(store, task_id, at_version).state)
    if source.pending_effect is not None:
        # The fork would get a new idempotency key and could repeat an effect that
        # already happened in the original task.
        raise UsageError(
            f"version {at_version} of {task_id!r} has an effect in flight "
            f"({source.pending_effect.skill}); fork at {at_version - 1} or {at_version + 1}"
        )
    forked = source.evolve(task_id=new_id, version=1)
    document = forked.to_json()
    event = Event(
        task_id=new_id,
        version=1,
        actor="human",
        action={"kind": "fork", "from_task": task_id, "from_version": at_version},
    )
    store.commit(new_id, 0, document, event)
    return forked


def rollback_task(store: Store, task_id: str, to_version: int) -> int:
    """Make the state of ``to_version`` the new head, as a new commit.

    History is kept: the rollback is itself a version with its own event, and can
    be rolled back in turn. Returns the new version.
    """
    head = store.load(task_id)
    if not 1 <= to_version < head.version:
        raise UsageError(
            f"--to must be between 1 and {head.version - 1} (task {task_id!r} is at "
            f"version {head.version})"
        )
    target = _kept(store, task_id, to_version)
    document = dict(target.state)
    document["version"] = head.version + 1
    event = Event(
        task_id=task_id,
        version=head.version + 1,
        actor="human",
        action={"kind": "rollback", "to_version": to_version},
        patch=make_patch(head.state, document),
    )
    return store.commit(task_id, head.version, document, event)


def _kept(store: Store, task_id: str, version: int) -> Checkpoint:
    """A kept checkpoint; asking for one that does not exist (or was pruned) is bad input."""
    kept = [info.version for info in store.checkpoints(task_id)]
    if version not in kept:
        span = f"{kept[0]}..{kept[-1]}" if kept else "none"
        raise UsageError(
            f"task {task_id!r} has no kept checkpoint at version {version} "
            f"({len(kept)} kept, {span}; see skillstate checkpoints {task_id})"
        )
    return store.checkpoint(task_id, version)


def _human_commit(
    store: Store, raw_head: dict[str, Any], after: AgentState, action: dict[str, Any]
) -> AgentState:
    version = int(raw_head.get("version", 0))
    final = after.evolve(version=version + 1)
    document = final.to_json()
    event = Event(
        task_id=final.task_id,
        version=final.version,
        actor="human",
        action=action,
        patch=make_patch(raw_head, document),
    )
    store.commit(final.task_id, version, document, event)
    return final
