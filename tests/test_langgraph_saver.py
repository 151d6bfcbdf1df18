"""``SkillstateSaver``: LangGraph's conformance suite on every backend, and what it adds.

The conformance suite (``langgraph-checkpoint-conformance``) is LangGraph's own spec
for checkpointers: it detects the capabilities a saver overrides and runs each one's
tests against a fresh saver. Here it runs on memory, SQLite, PostgreSQL and Redis;
the server backends skip (fail in CI) like the store contract suite. The other tests
check what the saver promises beyond the spec: deltas, sealing, ``doctor`` and the
inspector, a real graph interrupted and resumed from the store, concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install -e '.[dev]'")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.serde.types import INTERRUPT
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from skillstate.engine.doctor import diagnose
from skillstate.errors import SecretKeyMissing, UsageError
from skillstate.integrations.langgraph import SkillstateSaver
from skillstate.state.secrets import ENV_KEY, generate_key
from skillstate.store import open_store
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from tests.contract.backends import (
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)
from tests.test_docs import run_example

URLS: dict[str, Callable[[Path], str]] = {
    "memory": lambda tmp: "memory://",
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'graph.db'}",
    "postgres": postgres_url_for,
    "redis": redis_url_for,
}
SERVICES = {"postgres", "redis"}


@pytest.fixture(autouse=True)
def _drop_service_data() -> Iterator[None]:
    """Schemas and key prefixes outlive tmp_path: drop this test's after it."""
    yield
    drop_redis_data()
    drop_postgres_schemas()


@pytest.fixture(
    params=[pytest.param(n, marks=pytest.mark.services) if n in SERVICES else n for n in URLS]
)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL of one backend (the server ones skip, or fail in CI, when down)."""
    return URLS[request.param](tmp_path)


def _config(thread: str, cid: str | None = None, ns: str = "") -> Any:
    conf = {"thread_id": thread, "checkpoint_ns": ns}
    return {"configurable": {**conf, "checkpoint_id": cid} if cid else conf}


def _checkpoint(values: dict[str, Any], versions: dict[str, int]) -> Any:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = dict(versions)
    return checkpoint


def _stored_texts(store: Store, task_id: str) -> list[str]:
    """Every body the store keeps for a task, as text: head, kept versions, events."""
    texts = [json.dumps(store.load(task_id).state)]
    texts += [
        json.dumps(store.checkpoint(task_id, i.version).state) for i in store.checkpoints(task_id)
    ]
    texts += [event.model_dump_json() for event in store.events(task_id)]
    return texts


# ---------------------------------------------------------------- conformance


def test_conformance_suite_passes_every_capability(url: str) -> None:
    """LangGraph's published conformance suite: every capability detected and passed."""

    @checkpointer_test(name=f"SkillstateSaver[{url.partition(':')[0]}]")
    async def factory() -> AsyncGenerator[SkillstateSaver, None]:
        # memory:// opens an empty store each time, like every other backend's fresh
        # saver on the same database (the suite's threads are fresh uuids).
        with SkillstateSaver.from_url(url) as saver:
            yield saver

    report = asyncio.run(validate(factory))
    results = report.results
    assert {cap.value for cap in ALL_CAPABILITIES} == set(results)
    failures = {name: r.failures for name, r in results.items() if r.failures}
    assert not failures, failures
    assert all(r.detected and r.passed for r in results.values())
    assert sum(r.tests_skipped for r in results.values()) == 0
    assert sum(r.tests_passed for r in results.values()) >= 80
    assert report.conformance_level() == "FULL"


# ---------------------------------------------------------------- a real graph


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]
    count: int
    approved: bool


def _chat_graph() -> Any:
    def step(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage(f"step {state['count']}")], "count": state["count"] + 1}

    def ask(state: Chat) -> dict[str, Any]:
        return {"approved": interrupt({"question": "refund 40 EUR?"}) == "yes"}

    builder = StateGraph(Chat)
    builder.add_node("step", step)
    builder.add_node("ask", ask)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "ask" if s["count"] >= 3 else "step")
    builder.add_edge("ask", END)
    return builder


