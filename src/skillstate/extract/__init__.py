"""State from a conversation (``skillstate extract``): a proposed card, reviewed, accepted.

A transcript (:mod:`~skillstate.extract.transcript`) is masked, then read by an
extractor, the rules (:mod:`~skillstate.extract.heuristic`) or a model through any
provider (:mod:`~skillstate.extract.model`), into items that each cite the turns they
came from; the items that do not hold up are rejected with a note
(:mod:`~skillstate.extract.check`). The result is a :class:`Proposal`
(:mod:`~skillstate.extract.proposal`), written as YAML for a person to review and
edit; accepting it (:mod:`~skillstate.extract.accept`) checks it again and starts the
task with one ``human`` commit whose evidence points at the stored turns.
``--propose-schema`` drafts a state class for a new agent from the facts
(:mod:`~skillstate.extract.schema`).
"""

from __future__ import annotations

from skillstate.extract.accept import Preview, accept_proposal, preview, review_rows
from skillstate.extract.check import Problem, check
from skillstate.extract.extractor import HEURISTIC, extract
from skillstate.extract.heuristic import heuristic_extract
from skillstate.extract.model import extraction_schema, model_extract
from skillstate.extract.proposal import (
    Extraction,
    Proposal,
    dump_proposal,
    load_proposal,
    read_proposal,
)
from skillstate.extract.schema import propose_schema
from skillstate.extract.target import Target
from skillstate.extract.transcript import Transcript, Turn, parse_transcript, read_transcript

__all__ = [
    "HEURISTIC",
    "Extraction",
    "Preview",
    "Problem",
    "Proposal",
    "Target",
    "Transcript",
    "Turn",
    "accept_proposal",
    "check",
    "dump_proposal",
    "extract",
    "extraction_schema",
    "heuristic_extract",
    "load_proposal",
    "model_extract",
    "parse_transcript",
    "preview",
    "propose_schema",
    "read_proposal",
    "read_transcript",
    "review_rows",
]
