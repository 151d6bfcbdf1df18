"""An agent's definition as data: the manifest a task is pinned to, and its digest.

The manifest holds what a task's card depends on to go on making sense:

* the **machine**: its steps, the transitions between them, the initial and the final
  steps (the card's ``current_step`` and plan name steps);
* each **skill** by name: its ``version``, a digest of its params' JSON schema (an
  intent in flight, an approval waiting, hold params of that shape), the step it
  enters, its declared outputs and whether it has effects (a description is not part
  of the contract: rewording one breaks no task);
* the **state** class's name and ``SCHEMA_VERSION`` (migrations carry schema changes).

Its digest is the sha256 of its canonical JSON (sorted keys, no spaces), written
``sha256:<hex>``: the same text a store's content-addressed artifact is named by, so
the card holds only that ref and the store keeps one copy of each manifest, however
many tasks are pinned to it and however many skills it lists.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent

__all__ = ["FORMAT", "Definition", "canonical", "definition_of", "params_digest"]

FORMAT = 1
"""The manifest's own format (a newer skillstate may add keys; a key this one does
not know is compared like any other)."""


def canonical(data: Any) -> bytes:
    """``data`` as canonical JSON bytes: what the digest and the stored artifact hold."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], str] = weakref.WeakKeyDictionary()
"""Params digests by class: an agent rebuilt (``dataclasses.replace`` for another
policy) or 3,000 skills sharing a params class pay for each schema once."""


def params_digest(params: type[BaseModel]) -> str:
    """A short digest of a params class's JSON schema (16 hex digits)."""
    found = _SCHEMAS.get(params)
    if found is not None:
        return found
    try:
        schema: Any = params.model_json_schema()
    except Exception:  # a type pydantic cannot render as JSON schema: its fields' shapes
        schema = {name: repr(f.annotation) for name, f in params.model_fields.items()}
    digest = hashlib.sha256(canonical(schema)).hexdigest()[:16]
    _SCHEMAS[params] = digest
    return digest


@dataclass(frozen=True)
class Definition:
    """An agent's manifest and its ref (``sha256:<hex>`` of the canonical JSON)."""

    manifest: dict[str, Any]
    data: bytes
    """The canonical JSON the ref is the digest of (what the store keeps)."""
    ref: str
    _stored: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet, repr=False)
    """Stores this manifest was written to by this process (written once per store)."""

    @property
    def short(self) -> str:
        """The first 12 hex digits of the digest: how messages and queues name it."""
        return short(self.ref)


def short(ref: str) -> str:
    """``sha256:0123456789abcdef...`` as ``0123456789ab``."""
    return ref.partition(":")[2][:12] or ref[:12]


def manifest_of(agent: Agent[Any]) -> dict[str, Any]:
    """The manifest of ``agent`` (see the module's doc)."""
    machine = agent.machine
    skills = {
        skill.name: {
            "version": str(skill.version),
            "params": params_digest(skill.params),
            "step": skill.step,
            "outputs": sorted(skill.outputs),
            "effects": bool(skill.effects),
        }
        for skill in agent.skills
    }
    return {
        "format": FORMAT,
        "machine": {
            "initial": machine.initial,
            "final": sorted(machine.final),
            "transitions": {step: sorted(targets) for step, targets in machine.transitions.items()},
        },
        "skills": skills,
        "state": {
            "class": agent.state_type.__name__,
            "schema_version": agent.state_type.SCHEMA_VERSION,
        },
    }


_CACHE = "_skillstate_definition"


def definition_of(agent: Agent[Any]) -> Definition:
    """``agent``'s :class:`Definition`, computed once per agent.

    Kept on the agent with a key of what it was built from (the machine, the skill
    registry and its size, the state class): a skill registered after the first use
    is seen; a step then costs a dictionary lookup and a tuple compare.
    """
    key = (id(agent.machine), id(agent.skills), len(agent.skills), id(agent.state_type))
    cached = agent.__dict__.get(_CACHE)
    if cached is not None and cached[0] == key:
        found: Definition = cached[1]
        return found
    manifest = manifest_of(agent)
    data = canonical(manifest)
    built = Definition(manifest, data, "sha256:" + hashlib.sha256(data).hexdigest())
    agent.__dict__[_CACHE] = (key, built)
    return built