def test_graph_interrupted_and_resumed_from_the_store(url: str) -> None:
    """A compiled StateGraph stops at an interrupt; a new saver on the store resumes it."""
    config: Any = {"configurable": {"thread_id": "ticket-7"}}
    with SkillstateSaver.from_url(url) as saver:
        graph = _chat_graph().compile(checkpointer=saver)
        out = graph.invoke({"messages": [HumanMessage("my parcel is late")], "count": 0}, config)
        assert out["__interrupt__"][0].value == {"question": "refund 40 EUR?"}
        assert graph.get_state(config).next == ("ask",)
        head = saver.store.load("langgraph:ticket-7").state
        assert head["status"] == "waiting_user"
        if url == "memory://":  # not shared between opens: resume on this store
            store = saver.store
            resumed = SkillstateSaver(store)
    if url != "memory://":
        resumed = SkillstateSaver.from_url(url)
    with resumed:
        graph = _chat_graph().compile(checkpointer=resumed)
        out = graph.invoke(Command(resume="yes"), config)
        assert out["approved"] is True
        assert [m.content for m in out["messages"]] == [
            "my parcel is late",
            "step 0",
            "step 1",
            "step 2",
        ]
        history = list(graph.get_state_history(config))
        assert [s.metadata["step"] for s in history if s.metadata] == [4, 3, 2, 1, 0, -1]
        report = diagnose(resumed.store, "langgraph:ticket-7", None)
        assert report.healthy, report.findings
        assert report.checked == len(resumed.store.checkpoints("langgraph:ticket-7"))


def test_async_graph_runs_on_the_saver(tmp_path: Path) -> None:
    """``ainvoke`` goes through the async methods (worker threads) and reads back."""
    config: Any = {"configurable": {"thread_id": "async-1"}}

    async def run() -> Any:
        async with SkillstateSaver.from_url(f"sqlite:///{tmp_path / 'a.db'}") as saver:
            graph = _chat_graph().compile(checkpointer=saver)
            await graph.ainvoke({"messages": [], "count": 0}, config)
            await graph.ainvoke(Command(resume="no"), config)
            return (await graph.aget_state(config)).values

    values = asyncio.run(run())
    assert values["approved"] is False
    assert values["count"] == 3


# ---------------------------------------------------------------- deltas


def _drive(
    saver: SkillstateSaver, thread: str, steps: int, state: Callable[[int], dict[str, Any]]
) -> None:
    """``steps`` checkpoints, each bumping only the channels whose value changed."""
    config = _config(thread)
    previous: dict[str, Any] = {}
    versions: dict[str, int] = {}
    for step in range(steps):
        values = state(step)
        new = {k: versions.get(k, 0) + 1 for k, v in values.items() if previous.get(k) != v}
        versions.update(new)
        config = saver.put(
            config, _checkpoint(values, versions), {"source": "loop", "step": step}, new
        )
        previous = values


def _bytes_per_checkpoint(steps: int, state: Callable[[int], dict[str, Any]]) -> float:
    saver = SkillstateSaver(MemoryStore())
    _drive(saver, "t", steps, state)
    infos = saver.store.checkpoints("langgraph:t")
    assert len(infos) == steps
    return sum(info.size for info in infos) / steps


def _card(step: int) -> dict[str, Any]:
    """A fixed-size card (about 12 KB): 200 facts of 60 characters, one rewritten per step."""
    facts = {f"fact_{i:03d}": f"{i:03d}:" + "x" * 56 for i in range(200)}
    facts[f"fact_{step % 200:03d}"] = f"{step:06d}" + "y" * 54
    return {"facts": facts, "step": step, "plan": ["collect", "verify", "decide", "act"]}


def _history(step: int) -> dict[str, Any]:
    """The transcript shape: one 400-character message more per step."""
    return {
        "step": step,
        "messages": [{"role": "user", "content": f"{i}" * 400} for i in range(step)],
    }


def test_fixed_size_state_costs_flat_bytes_per_checkpoint() -> None:
    """Only what a step changed is stored: bytes per checkpoint do not grow with the run."""
    card_size = len(json.dumps(_card(0)))
    short, long = _bytes_per_checkpoint(30, _card), _bytes_per_checkpoint(300, _card)
    assert long <= short * 1.3
    assert long < card_size / 4  # a full copy per checkpoint would be card_size


def test_growing_list_channel_costs_its_new_items() -> None:
    """A list channel that grows by appends stores its new items, not the whole list."""
    short, long = _bytes_per_checkpoint(30, _history), _bytes_per_checkpoint(240, _history)
    assert long <= short * 2
    assert long < 240 * 400 / 10  # a full copy would average 48 KB per checkpoint


def test_unchanged_channel_is_not_rewritten() -> None:
    """A channel LangGraph did not give a new version leaves no trace in the delta."""
    saver = SkillstateSaver(MemoryStore())
    big = {"doc": "z" * 5000}
    first = saver.put(
        _config("t"), _checkpoint({"big": big, "n": 1}, {"big": 1, "n": 1}), {}, {"big": 1, "n": 1}
    )
    saver.put(first, _checkpoint({"big": big, "n": 2}, {"big": 1, "n": 2}), {}, {"n": 2})
    patch = saver.store.events("langgraph:t")[-1].patch
    assert all(not op["path"].startswith("/channel:big") for op in patch)
    assert {"op": "replace", "path": "/channel:n", "value": 2} in patch


