"""The inspector's review form for ``skillstate extract`` proposals: paste, review with the
citations, edit, accept; the write gate of every other form (docs/extract.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the ui extra is not installed: pip install '.[ui]'")

from starlette.testclient import TestClient

from skillstate.engine.agent import load_agent
from skillstate.extract import dump_proposal, extract, parse_transcript
from skillstate.store import open_store
from tests.ui_support import ui_client

TOKEN = "extract-token-5c1d"
TICKET = "skillstate.examples.ticket:agent"
SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"
CHAT = f"""\
user: Please triage my ticket. The printer on floor 2 is jammed.
Never close the ticket before it is fixed. My api_key={SECRET}
The priority is P3.
assistant: On it.
tool: ticket_type: hardware
"""


@pytest.fixture(scope="module")
def proposal_text() -> str:
    proposal = extract(parse_transcript(CHAT, source="chat.txt"), load_agent(TICKET))
    return dump_proposal(proposal)


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    open_store(url).close()  # the inspector opens an existing store only
    return url


@pytest.fixture
def writer(url: str) -> Iterator[TestClient]:
    with ui_client(url, allow_edit=True, token=TOKEN, agents=(TICKET,)) as client:
        yield client


def _tasks(url: str) -> list[str]:
    store = open_store(url)
    try:
        return store.tasks()
    finally:
        store.close()


class TestReview:
    def test_the_form_is_linked_when_edits_are_allowed(self, writer: TestClient) -> None:
        page = writer.get("/extract")
        assert page.status_code == 200
        assert 'action="/extract/review"' in page.text
        assert 'id="proposal-file"' in page.text
        assert 'href="/extract"' in writer.get("/").text

    def test_review_shows_each_item_with_its_citations(
        self, writer: TestClient, proposal_text: str, url: str
    ) -> None:
        """Fields, values, cited turns and quotes, the change from the blank card, the
        turns; nothing is written."""
        page = writer.post("/extract/review", data={"proposal": proposal_text, "token": TOKEN})
        assert page.status_code == 200, page.text
        assert "Proposed for skillstate.examples.ticket:agent" in page.text
        assert '<td>priority</td><td>&#34;P3&#34;</td><td class="turns">1</td>' in page.text
        assert (
            '<td>ticket_type</td><td>&#34;hardware&#34;</td><td class="turns">3</td>' in page.text
        )
        assert "Never close the ticket before it is fixed." in page.text
        assert "<code>/priority</code>" in page.text
        assert 'action="/extract/accept"' in page.text
        assert SECRET not in page.text
        assert _tasks(url) == []

    def test_accept_an_edited_proposal_starts_the_task(
        self, writer: TestClient, proposal_text: str, url: str
    ) -> None:
        edited = proposal_text.replace("constraints:\n", "constraints:\n- text: Reply in French.\n")
        response = writer.post(
            "/extract/accept",
            data={"proposal": edited, "task_id": "t9", "actor": "dana", "token": TOKEN},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        assert response.headers["location"].startswith("/tasks/t9?notice=")
        page = writer.get(response.headers["location"])
        assert "started from the reviewed proposal as version 1 by dana" in page.text
        card = writer.get("/api/tasks/t9").json()["card"]
        assert (card["priority"], card["ticket_type"]) == ("P3", "hardware")
        assert "Reply in French." in card["constraints"]
        store = open_store(url)
        try:
            [event] = store.events("t9")
        finally:
            store.close()
        assert (event.version, event.actor, event.action["actor"]) == (1, "human", "dana")
        refs = {e["source"]: e["ref"] for e in card["evidence"]}
        turn = writer.get(f"/artifacts/{refs['turn 3 (tool)']}/t9")
        assert turn.status_code == 200
        assert "ticket_type: hardware" in turn.text  # the raw turn, one click away

    def test_a_proposal_that_no_longer_holds_is_shown_again_and_nothing_written(
        self, writer: TestClient, proposal_text: str, url: str
    ) -> None:
        edited = proposal_text.replace("value: P3", "value: P1")
        response = writer.post(
            "/extract/accept", data={"proposal": edited, "task_id": "t8", "token": TOKEN}
        )
        assert response.status_code == 400
        assert (
            "the proposal refused: facts[0]: fact &#39;priority&#39;: its value &#39;P1&#39; "
            "does not occur in its quote; nothing was written"
        ) in response.text
        assert "value: P1" in response.text  # the edit is kept for the next try
        assert _tasks(url) == []

    def test_not_a_proposal(self, writer: TestClient) -> None:
        response = writer.post("/extract/review", data={"proposal": "just: text", "token": TOKEN})
        assert response.status_code == 400
        assert "the proposal refused: state_class: Field required" in response.text


class TestGate:
    def test_read_only_inspector_refuses(self, url: str, proposal_text: str) -> None:
        with ui_client(url) as reader:
            response = reader.post("/extract/review", data={"proposal": proposal_text})
        assert response.status_code == 403
        assert "read-only" in response.text

    @pytest.mark.parametrize("path", ["/extract/review", "/extract/accept"])
    def test_a_missing_or_wrong_token_is_401(
        self, writer: TestClient, proposal_text: str, path: str, url: str
    ) -> None:
        assert writer.post(path, data={"proposal": proposal_text}).status_code == 401
        wrong = writer.post(path, data={"proposal": proposal_text, "token": "nope"})
        assert wrong.status_code == 401
        header = writer.post(
            path, data={"proposal": proposal_text}, headers={"X-Skillstate-Token": "nope"}
        )
        assert header.status_code == 401
        assert _tasks(url) == []

    def test_json_and_oversized_bodies(self, writer: TestClient) -> None:
        json_body = writer.post(
            "/extract/review", json={"proposal": "x"}, headers={"X-Skillstate-Token": TOKEN}
        )
        assert json_body.status_code == 415
        huge = writer.post(
            "/extract/review",
            content=b"proposal=" + b"x" * (1024 * 1024 + 1),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert huge.status_code == 413

    def test_an_agent_the_operator_did_not_allow(self, url: str, proposal_text: str) -> None:
        """The proposal's agent reference is data: never imported unless allowed."""
        other = proposal_text.replace(f"agent: {TICKET}", "agent: os:abort")
        with ui_client(url, allow_edit=True, token=TOKEN) as client:
            response = client.post("/extract/accept", data={"proposal": other, "token": TOKEN})
        assert response.status_code == 403
        assert "which this inspector does not run" in response.text
        assert _tasks(url) == []

    def test_an_unknown_field(self, writer: TestClient, proposal_text: str) -> None:
        response = writer.post(
            "/extract/review", data={"proposal": proposal_text, "token": TOKEN, "force": "1"}
        )
        assert response.status_code == 400
        assert "review takes actor, proposal, task_id; not &#39;force&#39;" in response.text
