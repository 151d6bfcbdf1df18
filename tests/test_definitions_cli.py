"""Pinned definitions through the command line (issue 26, point 1), as a deploy does it.

The agent lives in ``fetcher.py`` in the working directory, named ``fetcher:agent``
on the card. The test rewrites that file between commands, as a new release replaces
the code under the same reference: ``skillstate run`` starts a task under v1 and
stops it mid-way; ``skillstate resume`` under v2 (``fetch`` renamed ``download``) is
refused with one line naming the change (exit 8, nothing written); with the rename
declared it completes, running ``download``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from skillstate.store import open_store
from tests.cli_support import run_env

AGENT = "fetcher:agent"
EXIT_DEFINITION = 8

SOURCE = """
from skillstate import (
    Agent, AgentState, CallSkill, Finish, NoParams, Outcome, ScriptedPolicy, Skill,
    SkillRegistry, StateMachine, Verdict, patched,
)

FETCH, VERSION, PATCHES = {fetch!r}, {version!r}, [{patches}]


class FetchState(AgentState):
    prepared: bool = False
    page: str | None = None


def prepare(state, params: NoParams, ctx):
    return Outcome(writes={{"prepared": True}}, summary="prepared")


def fetch(state, params: NoParams, ctx):
    return Outcome(writes={{"page": "<page>"}}, summary="fetched by " + FETCH)


def prepared(state, outcome):
    return Verdict(ok=state.prepared, reason="prepared")


def fetched(state, outcome):
    return Verdict(ok=state.page == "<page>", reason="a page")


def follow_plan(view):
    state = view.state
    if state.pending_steps:
        return CallSkill(skill=state.pending_steps[0], params={{}}, reason="the plan")
    return Finish(summary="done")


agent = Agent(
    name="fetcher",
    state_type=FetchState,
    machine=StateMachine({{"init": ["preparing"], "preparing": ["fetching"],
                          "fetching": ["done"], "done": []}}, initial="init"),
    skills=SkillRegistry([
        Skill(prepare, outputs=["prepared"], step="preparing", verify=prepared),
        Skill(fetch, name=FETCH, version=VERSION, outputs=["page"], step="fetching",
              verify=fetched),
    ]),
    policy=ScriptedPolicy(follow_plan),
    plan=("prepare", FETCH),
    patches=PATCHES,
)
"""

ENV = {
    "SKILLSTATE_AGENTS": AGENT,  # resume imports the card's reference: allowed
    "PYTHONDONTWRITEBYTECODE": "1",  # the file is rewritten within a second: no stale .pyc
    "SKILLSTATE_ACTOR": "ops-alice",
}


def deploy(cwd: Path, fetch: str = "fetch", version: str = "1", patches: str = "") -> None:
    """Write ``fetcher.py``: the code ``fetcher:agent`` names from now on."""
    source = SOURCE.format(fetch=fetch, version=version, patches=patches)
    (cwd / "fetcher.py").write_text(textwrap.dedent(source), encoding="utf-8")


def cli(cwd: Path, *args: str) -> tuple[int, str, str]:
    return run_env(cwd, ENV, *args, "--quiet")


def head_version(cwd: Path, task_id: str) -> int:
    store = open_store(f"sqlite:///{cwd / 'state.db'}")
    try:
        return store.load(task_id).version
    finally:
        store.close()


def events(cwd: Path, task_id: str) -> list[dict[str, object]]:
    store = open_store(f"sqlite:///{cwd / 'state.db'}")
    try:
        return [e.model_dump(mode="json") for e in store.events(task_id)]
    finally:
        store.close()


def test_resume_under_a_renamed_skill_is_refused_then_patched(tmp_path: Path) -> None:
    """The done-when check, through ``skillstate run`` and ``skillstate resume``."""
    deploy(tmp_path)
    code, out, err = cli(tmp_path, "run", AGENT, "--task-id", "t1", "--max-steps", "1")
    assert code == 4, err  # stopped by --max-steps: resumable
    version = head_version(tmp_path, "t1")

    deploy(tmp_path, fetch="download")
    code, out, err = cli(tmp_path, "resume", "t1")
    assert code == EXIT_DEFINITION, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: task 't1' is pinned to definition")
    assert "skill 'fetch' removed, skill 'download' added (a rename?" in lines[0]
    assert "Traceback" not in err
    assert head_version(tmp_path, "t1") == version

    deploy(
        tmp_path, fetch="download", patches='patched("rename-fetch", renamed={"fetch": "download"})'
    )
    code, out, err = cli(tmp_path, "resume", "t1")
    assert code == 0, (out, err)
    assert "completed" in out
    ran = [e["skill"] for e in events(tmp_path, "t1") if e["skill"] and e["verdict"]]
    assert ran == ["prepare", "download"]
    [carry] = [e for e in events(tmp_path, "t1") if e["action"]["kind"] == "definition"]
    assert (carry["actor"], carry["action"]["patches"]) == ("runtime", ["rename-fetch"])

    code, out, err = run_env(tmp_path, ENV, "show", "t1")
    assert code == 0, err
    assert "definition" in out
    assert "carried across rename-fetch" in out


def test_accept_definition_on_resume(tmp_path: Path) -> None:
    """A version bump nobody declared: refused, then accepted by a person, on the record."""
    deploy(tmp_path)
    code, _, err = cli(tmp_path, "run", AGENT, "--task-id", "t2", "--max-steps", "1")
    assert code == 4, err
    deploy(tmp_path, version="2")
    code, _, err = cli(tmp_path, "resume", "t2")
    assert code == EXIT_DEFINITION
    assert "skill 'fetch' version 1 -> 2" in err
    code, out, err = cli(tmp_path, "resume", "t2", "--accept-definition")
    assert code == 0, (out, err)
    [accepted] = [e for e in events(tmp_path, "t2") if e["action"]["kind"] == "definition"]
    assert accepted["actor"] == "human"
    assert accepted["action"]["actor"] == "ops-alice"
    assert accepted["action"]["changes"] == ["skill 'fetch' version 1 -> 2 [accepted]"]
