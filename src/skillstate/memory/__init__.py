"""Cross-task memory: facts with provenance that tasks share across runs.

A verified skill step writes facts (``ctx.remember(key, value)``, declared with
``Skill(remembers=[...])``); an agent reads scopes (``Agent(memory=[...])``) and
each decision's view shows their facts with where they came from. Scopes are
``agent:NAME``, ``team:NAME`` and ``user:NAME``; each is one record in the store,
committed and audited like a card (:mod:`skillstate.memory.record`). How a write
survives a crash exactly once, and how views stay replayable:
:mod:`skillstate.memory.runtime`. The command line: ``skillstate memory``.
"""

from __future__ import annotations

from skillstate.memory.facts import (
    SCOPE_KINDS,
    Fact,
    MemoryWrite,
    Recalled,
    Remembered,
    check_key,
    check_scope,
    check_template,
    parse_duration,
    resolve_scope,
)
from skillstate.memory.record import (
    MAX_FACTS,
    Memory,
    applied,
    forget,
    load_memory,
    memory_scopes,
    prune,
    record_id,
    remember,
)

__all__ = [
    "MAX_FACTS",
    "SCOPE_KINDS",
    "Fact",
    "Memory",
    "MemoryWrite",
    "Recalled",
    "Remembered",
    "applied",
    "check_key",
    "check_scope",
    "check_template",
    "forget",
    "load_memory",
    "memory_scopes",
    "parse_duration",
    "prune",
    "record_id",
    "remember",
    "resolve_scope",
]
