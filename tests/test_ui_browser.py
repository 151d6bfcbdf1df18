"""The web inspector in a real headless Chromium, driven by Playwright.

``skillstate ui`` runs as a subprocess on a free port against a store filled by real
demo runs. Every wait is on an observed condition (Playwright's ``expect``), never a
fixed sleep. Without Playwright or the system's Chromium (``apt-get install
chromium``; Playwright's own browser download is not used) the tests skip with the
reason, unless ``SKILLSTATE_REQUIRE_SERVICES=1`` (CI), where they fail.

``SKILLSTATE_UI_SCREENSHOTS=docs/img`` also writes the screenshots the docs show.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.cli_support import wait_for
from tests.test_cli import ENTRY
from tests.ui_support import SECRET, DemoStore, Server, chromium_path, demo_store, post, serve

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

TOKEN = "browser-token-5f1e0c9a"
WAIT = 60_000
"""Milliseconds any expectation may take (the test machines are small and busy)."""


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return "chromium is not installed (apt-get install chromium; .ci/run does)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module (the system's binary)."""
    missing = _missing()
    if missing is not None:
        if os.environ.get("SKILLSTATE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{missing} (SKILLSTATE_REQUIRE_SERVICES=1)")
        pytest.skip(missing)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT)
    with sync_playwright() as driver:
        opened = driver.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield opened
        opened.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> DemoStore:
    return demo_store(tmp_path_factory.mktemp("ui-browser"))


@pytest.fixture(scope="module")
def reader(demo: DemoStore) -> Iterator[Server]:
    """A read-only server (the default)."""
    with serve(demo.root, demo.env, "--store", demo.url) as server:
        yield server


@pytest.fixture
def editor(demo: DemoStore, tmp_path: Path) -> Iterator[Server]:
    """A server with --allow-edit on a private copy of the store."""
    target = tmp_path / "state.db"
    with sqlite3.connect(demo.root / "state.db") as source, sqlite3.connect(target) as copy:
        source.backup(copy)
    env = {**demo.env, "SKILLSTATE_UI_TOKEN": TOKEN}
    with serve(tmp_path, env, "--store", f"sqlite:///{target}", "--allow-edit") as server:
        yield server


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    opened = context.new_page()
    opened.set_default_timeout(WAIT)
    yield opened
    context.close()


DEVELOPER_PATH = re.compile(r"(?<![\w.:/-])/(?:tmp|home|work|root|Users|private|var)/")
"""An absolute path of the machine the pages run on (a screenshot must not show one)."""


