"""MCP tools (``skillstate[mcp]``) against a real server, over stdio and streamable HTTP.

The server is tests/mcp_server.py, written with the official SDK: started as a
subprocess over stdio by :class:`MCPServer` itself, and as an HTTP server on a free
port of 127.0.0.1 that these tests wait for by the line it prints once it accepts.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import json
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Action,
    Agent,
    AgentState,
    CallSkill,
    Finish,
    MissingExtra,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    TaskStatus,
    ToolError,
    UsageError,
    View,
    per_task,
)
from skillstate.integrations.mcp import (
    MCPCallError,
    MCPConnectionError,
    MCPServer,
    MCPTimeout,
    MCPTool,
    MCPToolError,
)
from skillstate.state.redact import RedactionPolicy
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from skillstate.store.sealing import read_artifact
from skillstate.store.sqlite import SQLiteStore

SERVER = str(Path(__file__).with_name("mcp_server.py"))
TOKEN = "tok-" + secrets.token_hex(12)
"""The credential both servers are given: it must never reach the store."""
READY_WITHIN = 60.0


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` has exited (polled until ``within`` seconds passed)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def pid_of(server: MCPServer) -> int:
    """The server process's pid, as its ``whoami`` tool tells it."""
    text = server.tool("whoami")()
    return int(text.split()[0].removeprefix("pid="))


# ---------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def server_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IO[str]]:
    """Where the servers' stderr goes (kept out of the test output)."""
    with (tmp_path_factory.mktemp("mcp") / "server.log").open("w") as log:
        yield log


def stdio_server(log: IO[str], **options: Any) -> MCPServer:
    return MCPServer.stdio(
        sys.executable, [SERVER], env={"MCP_TEST_TOKEN": TOKEN}, stderr=log, **options
    )


@pytest.fixture(scope="module")
def http_url(server_log: IO[str]) -> Iterator[str]:
    """A streamable HTTP server on a free port, ready once it printed ``LISTENING <port>``."""
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http"],
        stdout=subprocess.PIPE,
        stderr=server_log,
        text=True,
        env={**os.environ, "MCP_TEST_TOKEN": TOKEN},
    )
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()])
    reader.start()
    try:
        line = lines.get(timeout=READY_WITHIN)
        assert line.startswith("LISTENING "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=10)
        proc.stdout.close()


