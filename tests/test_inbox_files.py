"""The files store's inbox across crashes: a killed post leaves its message whole or absent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from skillstate.errors import StateCorrupted
from skillstate.events import Event
from skillstate.store.files import FilesStore, task_dir_name
from skillstate.store.files_inbox import INBOX
from tests.cli_support import wait_for
from tests.workers_support import ROOT

_POSTER = """
import sys
from skillstate.store.files import FilesStore
store = FilesStore(sys.argv[1])
n = 0
while True:  # large bodies: a kill lands inside a write more often
    n += 1
    store.post("t", "message", {"n": n, "pad": "x" * 60000})
"""


def _store(root: Path) -> FilesStore:
    store = FilesStore(root)
    state = {"task_id": "t", "version": 1, "facts": {}}
    store.commit("t", 0, state, Event(task_id="t", version=1, actor="runtime", action={}))
    return store


def test_a_torn_append_is_ignored_then_cut_off(tmp_path: Path) -> None:
    """What a crash mid-append leaves (a last line without its newline) is no message;
    the next post cuts it off and takes the number it would have had."""
    store = _store(tmp_path)
    store.post("t", "message", {"n": 1})
    path = tmp_path / task_dir_name("t") / INBOX
    with open(path, "ab") as out:
        out.write(b'{"seq":2,"kind":"message","at":"2026-01-01T00:00:00+00:00","bo')
    assert [m.seq for m in store.inbox("t")] == [1]
    assert store.post("t", "message", {"n": 2}) == 2
    assert [m.body["n"] for m in store.inbox("t")] == [1, 2]
    assert path.read_bytes().endswith(b"\n")
    assert path.read_bytes().count(b"\n") == 2


def test_a_damaged_complete_line_is_corruption(tmp_path: Path) -> None:
    """A complete line that does not parse is never a crash: StateCorrupted naming it."""
    store = _store(tmp_path)
    store.post("t", "message", {"n": 1})
    path = tmp_path / task_dir_name("t") / INBOX
    with open(path, "ab") as out:
        out.write(b"not json\n")
    with pytest.raises(StateCorrupted, match=r"inbox\.jsonl line 2"):
        store.inbox("t")
    with pytest.raises(StateCorrupted):
        store.post("t", "message", {"n": 3})


def test_kill_9_while_posting(tmp_path: Path) -> None:
    """A process posting 60 KB messages is killed: every message is whole, numbered
    1..n without a gap, and the next post is n + 1."""
    store = _store(tmp_path)
    poster = subprocess.Popen([sys.executable, "-c", _POSTER, str(tmp_path)], cwd=ROOT)
    try:
        wait_for(lambda: len(store.inbox("t")) >= 20, process=poster, what="20 posts")
    finally:
        os.kill(poster.pid, signal.SIGKILL)
        poster.wait()
    messages = store.inbox("t")
    n = len(messages)
    assert n >= 20
    assert [m.seq for m in messages] == list(range(1, n + 1))
    assert [m.body["n"] for m in messages] == list(range(1, n + 1))
    assert all(len(m.body["pad"]) == 60000 for m in messages)
    assert store.post("t", "message", {"n": "after"}) == n + 1
    assert store.inbox("t", after=n)[0].body == {"n": "after"}
