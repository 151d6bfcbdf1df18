"""Rejected approaches stay rejected (issue 26): until the facts they depended on change.

``render(title)`` reads ``style``: under the ``short`` style a long title is judged
wrong for good (``Verdict.failed(..., permanent=True)``). ``bump`` writes an
unrelated field; ``restyle`` changes the style. The stall guard's ``tried`` forgets a
failure at the first progress; ``rejected`` does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from skillstate import (
    Action,
    Agent,
    AgentState,
    CallSkill,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.store.memory import MemoryStore
from tests.test_transitive_stale import howto_lines


class PageState(AgentState):
    style: str = "short"
    title: str | None = None
    counter: int = 0
    flaky_ok: bool = False


class Title(BaseModel):
    title: str


class Style(BaseModel):
    style: str


class Login(BaseModel):
    user: str
    password: str


def page_agent(actions: list[Action], runs: list[str]) -> Agent[PageState]:
    skills: SkillRegistry = SkillRegistry()

    @skills.skill(reads=["style"], outputs=["title"])
    def render(state: PageState, params: Title, ctx: SkillContext) -> Outcome:
        """Set the page title."""
        runs.append(f"render {params.title}")
        return Outcome(writes={"title": params.title})

    @render.verifier
    def _fits(state: PageState, outcome: Outcome) -> Verdict:
        if state.style == "short" and len(state.title or "") > 5:
            return Verdict.failed("too long for the short style", permanent=True)
        return Verdict.passed()

    @skills.skill(reads=["counter"], outputs=["counter"])
    def bump(state: PageState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Unrelated progress."""
        runs.append("bump")
        return Outcome(writes={"counter": state.counter + 1})

    bump.verifier(lambda s, o: s.counter > 0)

    @skills.skill(reads=["style"], outputs=["style"])
    def restyle(state: PageState, params: Style, ctx: SkillContext) -> Outcome:
        """Change the style."""
        runs.append(f"restyle {params.style}")
        return Outcome(writes={"style": params.style})

    restyle.verifier(lambda s, o: bool(s.style))

    @skills.skill(reads=["counter"], outputs=["flaky_ok"], max_retries=0)
    def check(state: PageState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Judge the world (a deploy that is not ready on the first look)."""
        runs.append("check")
        return Outcome(writes={"flaky_ok": runs.count("check") > 1})

    check.verifier(lambda s, o: Verdict(ok=s.flaky_ok, reason="not ready yet"))

    @skills.skill(reads=["counter"], outputs=["counter"], max_retries=0)
    def crash(state: PageState, params: NoParams, ctx: SkillContext) -> Outcome:
        """A tool that fails (a fault, not a judgment)."""
        runs.append("crash")
        raise ConnectionError("the tool timed out")

    crash.verifier(lambda s, o: bool(o.writes))

    @skills.skill(reads=["style"], outputs=["title"], max_retries=0)
    def sign_in(state: PageState, params: Login, ctx: SkillContext) -> Outcome:
        """Sign in (its params hold a password)."""
        runs.append("sign_in")
        return Outcome(writes={"title": "in"})

    sign_in.verifier(lambda s, o: Verdict.failed("wrong password", permanent=True))

    script: Iterator[Action] = iter(actions)
    return Agent(
        name="pages",
        state_type=PageState,
        machine=StateMachine({"init": ["init"]}, final=["init"]),
        skills=skills,
        policy=ScriptedPolicy(lambda view: next(script)),
    )


def call(skill: str, **params: Any) -> CallSkill:
    return CallSkill(skill=skill, params=params)


LONG = call("render", title="a long title")


def run(actions: list[Action]) -> tuple[Runtime[PageState], list[str]]:
    runs: list[str] = []
    # No stall guard here: these tests count runs, the guard has its own test below.
    runtime = Runtime(page_agent(actions, runs), MemoryStore(), max_stalled=None, max_repeats=None)
    runtime.start("t")
    for _ in actions:
        runtime.step("t")
    return runtime, runs


def view_of(runtime: Runtime[PageState]) -> View[PageState]:
    return runtime.agent.view(runtime.load("t"))


class TestRemembered:
    def test_a_rejection_survives_unrelated_progress_and_is_shown(self) -> None:
        runtime, _ = run([LONG, call("bump")])
        state = runtime.load("t")
        assert state.tried == ()  # bump made progress: the guard forgot the failure
        [entry] = state.rejected  # ... the rejection did not
        assert (entry.skill, entry.reason, entry.permanent) == (
            "render",
            "too long for the short style",
            True,
        )
        assert entry.reads == ("style",)
        view = view_of(runtime)
        assert view.rejected == (entry,)
        assert (
            'Rejected earlier (until style changes): render {"title": "a long title"} '
            "-> too long for the short style [an identical call is refused]"
        ) in view.text

    def test_an_identical_call_is_refused_and_a_different_one_runs(self) -> None:
        runtime, runs = run([LONG, call("bump"), LONG, call("render", title="tiny")])
        assert runs == ["render a long title", "bump", "render tiny"]  # never ran again
        state = runtime.load("t")
        refused = next(e for e in state.errors if e.kind == "action_rejected")
        assert refused.message.startswith(
            'refused: render {"title": "a long title"} was rejected at step 0002'
        )
        assert "it stays rejected until style changes" in refused.message
        assert state.title == "tiny"

    def test_it_goes_when_what_it_read_changes(self) -> None:
        runtime, runs = run([LONG, call("restyle", style="long"), LONG])
        state = runtime.load("t")
        assert state.rejected == ()
        assert "Rejected earlier" not in runtime.agent.view(state).text
        assert runs == ["render a long title", "restyle long", "render a long title"]
        assert state.title == "a long title"  # the same call, now judged right

    def test_the_guard_counts_a_refusal_as_a_repeat(self) -> None:
        """The refusal carries the rejection's reason, so a stubborn policy stalls as soon
        as it would have if the call had run and failed again."""
        runs: list[str] = []
        runtime = Runtime(page_agent([LONG] * 5, runs), MemoryStore(), max_repeats=3)
        runtime.start("t")
        result = runtime.run("t")
        assert result.stopped == "stalled"
        assert runs == ["render a long title"]
        assert result.state.tried[-1].times == 3


class TestNotRejections:
    def test_a_verify_that_may_pass_later_is_shown_not_refused(self) -> None:
        """A non-permanent verify failure judges the outcome, but the world may move:
        the same call runs again (and here passes)."""
        runtime, runs = run([call("check"), call("bump"), call("check")])
        assert runs == ["check", "bump", "check"]
        state = runtime.load("t")
        assert state.flaky_ok
        # It read ``counter``, which bump changed: the entry went with it.
        assert state.rejected == ()

    def test_a_non_permanent_rejection_is_shown_while_it_holds(self) -> None:
        runtime, _ = run([call("check")])
        [entry] = runtime.load("t").rejected
        assert not entry.permanent
        text = view_of(runtime).text
        assert "Rejected earlier (until counter changes): check -> not ready yet" in text
        assert "[an identical call is refused]" not in text

    def test_a_fault_is_not_a_rejection(self) -> None:
        runtime, runs = run([call("crash"), call("crash")])
        assert runs == ["crash", "crash"]  # a retry may fix a fault: it runs again
        assert runtime.load("t").rejected == ()


def test_a_secret_param_is_never_kept() -> None:
    """The entry keeps a digest of the params and a masked rendering, never the value."""
    attempt = call("sign_in", user="ann", password="hunter2-secret")
    runtime, runs = run([attempt, call("bump"), attempt, call("sign_in", user="ann", password="x")])
    assert runs == ["sign_in", "bump", "sign_in"]  # the identical call was refused
    stored = json.dumps(runtime.store.load("t").state)
    assert "hunter2-secret" not in stored
    assert all("hunter2-secret" not in json.dumps(e.model_dump(mode="json"))
               for e in runtime.store.events("t"))  # fmt: skip
    entry = runtime.load("t").rejected[-1]
    assert "hunter2-secret" not in entry.shown
    assert entry.params.startswith("sha256:")


def test_the_list_is_bounded() -> None:
    titles = [f"long title {i}" for i in range(PageState.MAX_REJECTED + 3)]
    runtime, _ = run([call("render", title=t) for t in titles])
    kept = runtime.load("t").rejected
    assert len(kept) == PageState.MAX_REJECTED
    assert kept[-1].shown == f'render {{"title": "{titles[-1]}"}}'


def test_the_how_to_runs(tmp_path: Path) -> None:
    """docs/howto.md, "Keep a rejected approach rejected": it prints what its comments say."""
    assert howto_lines("Keep a rejected approach rejected", tmp_path) == [
        '[\'Rejected earlier (until style changes): render {"title": "Quarterly results"} '
        "-> too long for the short style [an identical call is refused]']",
        'refused: render {"title": "Quarterly results"} was rejected at step 0002 '
        "(too long for the short style)",
        "() Quarterly results",
    ]
