"""The web inspector's tests share this: a store filled by real demo runs, and a
``skillstate ui`` server started as a subprocess on a free port.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.cli_support import cli_env, run_env
from tests.test_cli import ENTRY

if TYPE_CHECKING:
    from starlette.testclient import TestClient

SECRET = "tok-UI-9f3a71c2e5"
"""The orders demo's API token: stored sealed, never shown by any page."""
KEY_ENV = "SKILLSTATE_KEY"


@dataclass(frozen=True)
class DemoStore:
    """A SQLite store with: t1 (ticket, completed), t2 (ticket, waiting for its first
    reply), o1 (orders, completed, with a sensitive token), and the env it was made with."""

    root: Path
    url: str
    env: dict[str, str]


def _key() -> str:
    from skillstate.state.secrets import generate_key

    return generate_key()


def demo_store(root: Path) -> DemoStore:
    """Fill ``root/state.db`` with real ``skillstate demo`` runs."""
    root.mkdir(parents=True, exist_ok=True)
    extra = {KEY_ENV: _key(), "ORDERS_API_TOKEN": SECRET}
    for args in (
        ("demo", "ticket", "-q", "--task-id", "t1"),
        ("demo", "ticket", "-q", "--task-id", "t2", "--no-sample"),
        ("demo", "orders", "-q", "--task-id", "o1"),
    ):
        code, out, err = run_env(root, extra, *args)
        assert code == 0, (args, out, err)
    return DemoStore(root, f"sqlite:///{root / 'state.db'}", cli_env(root, extra))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    """A running ``skillstate ui``."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "api/tasks", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextmanager
def serve(
    root: Path, env: Mapping[str, str], *args: str, timeout: float = 60.0
) -> Iterator[Server]:
    """``skillstate ui ARGS`` on a free port, until the block ends; waits until it answers."""
    port = free_port()
    log = root / f"ui-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "ui", "--port", str(port), *args],
            cwd=root,
            env=dict(env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(process, f"http://127.0.0.1:{port}/", log)
    try:
        deadline = time.monotonic() + timeout
        while not _answers(server.url):
            if process.poll() is not None:
                raise AssertionError(f"skillstate ui exited: {server.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"skillstate ui did not answer in {timeout} s")
            time.sleep(0.05)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def post(url: str, body: bytes, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
    """POST ``body`` to ``url``; (status, text) also for an error status."""
    request = urllib.request.Request(url, data=body, method="POST", headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8")


def copy_store(source: Path, target_dir: Path) -> str:
    """A private copy of the SQLite store ``source`` (for tests that write); its URL."""
    import sqlite3

    target = target_dir / "state.db"
    with sqlite3.connect(source) as opened, sqlite3.connect(target) as copy:
        opened.backup(copy)
    return f"sqlite:///{target}"


def ui_client(url: str, **options: Any) -> TestClient:
    """The inspector of store ``url`` in process (any Host header accepted)."""
    from starlette.testclient import TestClient

    from skillstate.ui import UIConfig, create_app

    return TestClient(create_app(UIConfig(store_url=url, hosts=(), **options)))


def chromium_path() -> str | None:
    """The system Chromium (Playwright's own download is not used)."""
    for candidate in (os.environ.get("SKILLSTATE_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and os.path.isfile(candidate):
            return candidate
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")