def test_values_round_trip_as_langgraphs_serializer_gives_them() -> None:
    """JSON values are stored as themselves; bytes, sets, messages and tuples via serde,
    so each reads back as LangGraph's own savers return it (a tuple as a list)."""
    saver = SkillstateSaver(MemoryStore())
    values: dict[str, Any] = {
        "text": "héllo",
        "blob": b"\x00\xffraw",
        "pair": (1, "a"),
        "tags": {"x", "y"},
        "nested": {"list": [1, 2.5, None, True], "msg": HumanMessage("hi")},
        "big": 2**70,  # beyond msgpack's 64 bits: kept as JSON
        "tagged": {"$lg": "not a tag"},
    }
    versions = dict.fromkeys(values, 1)
    stored = saver.put(_config("t"), _checkpoint(values, versions), {}, versions)
    got = saver.get_tuple(stored)
    assert got is not None
    serde = saver.serde
    expected = {
        k: v if k == "big" else serde.loads_typed(serde.dumps_typed(v)) for k, v in values.items()
    }
    assert got.checkpoint["channel_values"] == expected
    assert got.checkpoint["channel_values"]["blob"] == b"\x00\xffraw"
    assert isinstance(got.checkpoint["channel_values"]["nested"]["msg"], HumanMessage)
    head = saver.store.load("langgraph:t").state
    assert head["channel:text"] == "héllo"  # readable as it is in show, log and the inspector
    assert head["channel:nested"]["list"] == [1, 2.5, None, True]
    assert head["channel:blob"]["$lg"] == "bytes"
    assert head["channel:tagged"]["$lg"] == "msgpack"  # a dict with the tag key: whole


# ---------------------------------------------------------------- sealing


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = generate_key()
    monkeypatch.setenv(ENV_KEY, value)
    return value


def test_sensitive_channels_never_reach_the_store_in_the_clear(key: str, tmp_path: Path) -> None:
    """Values and writes of a sensitive channel are sealed in every body the store keeps."""
    secret = "sk-live-4242-very-secret"
    with SkillstateSaver.from_url(f"sqlite:///{tmp_path / 's.db'}", sensitive=["api_key"]) as saver:
        versions = {"api_key": 1, "note": 1}
        cp = _checkpoint({"api_key": secret, "note": "public"}, versions)
        stored = saver.put(_config("t"), cp, {}, versions)
        saver.put_writes(stored, [("api_key", secret + "-rotated"), ("note", "n2")], "task-1")
        got = saver.get_tuple(stored)
        assert got is not None
        assert got.checkpoint["channel_values"]["api_key"] == secret
        assert ("task-1", "api_key", secret + "-rotated") in got.pending_writes
        texts = _stored_texts(saver.store, "langgraph:t")
        assert all(secret not in text for text in texts)
        assert any("public" in text for text in texts)  # other channels stay readable
        assert (
            saver.store.load("langgraph:t").state["channel:api_key"]["token"].startswith("enc:v1:")
        )
    assert secret.encode() not in (tmp_path / "s.db").read_bytes()


def test_sensitive_value_without_a_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key: the put fails and nothing is written, rather than store plaintext."""
    monkeypatch.delenv(ENV_KEY, raising=False)
    saver = SkillstateSaver(MemoryStore(), sensitive=["api_key"])
    cp = _checkpoint({"api_key": "sk-1"}, {"api_key": 1})
    with pytest.raises(SecretKeyMissing, match="api_key"):
        saver.put(_config("t"), cp, {}, {"api_key": 1})
    assert saver.store.tasks() == []


def test_sealed_value_needs_the_key_to_read(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    saver = SkillstateSaver(store, sensitive=["api_key"])
    stored = saver.put(
        _config("t"), _checkpoint({"api_key": "sk-1"}, {"api_key": 1}), {}, {"api_key": 1}
    )
    monkeypatch.setenv(ENV_KEY, generate_key())
    with pytest.raises(SecretKeyMissing, match="api_key"):
        SkillstateSaver(store).get_tuple(stored)


def test_custom_serializer_sees_every_value() -> None:
    """With a serializer other than the default, no value bypasses it as plain JSON."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class Counting(JsonPlusSerializer):
        calls = 0

        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            Counting.calls += 1
            return super().dumps_typed(obj)

    saver = SkillstateSaver(MemoryStore(), serde=Counting(), native_json=False)
    stored = saver.put(_config("t"), _checkpoint({"a": "plain"}, {"a": 1}), {}, {"a": 1})
    head = saver.store.load("langgraph:t").state
    assert head["channel:a"]["$lg"] == "msgpack"
    assert "plain" not in json.dumps(head)
    assert Counting.calls == 1  # the value (the checkpoint record is plain JSON)
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"a": "plain"}


