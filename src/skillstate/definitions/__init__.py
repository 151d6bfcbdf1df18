"""Pinned definitions: a task runs on the definition it started under, or is told why not.

A long task outlives the code that started it. Each task's card records the digest
of its agent's definition (``definition``: the machine, each skill's name, version,
params schema, step, outputs and effects, the state class and its schema version);
a resume under another definition is refused with
:class:`~skillstate.errors.DefinitionChanged` naming what changed, unless the
agent declares how to carry it (a migration, a :func:`patched` marker), or a person
accepts it (``Runtime.run(..., accept_definition=True)``, ``--accept-definition``).

* :mod:`~skillstate.definitions.manifest`: the manifest and its digest.
* :mod:`~skillstate.definitions.patches`: :func:`patched` markers and :func:`is_patched`.
* :mod:`~skillstate.definitions.compare`: what changed, and what carries each change.
* :mod:`~skillstate.definitions.carry`: a card carried across renames.

The runtime side (checking the pin when a task's head is loaded for a step,
committing a carry or an accept) is :mod:`skillstate.engine.pins`.
"""

from __future__ import annotations

from skillstate.definitions.compare import Change, Comparison, compare
from skillstate.definitions.manifest import Definition, definition_of
from skillstate.definitions.patches import Patch, is_patched, patched

__all__ = [
    "Change",
    "Comparison",
    "Definition",
    "Patch",
    "compare",
    "definition_of",
    "is_patched",
    "patched",
]
