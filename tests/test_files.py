"""The files store beyond the contract: its layout, crash safety, bad input (races: contract)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from skillstate.errors import (
    ArtifactNotFound,
    InvalidStoreURL,
    LeaseHeld,
    StaleState,
    StateCorrupted,
    StoreError,
    UsageError,
)
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store import open_store
from skillstate.store.files import FilesStore, task_dir_name, task_id_from_dir


def doc(task_id: str, version: int, **extra: Any) -> dict[str, Any]:
    return {"task_id": task_id, "version": version, "facts": {}, **extra}


def event(task_id: str, version: int, **extra: Any) -> Event:
    return Event(
        task_id=task_id, version=version, actor="runtime", action={"kind": "test"}, **extra
    )


def step(store: FilesStore, task_id: str, previous: dict[str, Any], **facts: Any) -> dict[str, Any]:
    """Commit the next version the way the runtime does (with its patch); return it."""
    version = previous.get("version", 0) + 1
    state = {**doc(task_id, version), **{k: v for k, v in previous.items() if k == "log"}}
    state["facts"] = facts
    store.commit(
        task_id, version - 1, state, event(task_id, version, patch=make_patch(previous, state))
    )
    return state


def chain(store: FilesStore, task_id: str, versions: int) -> dict[int, dict[str, Any]]:
    """Commit ``versions`` versions over a large constant log: all but the first are deltas."""
    committed: dict[int, dict[str, Any]] = {}
    previous: dict[str, Any] = {"log": ["a long line that makes the state big " * 4] * 20}
    for v in range(1, versions + 1):
        previous = step(store, task_id, previous, n=v)
        committed[v] = previous
    return committed


@pytest.fixture
def store(tmp_path: Path) -> FilesStore:
    return FilesStore(tmp_path / "files")


class TestLayout:
    def test_files_are_human_readable(self, store: FilesStore) -> None:
        """One YAML per checkpoint shows the state or the patch; head and events are JSON."""
        log = ["a line long enough that one changed number is a small delta"] * 5
        first = doc("t", 1, facts={"工单": "网络故障", "n": 1}, log=log)
        store.commit("t", 0, first, event("t", 1, patch=make_patch({}, first)))
        second = doc("t", 2, facts={"工单": "网络故障", "n": 2}, log=log)
        store.commit("t", 1, second, event("t", 2, patch=make_patch(first, second)))
        task = store.root / "t"
        assert sorted(p.name for p in task.iterdir()) == [
            ".lock",
            "events.jsonl",
            "head.json",
            "state_step_0001.yaml",
            "state_step_0002.yaml",
        ]
        text = (task / "state_step_0001.yaml").read_text(encoding="utf-8")
        assert text.startswith("task_id: t\nversion: 1\ncreated_at: ")
        assert "stored_as: snapshot\nstate:\n" in text
        assert "工单: 网络故障" in text  # unicode is written as is, not escaped
        snapshot = yaml.safe_load(text)
        assert snapshot["state"] == first
        assert snapshot["patch"] == make_patch({}, first)  # the audit log keeps it

        delta = yaml.safe_load((task / "state_step_0002.yaml").read_text(encoding="utf-8"))
        assert delta["stored_as"] == "delta"
        assert "state" not in delta
        assert {"op": "replace", "path": "/facts/n", "value": 2} in delta["patch"]

        head = json.loads((task / "head.json").read_text(encoding="utf-8"))
        assert (head["version"], head["state"]) == (2, second)
        lines = (task / "events.jsonl").read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["version"] for line in lines] == [1, 2]
        assert all("patch" not in json.loads(line) for line in lines)

    def test_urls(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """file:///abs is absolute, file://rel is relative to the working directory."""
        absolute = open_store(f"file://{tmp_path}/abs")
        assert isinstance(absolute, FilesStore)
        assert absolute.root == tmp_path / "abs"
        assert absolute.url == f"file://{tmp_path}/abs"
        monkeypatch.chdir(tmp_path)
        relative = open_store("file://rel/dir")
        assert isinstance(relative, FilesStore)
        assert not relative.root.is_absolute()
        assert (tmp_path / "rel" / "dir").is_dir()
        with pytest.raises(InvalidStoreURL):
            open_store("file://")
        (tmp_path / "plain").write_text("not a directory")
        with pytest.raises(InvalidStoreURL, match="cannot use"):
            open_store("file://plain")

    def test_reopened_store_sees_everything(self, tmp_path: Path) -> None:
        """A second store on the same directory reads what the first wrote."""
        first = FilesStore(tmp_path / "d")
        committed = chain(first, "t", 5)
        ref = first.put_artifact(b"blob")
        first.close()
        first.close()
        again = FilesStore(tmp_path / "d")
        assert again.load("t").state == committed[5]
        assert again.checkpoint("t", 3).state == committed[3]
        assert again.get_artifact(ref) == b"blob"
        assert (tmp_path / "d" / "artifacts" / ref.replace(":", "-")).read_bytes() == b"blob"

    @settings(max_examples=60, deadline=None)
    @given(
        st.dictionaries(
            st.text(max_size=8),
            st.recursive(
                st.none()
                | st.booleans()
                | st.integers()
                | st.floats(allow_nan=False, allow_infinity=False)
                | st.text()
                | st.sampled_from(["yes", "null", "1:20", "0x1F", "<<", "=", "2024-01-01", "~"]),
                lambda inner: (
                    st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner)
                ),
                max_leaves=20,
            ),
            max_size=6,
        )
    )
    def test_yaml_round_trips_any_json(self, facts: dict[str, Any]) -> None:
        """A state read back from its YAML file is the committed JSON, types included."""
        root = tempfile.mkdtemp()
        try:
            store = FilesStore(root)
            state = doc("t", 1, facts=facts)
            store.commit("t", 0, state, event("t", 1))
            store.commit("t", 1, doc("t", 2), event("t", 2))  # so version 1 is read from YAML
            loaded = store.checkpoint("t", 1).state
            assert json.dumps(loaded, sort_keys=True) == json.dumps(state, sort_keys=True)
        finally:
            shutil.rmtree(root)