# ---------------------------------------------------------------- doctor, inspector


def test_doctor_finds_every_kind_of_commit_healthy(url: str) -> None:
    """Puts, writes, a reset, a run deletion, a copy and a deletion all check out."""
    with SkillstateSaver.from_url(url) as saver:
        _drive(saver, "d", 12, _history)
        head = saver.get_tuple(_config("d"))
        assert head is not None
        saver.put_writes(head.config, [("messages", "late"), (INTERRUPT, {"ask": 1})], "t1")
        saver.copy_thread("d", "copy")
        saver.prune(["d"], strategy="keep_latest")
        _drive(saver, "runs", 3, _card)
        saver.delete_for_runs(["nobody"])
        saver.delete_thread("copy")
        for task in ("langgraph:d", "langgraph:copy", "langgraph:runs"):
            report = diagnose(saver.store, task, None)
            assert report.healthy, (task, report.findings)
            assert report.checked >= 1
        assert saver.get_tuple(_config("copy")) is None
        assert saver.store.load("langgraph:copy").state["status"] == "deleted"
        assert len(list(saver.list(_config("d")))) == 1


def test_inspector_shows_the_threads(tmp_path: Path) -> None:
    """The web inspector lists a thread, its card and each step's JSON Patch."""
    from starlette.testclient import TestClient

    from skillstate.ui import UIConfig, create_app

    url = f"sqlite:///{tmp_path / 'ui.db'}"
    with SkillstateSaver.from_url(url) as saver:
        _chat_graph().compile(checkpointer=saver).invoke(
            {"messages": [], "count": 0}, {"configurable": {"thread_id": "ui"}}
        )
    client = TestClient(create_app(UIConfig(store_url=url, hosts=())))
    rows = client.get("/api/tasks").json()["rows"]
    assert [(r["task_id"], r["status"]) for r in rows] == [("langgraph:ui", "waiting_user")]
    task = client.get("/api/tasks/langgraph:ui").json()
    assert task["card"]["langgraph"] == {"thread_id": "ui", "checkpoint_ns": ""}
    assert len(task["timeline"]["rows"]) == task["version"]
    step = client.get("/api/steps/2/langgraph:ui").json()
    assert any(op["path"] == "/version" for op in step["diff"]["patch"])


# ---------------------------------------------------------------- writes and ordering


def test_writes_before_their_checkpoint_and_after_the_next_are_kept() -> None:
    """Background saves race: writes may arrive before their checkpoint, or late."""
    saver = SkillstateSaver(MemoryStore())
    first = saver.put(_config("t"), _checkpoint({}, {}), {"step": 0}, {})
    second_cp = _checkpoint({}, {})
    early = _config("t", second_cp["id"])
    saver.put_writes(early, [("a", 1)], "early-task")
    second = saver.put(first, second_cp, {"step": 1}, {})
    saver.put_writes(first, [("b", 2)], "late-task")
    saver.put_writes(first, [("b", 2)], "late-task")  # saved already: no new version
    got_second = saver.get_tuple(second)
    got_first = saver.get_tuple(first)
    assert got_second is not None
    assert got_first is not None
    assert got_second.pending_writes == [("early-task", "a", 1)]
    assert got_first.pending_writes == [("late-task", "b", 2)]
    latest = saver.get_tuple(_config("t"))
    assert latest is not None
    assert latest.config == second
    assert saver.store.load("langgraph:t").version == 4


def test_old_checkpoints_read_by_id_on_a_long_thread(tmp_path: Path) -> None:
    """Any checkpoint named by id reads back as put, with its own writes, from the
    saver that wrote it and from a fresh one (which has no index or head in memory);
    what it returns is the caller's to change."""
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    puts: list[tuple[Any, dict[str, Any]]] = []
    with contextlib.ExitStack() as stack:
        saver = stack.enter_context(SkillstateSaver.from_url(url))
        config = _config("t")
        for n in range(40):
            values = {"n": n, "facts": {"k": [n, "$lg", 2**40]}, "text": "x" * (n % 7)}
            versions = dict.fromkeys(values, n + 1)
            config = saver.put(config, _checkpoint(values, versions), {"step": n}, versions)
            saver.put_writes(config, [("n", n + 1), ("text", f"w{n}")], f"task-{n}")
            puts.append((config, values))
        fresh = stack.enter_context(SkillstateSaver.from_url(url))
        for reader in (saver, fresh):
            for config, values in (puts[0], puts[17], puts[-1], puts[5]):
                got = reader.get_tuple(config)
                assert got is not None
                assert got.config == config
                assert got.checkpoint["channel_values"] == values
                n = values["n"]
                assert got.pending_writes == [
                    (f"task-{n}", "n", n + 1),
                    (f"task-{n}", "text", f"w{n}"),
                ]
                got.checkpoint["channel_values"]["facts"]["k"].append("changed")
                again = reader.get_tuple(config)
                assert again is not None
                assert again.checkpoint["channel_values"] == values
            assert reader.get_tuple(_config("t", "not-a-checkpoint")) is None
            assert (
                reader.get_tuple(_config("nobody", puts[0][0]["configurable"]["checkpoint_id"]))
                is None
            )