def _shot(page: Page, name: str, **options: Any) -> None:
    """Save a screenshot for the docs when SKILLSTATE_UI_SCREENSHOTS names a folder.

    Whether or not it is saved, what it would show is checked for the server's paths.
    """
    shown = page.locator("body").inner_text()
    assert not DEVELOPER_PATH.search(shown), DEVELOPER_PATH.search(shown)
    folder = os.environ.get("SKILLSTATE_UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), **options)


def _get(url: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
        return body


def test_tasks_timeline_diff_and_chart(page: Page, reader: Server) -> None:
    """Open the list, click into a task, through its timeline to a diff, and see the chart."""
    from playwright.sync_api import expect

    page.goto(reader.url)
    rows = page.locator("#tasks tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#tasks")).to_contain_text("waiting_user")
    expect(page.locator(".mode.ro")).to_have_text("read-only")
    expect(page.locator("header .store")).to_have_text("sqlite:///state.db")
    _shot(page, "ui-tasks.png")

    page.get_by_role("link", name="t1", exact=True).click()
    expect(page.locator("#timeline > li")).to_have_count(10)
    expect(page.locator("#card")).to_contain_text("network")
    chart = page.locator("#token-chart svg polyline.series")
    expect(chart).to_have_count(2)
    expect(page.locator("#token-chart")).to_contain_text("full history")
    _shot(page, "ui-timeline.png", full_page=True)
    folder = os.environ.get("SKILLSTATE_UI_SCREENSHOTS")
    if folder:
        page.locator("#token-chart").screenshot(path=str(Path(folder) / "ui-tokens.png"))

    page.locator("#v4 a.step-link").click()
    expect(page).to_have_url(f"{reader.url}steps/4/t1")
    after = page.locator('.field-diff[data-field="ticket_type"] pre.after')
    expect(after).to_have_text('"network"')
    expect(page.locator('.field-diff[data-field="ticket_type"] pre.before')).to_have_text("null")
    expect(page.locator("#calls")).to_contain_text("classify_ticket")
    _shot(page, "ui-diff.png", full_page=True)
    page.locator("#next-step").click()
    expect(page).to_have_url(f"{reader.url}steps/5/t1")
    page.get_by_role("link", name="the whole card at version 5 →").click()
    expect(page.locator("#state")).to_contain_text('"version": 5')


def test_secret_is_masked_in_the_browser(page: Page, reader: Server) -> None:
    """The orders token shows as *** on the card, and its plaintext is nowhere in the page."""
    from playwright.sync_api import expect

    page.goto(f"{reader.url}tasks/o1")
    expect(page.locator('#card tr[data-field="api_token"] td')).to_have_text("***")
    expect(page.locator("#token-chart svg")).to_have_count(1)
    assert SECRET not in page.content()
    page.locator("#timeline a.step-link").first.click()
    expect(page.locator("#diff")).to_contain_text("api_token")
    assert SECRET not in page.content()


def test_read_only_server_refuses_writes(page: Page, reader: Server) -> None:
    """Without --allow-edit there are no forms, and a write is refused (403)."""
    from playwright.sync_api import expect

    page.goto(f"{reader.url}tasks/t2")
    expect(page.locator("#question")).to_contain_text("What is the problem")
    expect(page.locator("#actions")).to_have_count(0)
    status, text = post(
        f"{reader.url}api/actions/reply/t2",
        b'{"text": "x"}',
        {"Content-Type": "application/json", "X-Skillstate-Token": TOKEN},
    )
    assert status == 403
    assert "read-only" in text


def test_reply_with_the_token_advances_the_task(page: Page, editor: Server) -> None:
    """A reply typed in the page, with the token, commits and the task moves on."""
    from playwright.sync_api import expect

    page.goto(f"{editor.url}tasks/t2#token={TOKEN}")
    expect(page.locator("#question")).to_contain_text("What is the problem")
    expect(page.locator("#reply-form input.token")).to_have_value(TOKEN)
    page.locator('#reply-form input[name="text"]').fill("The VPN keeps dropping")
    page.locator("#reply-form button").click()
    expect(page.locator("#notice")).to_contain_text("replied as version 3")
    expect(page.locator("#question")).to_contain_text("How urgent is it?")
    expect(page.locator("#timeline")).to_contain_text("answer: The VPN keeps dropping")
    expect(page.locator("#status")).to_have_text("waiting_user")


def test_a_write_without_the_token_is_refused(page: Page, editor: Server) -> None:
    """--allow-edit without the token: the form's write is refused and nothing changes."""
    from playwright.sync_api import expect

    page.goto(f"{editor.url}tasks/t1")
    expect(page.locator("#version")).to_have_text("version 10")
    page.locator('#set-form textarea[name="assignments"]').fill("resolution=by hand")
    page.locator("#set-form button").click()
    expect(page.locator("#error")).to_contain_text("needs the inspector's token")
    page.goto(f"{editor.url}tasks/t1")
    expect(page.locator("#version")).to_have_text("version 10")


def test_running_task_updates_without_reload(page: Page, reader: Server, demo: DemoStore) -> None:
    """A task committing steps in another process: its open page follows, no reload."""
    from playwright.sync_api import expect

    ledger = demo.root / "ledger.txt"
    args = ["demo", "ledger", "-q", "--task-id", "L", "--steps", "40", "--step-delay", "0.3"]
    with (demo.root / "ledger.out").open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", ENTRY, *args, "--ledger", str(ledger)],
            cwd=demo.root,
            env=demo.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(
            lambda: b'"task_id":"L"' in _get(f"{reader.url}api/tasks?q=L"),
            process=process,
            what="task L to start",
        )
        page.goto(f"{reader.url}tasks/L")
        first = int(page.locator("#live").get_attribute("data-version") or 0)
        page.evaluate("window.__sameDocument = true")
        expect(page.locator("#live")).not_to_have_attribute("data-version", str(first))
        moved = int(page.locator("#live").get_attribute("data-version") or 0)
        assert moved > first
        assert page.evaluate("window.__sameDocument") is True
        expect(page.locator(f"#v{moved}")).to_have_count(1)
    finally:
        process.terminate()
        process.wait(timeout=30)
