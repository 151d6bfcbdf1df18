"""The inspector's task tree in a real headless Chromium (as test_ui_browser.py): the
list shown as a tree, a parent's children, a child's own timeline and the way back.

The store holds one real run of the fan-out example (``skillstate.examples.channels``:
a parent and three children). Skips like test_ui_browser.py without Playwright or the
system's Chromium.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.cli_support import cli_env, run_env
from tests.test_ui_browser import WAIT, browser, page  # noqa: F401 (fixtures)
from tests.ui_support import Server, serve

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

EXAMPLE = "skillstate.examples.channels:agent"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> Iterator[Server]:  # noqa: F811
    root: Path = tmp_path_factory.mktemp("ui-tree")
    code, out, err = run_env(
        root, None, "run", EXAMPLE, "--task-id", "weekly", "-q",
        "--set", "channels=[support, sales, billing]", "--set", "report_path=report.md",
    )  # fmt: skip
    assert code == 0, (out, err)
    with serve(root, cli_env(root), "--store", f"sqlite:///{root / 'state.db'}") as opened:
        yield opened


def test_tree_list_parent_children_and_back(page: Page, server: Server) -> None:  # noqa: F811
    """Tick "children under parents", open the parent, open a child from its tree, see
    the child's own timeline, and follow its parent link back."""
    from playwright.sync_api import expect

    page.goto(server.url)
    page.locator('input[name="tree"]').check()
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"[?&]tree=1$"), timeout=WAIT)
    children = page.locator("#tasks td.child a.task-link")
    expect(children).to_have_count(3)
    expect(children).to_have_text(["weekly.2.billing", "weekly.2.sales", "weekly.2.support"])

    page.get_by_role("link", name="weekly", exact=True).click()
    tree = page.locator("#children li[data-child]")
    expect(tree).to_have_count(3)
    expect(page.locator("#children")).to_contain_text("sales: top issue late_delivery")

    page.locator("#children").get_by_role("link", name="weekly.2.sales").click()
    expect(page).to_have_url(f"{server.url}tasks/weekly.2.sales")
    expect(page.locator("#timeline > li").first).to_be_visible()
    expect(page.locator("#parent")).to_contain_text("kind channel, key sales")

    page.locator("#parent").get_by_role("link", name="weekly").click()
    expect(page).to_have_url(f"{server.url}tasks/weekly")
