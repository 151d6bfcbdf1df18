"""Accepting a reviewed proposal: the task's first commit, by a person, with its evidence.

:func:`preview` builds the card a proposal gives (and the agent's blank card, to diff
against) without writing anything; :func:`accept_proposal` checks the proposal again,
as reviewed (:func:`~skillstate.extract.check.check` with ``reviewed=True``: every
cited item must still hold up against the turns it cites, an item without turns is
the reviewer's own), stores each turn of the transcript as an artifact (masked with
the agent's redaction policy, sealed when a key is set) and a manifest of them, and
commits the card as version 1 with ``actor: human``. Its event's action records who
accepted it, the manifest's ref, the extractor and every item's citations; each
evidence item of the card points at the artifact of the turn it cites, so
``load_evidence`` and the inspector reach the raw turn.

A proposal that no longer validates is refused with one line naming the field and
nothing is written: not the card, not an artifact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skillstate.errors import InvariantBroken, UsageError
from skillstate.extract.check import check
from skillstate.extract.proposal import Extraction, Proposal, TranscriptRecord
from skillstate.extract.target import Target
from skillstate.extract.transcript import Transcript
from skillstate.state.diff import Patch, make_patch
from skillstate.state.model import AgentState, Evidence, StepRecord

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.store.base import Store

__all__ = ["Preview", "accept_proposal", "pinned_transcript", "preview"]

PLACEHOLDER = "sha256:" + "0" * 64
"""The ref an evidence item has in a preview, before its turn is stored."""
MANIFEST_TYPE = "application/vnd.skillstate.transcript+json"
SUMMARY_CHARS = 200


@dataclass(frozen=True)
class Preview:
    """What accepting would commit, and how it differs from the agent's blank card."""

    blank: AgentState
    proposed: AgentState
    changes: Patch
    """JSON Patch from the blank card to the proposed one (the evidence refs are
    placeholders until the turns are stored)."""


def pinned_transcript(record: TranscriptRecord, what: str = "proposal") -> Transcript:
    """The proposal's transcript, refused (one line) when its turns were edited."""
    numbers = [t.turn for t in record.turns]
    if numbers != list(range(1, len(numbers) + 1)):
        raise UsageError(f"{what}: transcript.turns: turns are numbered 1, 2, 3... as extracted")
    transcript = record.transcript()
    if transcript.digest != record.sha256:
        raise UsageError(
            f"{what}: transcript: its turns were edited (sha256 differs); the transcript "
            "is the evidence the items cite: edit the items, not the turns"
        )
    return transcript


def preview(
    agent: Agent[Any], proposal: Proposal, task_id: str, *, what: str = "proposal"
) -> Preview:
    """The card ``proposal`` gives a new task ``task_id``, checked; nothing is written."""
    transcript = pinned_transcript(proposal.transcript, what)
    items = _checked(agent, proposal, transcript, what)
    blank = agent.new_state(task_id)
    proposed = _proposed(agent, items, transcript, task_id, refs={}, what=what)
    return Preview(blank, proposed, make_patch(blank.to_json(), proposed.to_json()))


def accept_proposal(
    store: Store,
    agent: Agent[Any],
    proposal: Proposal,
    *,
    task_id: str,
    actor: str,
    what: str = "proposal",
) -> AgentState:
    """Start task ``task_id`` from ``proposal``: one ``human`` commit (see the module)."""
    from skillstate.engine.commit import Committer
    from skillstate.engine.draft import Draft
    from skillstate.engine.lease import human_lease

    transcript = pinned_transcript(proposal.transcript, what)
    items = _checked(agent, proposal, transcript, what)
    _proposed(agent, items, transcript, task_id, refs={}, what=what)  # refuse before writing
    with human_lease(store, task_id) as fence:
        if _exists(store, task_id):
            raise UsageError(f"task {task_id!r} already exists; nothing was written")
        refs, manifest = _store_turns(store, agent, transcript)
        state = _proposed(agent, items, transcript, task_id, refs=refs, what=what)
        action = _action(items, proposal.extractor.name, actor, manifest)
        committer = Committer(agent, store, fence=lambda _: fence)
        created, _ = committer.commit(None, Draft(after=state), action, "human")
        return created


def review_rows(proposal: Proposal) -> list[tuple[str, str, str]]:
    """``(field, value, cited turns)`` per item: what a reviewer reads (table, form)."""
    rows: list[tuple[str, str, str]] = []

    def cited(turns: tuple[int, ...]) -> str:
        return ", ".join(str(t) for t in turns) or "(yours)"

    if proposal.goal is not None:
        rows.append(("goal", proposal.goal.text, cited(proposal.goal.turns)))
    rows += [("constraint", c.text, cited(c.turns)) for c in proposal.constraints]
    for fact in proposal.facts:
        value = json.dumps(fact.value, ensure_ascii=False)
        rows.append((fact.key, value, cited(fact.turns)))
    rows += [("completed step", s.name, cited(s.turns)) for s in proposal.completed_steps]
    rows += [("pending step", s.name, cited(s.turns)) for s in proposal.pending_steps]
    rows += [("evidence", e.summary, cited(e.turns)) for e in proposal.evidence]
    return rows


# ---------------------------------------------------------------- internals


def _exists(store: Store, task_id: str) -> bool:
    from skillstate.errors import TaskNotFound

    try:
        store.load(task_id, verify=False)
    except TaskNotFound:
        return False
    return True