@pytest.fixture(scope="module", params=["stdio", "http"])
def server(request: pytest.FixtureRequest, server_log: IO[str]) -> Iterator[MCPServer]:
    """One server per transport, shared by the module's tests (each start costs seconds)."""
    if request.param == "stdio":
        mcp = stdio_server(server_log)
    else:
        url = request.getfixturevalue("http_url")
        mcp = MCPServer.http(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with mcp:
        yield mcp
    assert not mcp.running


# ---------------------------------------------------------------- an agent


class Weather(AgentState):
    forecast: dict[str, Any] | None = None
    shouted: str | None = None
    note: str | None = None


class City(BaseModel):
    city: str


MACHINE = StateMachine({"init": ["init"]}, final=["init"])


def weather_agent(
    server: MCPServer,
    decide: Callable[[View[Weather]], Action],
    *,
    tools: dict[str, Any] | None = None,
    exact: bool = False,
    redaction: RedactionPolicy | None = None,
) -> Agent[Weather]:
    """Skills declaring ``forecast`` and ``whoami`` (the server's, unless ``tools`` says
    otherwise; with ``exact`` the agent has only ``tools``)."""
    given = tools or {}
    if not exact:
        given = {"forecast": server.tool("forecast"), "whoami": server.tool("whoami"), **given}
    skills = SkillRegistry()

    @skills.skill(outputs=["forecast"], tools=["forecast"])
    def look_up(state: Weather, params: City, ctx: SkillContext) -> Outcome:
        """Fetch the forecast of a city."""
        found = ctx.call("forecast", city=params.city)
        return Outcome(writes={"forecast": found}, summary=f"{found['sky']} in {params.city}")

    look_up.verifier(lambda state, outcome: state.forecast is not None)

    @skills.skill(outputs=["note"], tools=["forecast"])
    def look_up_safely(state: Weather, params: City, ctx: SkillContext) -> Outcome:
        """Fetch the forecast, noting a city the server does not know."""
        found = ctx.call("forecast", city=params.city, errors=(MCPToolError,))
        if isinstance(found, ToolError):
            return Outcome(writes={"note": f"unknown: {found.message}"})
        return Outcome(writes={"note": found["sky"]})

    look_up_safely.verifier(lambda state, outcome: state.note is not None)

    @skills.skill(outputs=["shouted"])
    def sneak(state: Weather, params: NoParams, ctx: SkillContext) -> Outcome:
        """Calls an MCP tool it did not declare."""
        return Outcome(writes={"shouted": ctx.call("shout", text="psst")})

    sneak.verifier(lambda state, outcome: state.shouted is not None)

    @skills.skill(outputs=["note"], tools=["whoami"])
    def ask_identity(state: Weather, params: NoParams, ctx: SkillContext) -> Outcome:
        """Asks the server for the credential it holds."""
        return Outcome(writes={"note": ctx.call("whoami")})

    ask_identity.verifier(lambda state, outcome: state.note is not None)

    options: dict[str, Any] = {} if redaction is None else {"redaction": redaction}
    return Agent(
        name="weather",
        state_type=Weather,
        machine=MACHINE,
        skills=skills,
        policy=ScriptedPolicy(decide),
        tools=given,
        **options,
    )


def once(action: Action) -> Callable[[View[Weather]], Action]:
    """Decide ``action``, then finish once a step committed anything."""

    def decide(view: View[Weather]) -> Action:
        state = view.state
        done = state.forecast is not None or state.note is not None or state.shouted
        return Finish() if done or state.errors else action

    return decide


def tool_calls(store: Store, task_id: str) -> list[Any]:
    return [call for event in store.events(task_id) for call in event.tool_calls]


# ---------------------------------------------------------------- through the runtime


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_an_agent_calls_a_declared_mcp_tool(
    server: MCPServer, backend: str, tmp_path: Path
) -> None:
    """The skill's call is recorded in the event; the artifact holds the tool's result."""
    store: Store = MemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "s.db")
    agent = weather_agent(server, once(CallSkill(skill="look_up", params={"city": "Lisbon"})))
    result = Runtime(agent, store).run("t", create=True)
    assert result.state.status is TaskStatus.COMPLETED
    expected = {"city": "Lisbon", "celsius": 18.5, "sky": "sunny"}
    assert result.state.forecast == expected
    [call] = tool_calls(store, "t")
    assert (call.tool, call.args, call.ok) == ("forecast", {"city": "Lisbon"}, True)
    assert call.ref is not None
    assert json.loads(read_artifact(store, call.ref)) == expected


def test_a_tool_built_per_task(server: MCPServer) -> None:
    """``per_task`` accepts MCP tools like any other callable."""
    store = MemoryStore()
    agent = weather_agent(
        server,
        once(CallSkill(skill="look_up", params={"city": "Oslo"})),
        tools={"forecast": per_task(lambda state: server.tool("forecast"))},
    )
    assert Runtime(agent, store).run("t", create=True).state.forecast == {
        "city": "Oslo",
        "celsius": -3.0,
        "sky": "snow",
    }


def test_a_skill_cannot_call_a_tool_it_did_not_declare(server: MCPServer) -> None:
    """Least privilege: the agent has ``shout``; ``sneak`` did not declare it."""
    store = MemoryStore()
    agent = weather_agent(
        server, once(CallSkill(skill="sneak")), tools={"shout": server.tool("shout")}
    )
    runtime = Runtime(agent, store)
    runtime.start("t")
    after = runtime.step("t").after
    assert after.shouted is None
    assert after.errors[0].kind == "tool_not_allowed"
    assert "may not call tool 'shout'" in after.errors[0].message
    assert after.errors[-1].kind == "step_failed"
    assert tool_calls(store, "t") == []


def test_a_declared_tool_the_agent_lacks_is_refused_when_built(server: MCPServer) -> None:
    with pytest.raises(UsageError, match="declares unknown tools: forecast"):
        weather_agent(server, once(Finish()), tools={"whoami": server.tool("whoami")}, exact=True)


