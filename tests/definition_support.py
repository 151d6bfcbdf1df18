"""Agents for the pinned-definition tests: one agent at several definitions.

A *fetcher* follows its plan (``prepare``, ``fetch``, ``summarize``), one skill per
decision, then finishes. Its later definitions rename ``fetch`` to ``download``
(with and without the patch that declares it) or bump its version. Each skill run
appends ``<skill>`` to the file the card names (``log``), so a test in another
process (a worker, the CLI) sees which skills ran.

``agent`` is the definition ``$SKILLSTATE_TEST_DEFINITION`` names (``v1`` by default):
worker processes started with different values hold different definitions of the
same ``tests.definition_support:agent``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    ScriptedPolicy,
    Skill,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.definitions import Patch, patched
from skillstate.engine.actions import Action

PLAN = ("prepare", "fetch", "summarize")


class FetchState(AgentState):
    url: str = "https://example.org/report"
    prepared: bool = False
    page: str | None = None
    summary: str | None = None
    log: str = ""
    """A file each skill run appends its name to ("" for none)."""


machine = StateMachine(
    {
        "init": ["preparing"],
        "preparing": ["fetching"],
        "fetching": ["summarizing"],
        "summarizing": ["done"],
        "done": [],
    },
    initial="init",
)


def _noted(state: FetchState, name: str) -> None:
    if state.log:
        with open(state.log, "a", encoding="utf-8") as out:
            out.write(name + "\n")


def _prepared(state: FetchState, outcome: Outcome) -> Verdict:
    return Verdict(ok=state.prepared, reason="prepared" if state.prepared else "not prepared")


def _fetched(state: FetchState, outcome: Outcome) -> Verdict:
    return Verdict(ok=bool(state.page), reason="a page" if state.page else "no page")


def _summarized(state: FetchState, outcome: Outcome) -> Verdict:
    return Verdict(ok=bool(state.summary), reason="a summary" if state.summary else "none")


def _skills(
    fetch_name: str, fetch_version: str, fetch_approval: bool, fetch_aliases: Sequence[str] = ()
) -> SkillRegistry:
    def prepare(state: FetchState, params: NoParams, ctx: SkillContext) -> Outcome:
        _noted(state, "prepare")
        return Outcome(writes={"prepared": True}, summary="prepared")

    def fetch(state: FetchState, params: NoParams, ctx: SkillContext) -> Outcome:
        _noted(state, fetch_name)
        return Outcome(writes={"page": f"<page of {state.url}>"}, summary="fetched")

    def summarize(state: FetchState, params: NoParams, ctx: SkillContext) -> Outcome:
        _noted(state, "summarize")
        return Outcome(writes={"summary": f"summary of {state.page}"}, summary="summarized")

    return SkillRegistry(
        [
            Skill(prepare, outputs=["prepared"], step="preparing", verify=_prepared),
            Skill(
                fetch,
                name=fetch_name,
                version=fetch_version,
                outputs=["page"],
                step="fetching",
                verify=_fetched,
                approval=fetch_approval,
                aliases=fetch_aliases,
            ),
            Skill(summarize, outputs=["summary"], step="summarizing", verify=_summarized),
        ]
    )


def follow_plan(view: View[FetchState]) -> Action:
    """Call the plan's next skill; finish when the plan is done."""
    state = view.state
    if state.pending_steps:
        return CallSkill(skill=state.pending_steps[0], params={}, reason="next in the plan")
    return Finish(summary=state.summary or "done")


def build(
    fetch_name: str = "fetch",
    *,
    fetch_version: str = "1",
    fetch_approval: bool = False,
    fetch_aliases: Sequence[str] = (),
    patches: Sequence[Patch] = (),
    state_type: type[FetchState] = FetchState,
) -> Agent[FetchState]:
    """The fetcher with its fetch skill named ``fetch_name`` at ``fetch_version`` (a person
    approves each call with ``fetch_approval``)."""
    return Agent(
        name="fetcher",
        state_type=state_type,
        machine=machine,
        skills=_skills(fetch_name, fetch_version, fetch_approval, fetch_aliases),
        policy=ScriptedPolicy(follow_plan),
        plan=tuple(fetch_name if step == "fetch" else step for step in PLAN),
        patches=patches,
    )


RENAME = patched("rename-fetch", renamed={"fetch": "download"})

v1 = build()
v2 = build("download")
"""``fetch`` renamed ``download``, nothing declared: tasks of v1 are refused."""
v2_patched = build("download", patches=[RENAME])
"""The same rename, declared: tasks of v1 are carried across it."""
v1_fetch2 = build(fetch_version="2")
"""``fetch`` at version 2, nothing declared."""

DEFINITIONS = {"v1": v1, "v2": v2, "v2_patched": v2_patched, "v1_fetch2": v1_fetch2}
agent = DEFINITIONS[os.environ.get("SKILLSTATE_TEST_DEFINITION", "v1")]