def _checked(
    agent: Agent[Any], proposal: Proposal, transcript: Transcript, what: str
) -> Extraction:
    """The proposal's items as checked (keys made explicit, values typed), or a refusal."""
    target = Target.of(agent)
    if proposal.agent and target.agent and proposal.agent != target.agent:
        raise UsageError(
            f"{what} was extracted for agent {proposal.agent!r}, not {target.agent!r}: "
            f"pass --agent {proposal.agent}, or extract again for this agent"
        )
    items, problems = check(proposal.items, transcript, target, reviewed=True)
    if problems:
        raise UsageError(f"{what} refused: {problems[0]}; nothing was written")
    return items


def _proposed(
    agent: Agent[Any],
    items: Extraction,
    transcript: Transcript,
    task_id: str,
    *,
    refs: Mapping[int, str],
    what: str,
) -> AgentState:
    fields = _fields(agent, items, transcript, refs)
    try:
        state: AgentState = agent.new_state(task_id, **fields)
    except UsageError as exc:
        raise UsageError(f"{what} refused: {exc}; nothing was written") from None
    broken = agent.broken_invariant(state)
    if broken is not None:
        raise InvariantBroken(f"{what} refused: the card breaks invariant {broken}")
    return state


def _fields(
    agent: Agent[Any], items: Extraction, transcript: Transcript, refs: Mapping[int, str]
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if items.goal is not None:
        fields["goal"] = items.goal.text
    extracted = [c.text for c in items.constraints]
    fields["constraints"] = tuple(dict.fromkeys([*agent.constraints, *extracted]))
    free: dict[str, Any] = {}
    for fact in items.facts:
        if fact.key.startswith("facts."):
            free[fact.key[len("facts.") :]] = fact.value
        else:
            fields[fact.key] = fact.value
    if free:
        fields["facts"] = free
    records = _records(agent, items)
    if records:
        cls = agent.state_type
        fields["completed_steps"] = tuple(records[-cls.MAX_STEPS :])
        fields["steps_taken"] = len(records)
    fields["pending_steps"] = _plan(agent, items)
    evidence = _evidence(items, transcript, refs)
    if evidence:
        fields["evidence"] = tuple(evidence[-agent.state_type.MAX_EVIDENCE :])
    return fields


def _records(agent: Agent[Any], items: Extraction) -> list[StepRecord]:
    records = []
    for number, step in enumerate(items.completed_steps, start=1):
        skill = agent.skills.get(step.name)
        where = f"turn {', '.join(str(t) for t in step.turns)}" if step.turns else "the review"
        summary = f"done before the task started ({where}): {' '.join(step.quote.split())}"
        records.append(
            StepRecord(
                id=f"{number:04d}-{step.name}",
                step=(skill.step if skill and skill.step else agent.machine.initial),
                action="call_skill",
                skill=step.name,
                summary=summary[:SUMMARY_CHARS],
            )
        )
    return records


def _plan(agent: Agent[Any], items: Extraction) -> tuple[str, ...]:
    """The proposal's pending steps, else the agent's plan less the steps done already."""
    if items.pending_steps:
        return tuple(s.name for s in items.pending_steps)
    plan = list(agent.plan)
    for step in items.completed_steps:
        if step.name in plan:
            plan.remove(step.name)
    return tuple(plan)


def _evidence(items: Extraction, transcript: Transcript, refs: Mapping[int, str]) -> list[Evidence]:
    out = []
    for item in items.evidence:
        for number in item.turns or ():
            turn = transcript.turns[number - 1]
            who = f"{turn.role} {turn.name}" if turn.name else turn.role
            out.append(
                Evidence(
                    kind="transcript",
                    source=f"turn {number} ({who})",
                    summary=item.summary[:SUMMARY_CHARS],
                    ref=refs.get(number, PLACEHOLDER),
                )
            )
    return out


def _store_turns(
    store: Store, agent: Agent[Any], transcript: Transcript
) -> tuple[dict[int, str], str]:
    """Each turn as a masked artifact, and the manifest listing them; their refs."""
    from skillstate.store.sealing import write_artifact

    redactor = agent.redaction.redactor()
    refs: dict[int, str] = {}
    rows = []
    for turn in transcript.turns:
        data = redactor.text(turn.text).encode("utf-8")
        refs[turn.number] = ref = write_artifact(store, data, media_type="text/plain")
        rows.append({"turn": turn.number, "role": turn.role, "name": turn.name, "ref": ref})
    manifest = {
        "source": transcript.source,
        "format": transcript.format,
        "sha256": transcript.digest,
        "turns": rows,
    }
    body = json.dumps(manifest, ensure_ascii=False, indent=1).encode("utf-8")
    return refs, write_artifact(store, body, media_type=MANIFEST_TYPE)


def _action(items: Extraction, extractor: str, actor: str, manifest: str) -> dict[str, Any]:
    """The create event's action: who accepted what, and where every item came from."""
    cited: dict[str, Any] = {}
    if items.goal is not None:
        cited["goal"] = list(items.goal.turns)
    cited["constraints"] = [list(c.turns) for c in items.constraints]
    cited["facts"] = {f.key: list(f.turns) for f in items.facts}
    cited["completed_steps"] = [list(s.turns) for s in items.completed_steps]
    cited["pending_steps"] = [list(s.turns) for s in items.pending_steps]
    return {
        "kind": "create",
        "by": "extract",
        "actor": actor,
        "extractor": extractor,
        "transcript": manifest,
        "cited": cited,
    }
