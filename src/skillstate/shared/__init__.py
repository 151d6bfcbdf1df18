"""Shared records: state several tasks read in their views and write through skills.

Declared on the agent, one pydantic schema and a key template per record kind::

    Agent(..., shared={"case": Shared(CaseFile, key="{case_id}")})

Every task whose card has the same ``case_id`` sees the record in its views
("Shared: case (v3, ...)"), read from a snapshot on its card, and writes it only
through verified skills that declare it (``Skill(shares=["case"])``,
``ctx.shared("case")``, ``ctx.write_shared("case", value)``). A write is a
compare-and-set against the version the decision saw: two tasks writing at once, one
wins, the other's step is undone and decided again on the new version; no update is
lost, none applied twice, across a ``kill -9`` anywhere (:mod:`skillstate.shared.runtime`).
Each record lives in the store as ``skillstate:shared:<name>:<key>``, audited like a
card (:mod:`skillstate.shared.record`). The command line: ``skillstate shared``.
"""

from __future__ import annotations

from skillstate.shared.access import VALUE_CHARS, SharedChange, Sharing
from skillstate.shared.declare import (
    KEY_CHARS,
    Shared,
    check_key,
    check_name,
    resolve_key,
    shared_problems,
)
from skillstate.shared.record import (
    RecordHead,
    landed,
    load_record,
    parse_id,
    record_id,
    record_ids,
    write_record,
)
from skillstate.shared.records import SharedSnapshot, SharedWrite

__all__ = [
    "KEY_CHARS",
    "VALUE_CHARS",
    "RecordHead",
    "Shared",
    "SharedChange",
    "SharedSnapshot",
    "SharedWrite",
    "Sharing",
    "check_key",
    "check_name",
    "landed",
    "load_record",
    "parse_id",
    "record_id",
    "record_ids",
    "resolve_key",
    "shared_problems",
    "write_record",
]