def test_a_thread_deleted_from_the_store_and_made_again_reads_right() -> None:
    """A reader whose index knew the old task starts over when its history is gone."""
    store = MemoryStore()
    reader, writer = SkillstateSaver(store), SkillstateSaver(store)
    config = _config("t")
    for n in range(6):
        config = writer.put(config, _checkpoint({"n": n}, {"n": n + 1}), {}, {"n": n + 1})
    assert reader.get_tuple(config) is not None  # the reader's index has 6 versions
    store.delete_task("langgraph:t")
    again = writer.put(_config("t"), _checkpoint({"n": 99}, {"n": 1}), {}, {"n": 1})
    got = reader.get_tuple(again)
    assert got is not None
    assert got.checkpoint["channel_values"] == {"n": 99}
    assert reader.get_tuple(config) is None


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    """Threads of one saver and a second saver on the same file: every write is kept."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with SkillstateSaver.from_url(url) as one, SkillstateSaver.from_url(url) as two:
        stored = one.put(_config("t"), _checkpoint({}, {}), {}, {})
        start = threading.Barrier(8)
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            saver = one if n % 2 else two  # the other saver's commits are StaleState here
            try:
                start.wait(timeout=30)
                for k in range(5):
                    saver.put_writes(stored, [(f"ch{k}", n * 10 + k)], f"task-{n}-{k}")
            except BaseException as exc:  # reported by the assert below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors
        got = one.get_tuple(stored)
        assert got is not None
        assert sorted(w[2] for w in got.pending_writes) == sorted(
            n * 10 + k for n in range(8) for k in range(5)
        )
        assert diagnose(one.store, "langgraph:t", None).healthy


def test_namespaces_and_thread_ids_map_to_distinct_tasks() -> None:
    """Any thread id and namespace get their own task; listing without a namespace sees all."""
    saver = SkillstateSaver(MemoryStore())
    for thread, ns in [("a:b", ""), ("a", "b"), ("a", ""), ("a/b c", "child:1|x")]:
        saver.put(
            _config(thread, ns=ns), _checkpoint({"w": f"{thread}|{ns}"}, {"w": 1}), {}, {"w": 1}
        )
    assert len(saver.store.tasks()) == 4
    listed = list(saver.list({"configurable": {"thread_id": "a"}}))
    assert sorted(t.checkpoint["channel_values"]["w"] for t in listed) == ["a|", "a|b"]
    assert len(list(saver.list(None))) == 4


def test_usage_errors() -> None:
    store = MemoryStore()
    with pytest.raises(UsageError, match="channel names"):
        SkillstateSaver(store, sensitive="api_key")
    saver = SkillstateSaver(store)
    with pytest.raises(UsageError, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(UsageError, match="strategy"):
        saver.prune(["t"], strategy="keep_some")


def test_from_url_owns_its_store(tmp_path: Path) -> None:
    """A saver from a URL closes its store on exit; one given a store leaves it open."""
    url = f"sqlite:///{tmp_path / 'o.db'}"
    store = open_store(url)
    with SkillstateSaver(store) as saver:
        saver.put(_config(str(uuid.uuid4())), _checkpoint({}, {}), {}, {})
    assert len(store.tasks()) == 1  # still open
    store.close()
    with SkillstateSaver.from_url(url) as owned:
        assert owned.store.url == url
        assert len(owned.store.tasks()) == 1


def test_docs_example_runs(tmp_path: Path) -> None:
    """docs/integrations/langgraph.md's complete example runs as a script and prints
    what its comments say."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "langgraph.md"
    lines = run_example(doc, tmp_path, "refund_graph.py")
    assert lines == ["{'question': 'Refund 40 EUR?'}", "True 2", "True"]
    assert (tmp_path / "refunds.db").exists()