class TestCrashes:
    def test_crash_before_head_rename(
        self, store: FilesStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A commit that dies before head.json is renamed leaves the previous head intact."""
        committed = chain(store, "t", 3)
        real_replace = os.replace

        def crash_on_head(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            if os.path.basename(dst) == "head.json":
                raise OSError(errno.EIO, "simulated crash")
            real_replace(src, dst, *args, **kwargs)

        with monkeypatch.context() as patched:
            patched.setattr(os, "replace", crash_on_head)
            with pytest.raises(StoreError, match="simulated crash"):
                step(store, "t", committed[3], phantom=True)
        task = store.root / "t"
        assert (task / "state_step_0004.yaml").exists()  # the leftover is there...
        assert '"version":4' in (task / "events.jsonl").read_text()
        for reader in (store, FilesStore(store.root)):  # ...and ignored by every reader
            assert reader.load("t").state == committed[3]
            assert [e.version for e in reader.events("t")] == [1, 2, 3]
            assert [c.version for c in reader.checkpoints("t")] == [1, 2, 3]
            with pytest.raises(StoreError):
                reader.checkpoint("t", 4)
        with pytest.raises(StaleState):
            store.commit("t", 4, doc("t", 5), event("t", 5))

        real = step(store, "t", committed[3], real=True)  # the retry overwrites the leftover
        assert store.load("t").state == real
        events = store.events("t")
        assert [e.version for e in events] == [1, 2, 3, 4]
        assert events[-1].patch == make_patch(committed[3], real)
        step(store, "t", real, after=True)
        assert store.checkpoint("t", 4).state == real

    def test_leftovers_written_by_hand(self, store: FilesStore) -> None:
        """Garbage above the head (a broken YAML, an event line, temp files) is ignored."""
        committed = chain(store, "t", 2)
        task = store.root / "t"
        (task / "state_step_0003.yaml").write_text("version: [half written")
        (task / ".head.json.x1y2.tmp").write_text('{"version": 3')
        with (task / "events.jsonl").open("a") as log:
            log.write(event("t", 3, error="phantom").model_dump_json(exclude={"patch"}) + "\n")
        assert store.load("t").version == 2
        assert [e.version for e in store.events("t")] == [1, 2]
        assert store.tasks() == ["t"]

        third = step(store, "t", committed[2], n=3)
        assert [(e.version, e.error) for e in store.events("t")] == [
            (1, None),
            (2, None),
            (3, None),
        ]
        assert yaml.safe_load((task / "state_step_0003.yaml").read_text())["version"] == 3
        assert store.checkpoint("t", 3).state == third
        (task / "state_step_0004.yaml").write_text("version: [half written")
        (task / ".state_step_0004.yaml.a1b2.tmp").write_text("half")
        assert store.prune("t", keep_last=10).deleted == []
        assert not list(task.glob("*.tmp")), "prune clears what crashed writers left"
        assert not (task / "state_step_0004.yaml").exists()

    def test_torn_event_line_is_skipped_then_repaired(self, store: FilesStore) -> None:
        """A half-appended event line is invisible to readers and cut off by the next commit."""
        committed = chain(store, "t", 2)
        log = store.root / "t" / "events.jsonl"
        with log.open("a") as handle:
            handle.write('{"task_id":"t","version":3,"act')
        assert [e.version for e in store.events("t")] == [1, 2]

        step(store, "t", committed[2], n=3)
        text = log.read_text()
        assert text.endswith("\n")
        assert [json.loads(line)["version"] for line in text.splitlines()] == [1, 2, 3]
        assert [e.version for e in store.events("t")] == [1, 2, 3]

    def test_torn_first_line(self, store: FilesStore) -> None:
        """A torn line with no complete line before it is cut back to an empty log."""
        (store.root / "t").mkdir(parents=True)
        (store.root / "t" / "events.jsonl").write_bytes(b'{"task_id":')
        store.commit("t", 0, doc("t", 1), event("t", 1))
        assert [e.version for e in store.events("t")] == [1]
        assert (store.root / "t" / "events.jsonl").read_bytes().count(b"\n") == 1


class TestCorruption:
    def test_broken_yaml_mid_chain_names_the_version(self, store: FilesStore) -> None:
        """A hand-broken delta makes every version rebuilt through it StateCorrupted."""
        committed = chain(store, "t", 8)
        infos = {i.version: i.snapshot for i in store.checkpoints("t")}
        assert infos[1]
        assert not any(infos[v] for v in range(2, 9)), infos
        path = store.root / "t" / "state_step_0005.yaml"
        path.write_text(path.read_text() + "  - {op: [unclosed\n")
        with pytest.raises(StateCorrupted) as info:
            store.checkpoint("t", 7)
        assert info.value.version == 5
        assert "state_step_0005.yaml" in str(info.value)
        assert "\n" not in str(info.value)
        assert store.checkpoint("t", 4).state == committed[4]  # before the break: fine
        assert store.load("t").state == committed[8]  # the head never replays the chain

    def test_wrong_content_and_missing_files(self, store: FilesStore) -> None:
        """Valid YAML that is not a checkpoint, or a deleted delta, is StateCorrupted too."""
        chain(store, "t", 6)
        task = store.root / "t"
        (task / "state_step_0003.yaml").write_text("version: 3\nstored_as: sideways\n")
        with pytest.raises(StateCorrupted, match=r"version 3 .*stored_as"):
            store.checkpoint("t", 4)
        (task / "state_step_0003.yaml").unlink()
        with pytest.raises(StateCorrupted, match=r"version 3 .*state_step_0003.yaml is missing"):
            store.checkpoint("t", 5)
        with pytest.raises(StoreError, match="no checkpoint at version 3"):
            store.checkpoint("t", 3)
        (task / "head.json").write_text("{not json")
        with pytest.raises(StateCorrupted, match=r"head\.json"):
            store.load("t")


class TestTaskIds:
    @pytest.mark.parametrize(
        "task_id",
        ["a/b", "..", ".", ".hidden", "with space", "工单-7", "artifacts", "Artifacts", "%41"],
    )
    def test_awkward_ids_are_encoded_reversibly(self, store: FilesStore, task_id: str) -> None:
        """Every id becomes one visible directory inside the store, and lists back as itself."""
        store.commit(task_id, 0, doc(task_id, 1), event(task_id, 1))
        [folder] = [p for p in store.root.iterdir() if (p / "head.json").exists()]
        assert folder.parent == store.root
        assert not folder.name.startswith(".")
        assert folder.name.lower() != "artifacts"
        assert task_id_from_dir(folder.name) == task_id
        assert store.tasks() == [task_id]
        assert store.load(task_id).state == doc(task_id, 1)
        assert task_dir_name("a/b") == "a%2Fb"

    @pytest.mark.parametrize("task_id", ["", "x" * 300, "\ud800"])
    def test_impossible_ids_are_refused(self, store: FilesStore, task_id: str) -> None:
        """An id that cannot be a directory name is a one-line UsageError, and writes nothing."""
        with pytest.raises(UsageError) as info:
            store.commit(task_id, 0, doc(task_id, 1), event(task_id, 1))
        assert "invalid task id" in str(info.value)
        assert "\n" not in str(info.value)
        with pytest.raises(UsageError):
            store.load(task_id)
        assert list(store.root.iterdir()) == []

    def test_unwritable_text_writes_nothing(self, store: FilesStore) -> None:
        """A state string that is not valid Unicode fails the commit before any file."""
        store.commit("t", 0, doc("t", 1), event("t", 1))
        with pytest.raises(StoreError, match="cannot be written"):
            store.commit("t", 1, doc("t", 2, facts={"bad": "\ud800"}), event("t", 2))
        assert sorted(p.name for p in (store.root / "t").iterdir()) == [
            ".lock",
            "events.jsonl",
            "head.json",
            "state_step_0001.yaml",
        ]
        assert store.claim("t", "w\ud800", 30).worker == "w\ud800"
        with pytest.raises(LeaseHeld) as info:
            store.claim("t", "other", 30)
        assert info.value.holder == "w\ud800"

    def test_foreign_folders_are_not_tasks(self, store: FilesStore) -> None:
        """Folders this store did not name (or without a head) are not listed."""
        (store.root / "my task").mkdir()
        (store.root / "my task" / "head.json").write_text("{}")
        store.claim("leased-only", "w", 30)
        assert store.tasks() == []

    def test_artifact_refs_cannot_escape(self, store: FilesStore) -> None:
        """A ref is a sha256 digest or nothing: no path can be smuggled through it."""
        for ref in ("sha256:../../etc/passwd", "sha256:" + "A" * 64, "md5:abc", ""):
            with pytest.raises(ArtifactNotFound):
                store.get_artifact(ref)
