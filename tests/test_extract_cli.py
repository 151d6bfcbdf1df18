"""``skillstate extract`` end to end on SQLite: extract, review, accept; the secret of the
transcript masked in the proposal, the store and the prompt; an edited proposal that
no longer holds up refused in one line with nothing written."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.actions import LoadEvidence
from skillstate.engine.agent import load_agent
from skillstate.engine.evidence import load_evidence, reader
from skillstate.llm.base import Message
from skillstate.llm.replay import RecordingProvider, ScriptedProvider
from skillstate.store import open_store
from skillstate.store.sealing import read_artifact
from tests.cli_support import run_env
from tests.test_cli import assert_no_traceback

TICKET = "skillstate.examples.ticket:agent"
SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"
MESSAGES = [
    {"role": "system", "content": "You are the helpdesk assistant. Never promise a refund."},
    {
        "role": "user",
        "content": "Hi. My VPN connection keeps dropping since this morning.\n"
        f"Do not reset my password. My api_key={SECRET}\nThe priority is P2.",
    },
    {
        "role": "assistant",
        "content": "Looking into it.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "record_ticket_type", "arguments": '{"text": "vpn"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "ticket_type: network"},
    {"role": "user", "content": "Thanks. Then plan solution, and only use the knowledge base."},
]
ACTOR = {"SKILLSTATE_ACTOR": "dana"}


def cli(cwd: Path, *args: str) -> tuple[int, str, str]:
    code, out, err = run_env(cwd, ACTOR, *args)
    assert_no_traceback(out, err)
    return code, out, err


@pytest.fixture
def chat(tmp_path: Path) -> Path:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(MESSAGES), encoding="utf-8")
    return path


def _extract(cwd: Path) -> Path:
    code, out, err = cli(cwd, "extract", "chat.json", "--agent", TICKET, "-o", "p.yaml")
    assert code == 0, err
    assert "proposal written to p.yaml" in out
    return cwd / "p.yaml"


def test_extract_then_accept_starts_the_task(tmp_path: Path, chat: Path) -> None:
    """The table shows field, value and cited turns; accepting commits version 1 as a
    person, with the fields, the citations in the event and the turns as evidence."""
    proposal = _extract(tmp_path)
    code, out, err = cli(tmp_path, "extract", "chat.json", "--agent", TICKET, "-o", "p.yaml")
    assert code == 0, err
    assert '│ priority       │ "P2"' in out
    assert '│ ticket_type    │ "network"' in out
    assert "cited turns" in out
    text = proposal.read_text(encoding="utf-8")
    assert SECRET not in text
    assert "api_key=***" in text

    url = f"sqlite:///{tmp_path / 'state.db'}"
    code, out, err = cli(
        tmp_path,
        "extract",
        "--accept",
        "p.yaml",
        "--agent",
        TICKET,
        "--task-id",
        "t1",
        "--store",
        url,
        "--yes",
    )
    assert code == 0, err
    assert "/priority" in out
    assert "task t1 started from p.yaml" in out

    store = open_store(url)
    try:
        head = store.load("t1")
        card = head.state
        assert head.version == 1
        assert (card["priority"], card["ticket_type"]) == ("P2", "network")
        assert "Do not reset my password." in card["constraints"]
        assert card["pending_steps"] == ["plan_solution"]
        assert [s["skill"] for s in card["completed_steps"]] == ["record_ticket_type"]
        assert card["steps_taken"] == 1
        [event] = store.events("t1")
        assert event.actor == "human"
        action = event.action
        assert (action["kind"], action["by"], action["actor"]) == ("create", "extract", "dana")
        assert action["cited"]["facts"] == {"priority": [2], "ticket_type": [4]}
        manifest = json.loads(read_artifact(store, action["transcript"]))
        assert [t["turn"] for t in manifest["turns"]] == [1, 2, 3, 4, 5]
        # Each evidence item reaches its raw turn, masked; a decision may load it.
        agent = load_agent(TICKET)
        state = agent.parse_state(card)
        by_source = {e.source: e.ref for e in state.evidence}
        user_turn = read_artifact(store, by_source["turn 2 (user)"]).decode()
        assert "My VPN connection keeps dropping" in user_turn
        assert "api_key=***" in user_turn
        assert SECRET not in user_turn
        draft = load_evidence(
            store, state, LoadEvidence(ref=by_source["turn 4 (tool record_ticket_type)"]), "0002"
        )
        assert draft.after.peek == by_source["turn 4 (tool record_ticket_type)"]
        assert reader(store, agent.redaction.redactor())(draft.after.peek) == "ticket_type: network"
        for ref in store.artifact_refs():
            assert SECRET.encode() not in store.get_artifact(ref)
    finally:
        store.close()
    assert SECRET.encode() not in (tmp_path / "state.db").read_bytes()
    code, out, err = cli(tmp_path, "show", "t1", "--store", url)
    assert code == 0
    assert "turn 4 (tool record_ticket_type)" in out
    assert "sha256:" in out
    code, out, err = cli(tmp_path, "resume", "t1", "--store", url, "-q")
    assert code == 0, err
    assert "completed" in out  # the agent picks up from the extracted card


def _edited(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "  turns: [2]\n  quote: The priority is P2",
            "  turns: [9]\n  quote: The priority is P2",
            "error: proposal p.yaml refused: facts[0]: fact 'priority': cites turn 9, which does "
            "not exist (the transcript has 5); nothing was written",
        ),
        (
            "value: P2",
            "value: P7",
            "error: proposal p.yaml refused: facts[0]: fact 'priority': priority: Input should "
            "be 'P1', 'P2', 'P3' or 'P4'; nothing was written",
        ),
        (
            "value: P2",
            "value: P3",
            "error: proposal p.yaml refused: facts[0]: fact 'priority': its value 'P3' does not "
            "occur in its quote; nothing was written",
        ),
        (
            "- text: Never promise a refund.",
            "- text: Never promise a refund.\n  turns: [1]\n  quote: Always promise a refund\n"
            "- text: Never promise it.",
            "error: proposal p.yaml refused: constraints[0]: 'Never promise a refund.': its quote "
            "'Always promise a refund' does not occur in turn 1; nothing was written",
        ),
        (
            "text: |-\n      Hi. My VPN",
            "text: |-\n      Hi. My LAN",
            "error: proposal p.yaml: transcript: its turns were edited (sha256 differs); the "
            "transcript is the evidence the items cite: edit the items, not the turns",
        ),
        (
            "- name: plan_solution",
            "- name: launch_rocket",
            "error: proposal p.yaml refused: pending_steps[0]: step 'launch_rocket' is not a "
            "skill or step of the agent; nothing was written",
        ),
        (
            "proposal: 1",
            "proposal: 2",
            "error: proposal p.yaml refused: proposal: Input should be 1",
        ),
    ],
    ids=[
        "missing turn",
        "bad type",
        "unsupported value",
        "bad quote",
        "edited turn",
        "unknown step",
        "format",
    ],
)
def test_an_edited_proposal_that_no_longer_holds_is_refused(
    tmp_path: Path, chat: Path, old: str, new: str, message: str
) -> None:
    """Exit 2, one line naming the field, and nothing written: no task, no artifact."""
    proposal = _extract(tmp_path)
    _edited(proposal, old, new)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    code, out, err = cli(
        tmp_path, "extract", "--accept", "p.yaml", "--agent", TICKET, "--store", url, "--yes"
    )
    assert code == 2, (out, err)
    assert err.strip() == message
    assert not (tmp_path / "state.db").exists()  # not even the store was opened


def test_an_item_the_reviewer_adds_without_turns_is_recorded_as_theirs(
    tmp_path: Path, chat: Path
) -> None:
    proposal = _extract(tmp_path)
    _edited(proposal, "constraints:\n", "constraints:\n- text: Reply in French.\n")
    _edited(
        proposal, "facts:\n", "facts:\n- key: city\n  value: Lisbon\n- key: priority\n  value: P2\n"
    )
    url = f"sqlite:///{tmp_path / 'state.db'}"
    code, _, err = cli(
        tmp_path,
        "extract",
        "--accept",
        "p.yaml",
        "--agent",
        TICKET,
        "--task-id",
        "t2",
        "--store",
        url,
        "--yes",
    )
    assert code == 0, err
    store = open_store(url)
    try:
        card = store.load("t2").state
        assert "Reply in French." in card["constraints"]
        assert card["facts"] == {"city": "Lisbon"}  # a key that is no typed field: a free fact
        assert store.events("t2")[0].action["cited"]["constraints"][0] == []
    finally:
        store.close()


def test_accept_needs_yes_without_a_terminal_and_refuses_an_existing_task(
    tmp_path: Path, chat: Path
) -> None:
    _extract(tmp_path)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    base = ("extract", "--accept", "p.yaml", "--agent", TICKET, "--task-id", "t3", "--store", url)
    code, _, err = cli(tmp_path, *base)
    assert code == 2
    assert "pass --yes to accept; nothing was written" in err
    assert cli(tmp_path, *base, "--yes")[0] == 0
    code, _, err = cli(tmp_path, *base, "--yes")
    assert code == 2
    assert "task 't3' already exists; nothing was written" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("extract",), "give a TRANSCRIPT to extract from, or --accept PROPOSAL.yaml"),
        (("extract", "chat.json"), "give --agent MODULE:ATTR"),
        (("extract", "nope.json", "--agent", TICKET), "cannot read transcript nope.json"),
        (
            ("extract", "chat.json", "--agent", TICKET, "--model", "replay:none.json"),
            "--model replay:none.json: no such file",
        ),
        (
            ("extract", "chat.json", "--agent", TICKET, "--store", "memory://"),
            "--task-id and --store belong to --accept",
        ),
        (("extract", "chat.json", "--accept", "p.yaml"), "--accept takes a reviewed proposal only"),
    ],
)
def test_bad_command_lines(tmp_path: Path, chat: Path, args: Sequence[str], message: str) -> None:
    code, _, err = cli(tmp_path, *args)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_the_model_path_from_a_recorded_cassette(tmp_path: Path, chat: Path) -> None:
    """``--model replay:FILE`` drives the extraction through a provider: the cassette
    is recorded from a scripted model here (a fabricated citation, then a repair)."""
    from skillstate.extract import extract, read_transcript

    replies = [
        json.dumps(
            {
                "goal": {"text": "x", "quote": "nowhere", "turns": [7]},
                "constraints": [],
                "facts": [],
                "completed_steps": [],
                "pending_steps": [],
                "evidence": [],
            }
        ),
        json.dumps(
            {
                "goal": {"text": "Fix the VPN", "quote": "VPN connection", "turns": [2]},
                "constraints": [],
                "facts": [],
                "completed_steps": [],
                "pending_steps": [],
                "evidence": [],
            }
        ),
    ]
    sent: list[list[Message]] = []

    def rule(messages: Sequence[Message], schema: Any) -> str:
        sent.append(list(messages))
        return replies[len(sent) - 1]

    cassette = tmp_path / "cassette.json"
    recorder = RecordingProvider(ScriptedProvider(rule), cassette)
    extract(read_transcript(chat), load_agent(TICKET), provider=recorder)
    assert all(SECRET not in m.content for call in sent for m in call)
    code, _, err = cli(
        tmp_path,
        "extract",
        "chat.json",
        "--agent",
        TICKET,
        "-o",
        "p.yaml",
        "--model",
        f"replay:{cassette}",
    )
    assert code == 0, err
    text = (tmp_path / "p.yaml").read_text(encoding="utf-8")
    assert "name: replay:cassette.json\n  calls: 2\n  repairs: 1" in text
    assert "text: Fix the VPN" in text


def test_propose_schema_for_a_new_agent(tmp_path: Path, chat: Path) -> None:
    code, out, err = cli(
        tmp_path,
        "extract",
        "chat.json",
        "--propose-schema",
        "state.py",
        "--class-name",
        "HelpdeskState",
        "-o",
        "p.yaml",
    )
    assert code == 0, err
    source = (tmp_path / "state.py").read_text(encoding="utf-8")
    assert "class HelpdeskState(AgentState):" in source
    assert "    priority: str | None = None" in source
    assert "proposed state class written to state.py" in out