def test_a_tool_error_is_a_tool_error_value_when_expected(server: MCPServer) -> None:
    """``errors=(MCPToolError,)``: the skill gets a ToolError and the call is recorded failed."""
    store = MemoryStore()
    agent = weather_agent(
        server, once(CallSkill(skill="look_up_safely", params={"city": "Atlantis"}))
    )
    result = Runtime(agent, store).run("t", create=True)
    assert result.state.status is TaskStatus.COMPLETED
    assert result.state.note == "unknown: Error executing tool forecast: no forecast for 'Atlantis'"
    [call] = tool_calls(store, "t")
    assert not call.ok
    assert call.summary == "MCPToolError: Error executing tool forecast: no forecast for 'Atlantis'"


def test_a_tool_error_fails_the_attempt_by_default(server: MCPServer) -> None:
    store = MemoryStore()
    agent = weather_agent(server, once(CallSkill(skill="look_up", params={"city": "Atlantis"})))
    runtime = Runtime(agent, store)
    runtime.start("t")
    after = runtime.step("t").after
    assert after.forecast is None
    assert after.errors[0].kind == "skill_error"
    assert (
        after.errors[0].message
        == "MCPToolError: Error executing tool forecast: no forecast for 'Atlantis'"
    )
    assert after.errors[-1].kind == "step_failed"
    assert [call.ok for call in tool_calls(store, "t")] == [False] * after.errors[0].max_attempts


# ---------------------------------------------------------------- the tools themselves


def test_results_errors_and_listing(server: MCPServer) -> None:
    assert server.tool("shout")(text="hi", times=2) == "HI HI"  # text content: a str
    with pytest.raises(MCPToolError, match="boom") as caught:
        server.tool("fail")(reason="boom")
    assert (caught.value.tool, caught.value.server) == ("fail", server.name)
    with pytest.raises(MCPToolError, match="Unknown tool"):
        server.tool("no_such_tool")()

    listed = server.tools()
    assert set(listed) == {"forecast", "shout", "fail", "slow", "whoami"}
    assert listed["forecast"].output_schema is not None
    assert listed["shout"].output_schema is None
    assert listed["shout"].input_schema is not None
    assert set(listed["shout"].input_schema["properties"]) == {"text", "times"}
    assert (
        listed["shout"].__doc__
        == "The text in capitals, repeated (unstructured: text content only)."
    )
    assert set(server.tools("shout", prefix="t_")) == {"t_shout"}
    with pytest.raises(UsageError, match="no tool 'nope'"):
        server.tools("nope")


def test_raw_results(server: MCPServer) -> None:
    """``raw=True``: the whole MCP result as JSON (what is stored as the artifact)."""
    raw = server.tool("forecast", raw=True)(city="Lisbon")
    assert raw["structuredContent"] == {"city": "Lisbon", "celsius": 18.5, "sky": "sunny"}
    assert raw["content"][0]["type"] == "text"
    assert raw["isError"] is False


def test_a_timeout_is_enforced_and_the_session_survives_it(server: MCPServer) -> None:
    started = time.monotonic()
    with pytest.raises(MCPTimeout, match=r"timed out after 0\.5s"):
        server.tool("slow", timeout=0.5)(seconds=30)
    assert time.monotonic() - started < 10
    assert server.tool("slow")(seconds=0) == "slept 0.0"


def test_the_async_variant(server: MCPServer) -> None:
    tool = server.tool("shout")
    assert inspect.iscoroutinefunction(tool.acall)

    async def main() -> list[Any]:
        calls = [tool.acall(text=word) for word in ("a", "b", "c")]
        slow = server.tool("slow", timeout=0.5).acall(seconds=30)
        return await asyncio.gather(*calls, slow, return_exceptions=True)

    *shouted, timed_out = asyncio.run(main())
    assert shouted == ["A", "B", "C"]
    assert isinstance(timed_out, MCPTimeout)


# ---------------------------------------------------------------- lifecycle


def test_the_stdio_process_is_stopped_by_close(server_log: IO[str]) -> None:
    mcp = stdio_server(server_log)
    assert not mcp.running  # nothing starts before the first call
    with mcp:
        pid = pid_of(mcp)
        assert mcp.running
    assert not mcp.running
    assert gone(pid)
    # Usable again: the next call starts a new process.
    try:
        again = pid_of(mcp)
        assert again != pid
    finally:
        mcp.close()
    assert gone(again)


def test_a_dead_server_is_an_error_then_restarted(server_log: IO[str]) -> None:
    with stdio_server(server_log) as mcp:
        pid = pid_of(mcp)
        os.kill(pid, 9)
        assert gone(pid)
        with pytest.raises(MCPConnectionError):
            mcp.tool("shout")(text="anyone?")
        assert mcp.tool("shout")(text="back") == "BACK"


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    hang = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    mcp = MCPServer.stdio(sys.executable, ["-c", hang], connect_timeout=1)
    with pytest.raises(MCPTimeout, match="did not complete the handshake"):
        mcp.start()
    assert gone(int(pid_file.read_text()))
    assert not mcp.running


def test_a_command_that_does_not_exist() -> None:
    mcp = MCPServer.stdio("/no/such/mcp-server", connect_timeout=5)
    with pytest.raises(MCPConnectionError, match="cannot connect to MCP server mcp-server"):
        mcp.tool("anything")()


# ---------------------------------------------------------------- credentials


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_credentials_never_reach_the_store(
    transport: str, server_log: IO[str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The env value / Authorization header, even echoed back by the server, is masked.

    The agent's own redaction policy is off: the integration masks what it was given.
    """
    if transport == "stdio":
        mcp = stdio_server(server_log)
    else:
        url = request.getfixturevalue("http_url")
        mcp = MCPServer.http(url, headers={"Authorization": f"Bearer {TOKEN}"})
    prompts: list[str] = []

    def decide(view: View[Weather]) -> Action:
        prompts.append(view.text)
        if view.transcript is not None:
            prompts.extend(message.content for message in view.transcript())
        return Finish() if view.state.note else CallSkill(skill="ask_identity")

    db = tmp_path / "state.db"
    store = SQLiteStore(db)
    with mcp:
        agent = weather_agent(mcp, decide, redaction=RedactionPolicy.OFF)
        result = Runtime(agent, store).run("t", create=True)
        # A failure's message is masked too (fail echoes what it is given).
        with pytest.raises(MCPToolError) as caught:
            mcp.tool("fail")(reason=f"token {TOKEN} rejected")
    assert TOKEN not in str(caught.value)
    assert result.state.status is TaskStatus.COMPLETED
    assert result.state.note is not None
    assert result.state.note.endswith("credential=***")
    [call] = tool_calls(store, "t")
    assert call.ref is not None
    assert read_artifact(store, call.ref).endswith(b"credential=***")
    assert TOKEN not in repr(mcp)
    assert all(TOKEN not in prompt for prompt in prompts)
    events = json.dumps([e.model_dump(mode="json") for e in store.events("t")])
    assert TOKEN not in events
    for ref in store.artifact_refs():
        assert TOKEN.encode() not in read_artifact(store, ref)
    store.close()
    for path in tmp_path.iterdir():  # the database file itself, journals included
        assert TOKEN.encode() not in path.read_bytes()


def test_a_rejected_credential_is_not_in_the_error(http_url: str) -> None:
    wrong = "wrong-" + secrets.token_hex(8)
    mcp = MCPServer.http(f"{http_url}?key={wrong}", headers={"Authorization": f"Bearer {wrong}"})
    with pytest.raises(MCPConnectionError, match="HTTP 401") as caught:
        mcp.tool("whoami")()
    assert wrong not in str(caught.value)
    assert wrong not in repr(mcp)


# ---------------------------------------------------------------- the extra


def test_import_skillstate_does_not_import_mcp() -> None:
    code = (
        "import sys, skillstate, skillstate.integrations.mcp; "
        "assert not any(m == 'mcp' or m.startswith('mcp.') for m in sys.modules), 'mcp imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


@pytest.mark.parametrize("version", [None, "1.26.0"])
def test_a_missing_or_old_sdk_names_the_extra(
    version: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake(name: str) -> str:
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(importlib.metadata, "version", fake)
    with pytest.raises(MissingExtra, match=r"pip install 'skillstate\[mcp\]'"):
        MCPServer.stdio("anything")
    with pytest.raises(MissingExtra):
        MCPServer.http("http://127.0.0.1:1/mcp")


def test_bad_options_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="timeout must be > 0"):
        MCPServer.stdio("x", timeout=0)
    with pytest.raises(UsageError, match="not one string"):
        MCPServer.stdio("x", "--flag")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="http"):
        MCPServer.http("ftp://example.com/mcp")
    with pytest.raises(UsageError, match="timeout must be > 0"):
        MCPTool(MCPServer.stdio("x"), "t", timeout=-1)
    assert issubclass(MCPTimeout, TimeoutError)
    assert issubclass(MCPConnectionError, MCPCallError)
