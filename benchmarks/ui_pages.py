"""Web inspector pages: how long the task list of 10,000 tasks and a 1,000-step timeline take.

    .venv/bin/python benchmarks/ui_pages.py [--tasks 10000] [--steps 1000] [--repeat 5]
        [--dir DIR] [--browser] [--chart]

It builds two SQLite stores (once; ``--dir`` keeps them between runs): one with
``--tasks`` tasks made by the ticket demo's agent (one in a hundred run to the end,
the rest created), one with the ledger demo run for ``--steps`` entries (a timeline
of about twice as many versions). Then it times, median of ``--repeat``:

* server: the tasks page (``GET /``), its JSON (``GET /api/tasks``), the task page
  of the long task (its latest timeline page) and a step's diff page, through
  Starlette's TestClient in this process; the baseline is the store read each page
  is built on (``Store.heads()``, ``Store.events()``), measured in the same run, and
  the ratio says what the page adds to it;
* ``--browser``: the same pages in headless Chromium (the system's ``chromium``,
  driven by Playwright) against ``skillstate ui`` on a free port, from navigation
  start to the load event (``performance`` navigation timing);
* ``--chart``: the token chart of the long task (rebuilding the full-history
  transcript costs the square of the decisions: measured once, cold).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build_many(path: Path, count: int) -> None:
    from skillstate.engine.agent import load_agent
    from skillstate.engine.runtime import Runtime
    from skillstate.store.sqlite import SQLiteStore

    agent = load_agent("skillstate.examples.ticket:agent")
    store = SQLiteStore(path)
    runtime = Runtime(agent, store, lease=False)
    try:
        for i in range(count):
            task = f"ticket-{i:05d}"
            if i % 100 == 0:
                runtime.run(task, inputs=list(agent.sample_inputs), create=True)
            else:
                runtime.start(task)
    finally:
        store.close()


def build_long(path: Path, entries: int) -> None:
    from skillstate.engine.agent import load_agent
    from skillstate.engine.runtime import Runtime
    from skillstate.store.sqlite import SQLiteStore

    agent = load_agent("skillstate.examples.ledger:agent")
    store = SQLiteStore(path)
    try:
        runtime = Runtime(agent, store, lease=False, max_steps=entries * 3 + 10)
        runtime.start("long", ledger=str(path.parent / "ledger.txt"), target=entries)
        runtime.run("long")
    finally:
        store.close()


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm: imports, templates, SQLite page cache
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def server_times(many: str, long: str, repeat: int) -> list[tuple[str, float, float]]:
    from starlette.testclient import TestClient

    from skillstate.store import open_store
    from skillstate.ui import UIConfig, create_app

    rows = []
    for url, page, baseline in (
        (many, "/", "heads"),
        (many, "/api/tasks", "heads"),
        (long, "/tasks/long", "events"),
        (long, "/api/tasks/long", "events"),
        (long, "/steps/500/long", "events"),
    ):
        store = open_store(url, create=False)
        base = (
            (lambda s=store: s.heads())
            if baseline == "heads"
            else (lambda s=store: s.events("long"))
        )
        with TestClient(create_app(UIConfig(store_url=url, hosts=()))) as client:

            def get(path: str = page, c: TestClient = client) -> None:
                response = c.get(path)
                assert response.status_code == 200, (path, response.text[:300])

            page_ms = median_ms(get, repeat)
        base_ms = median_ms(base, repeat)
        store.close()
        rows.append((f"{page} ({'10k tasks' if url == many else 'long task'})", page_ms, base_ms))
    return rows


def browser_times(
    many: str, long: str, root: Path, repeat: int
) -> list[tuple[str, float, float, float]]:
    from playwright.sync_api import sync_playwright
    from tests.ui_support import chromium_path, serve

    env = dict(os.environ)
    rows: list[tuple[str, float, float, float]] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        for url, page_path in ((many, ""), (long, "tasks/long"), (long, "steps/500/long")):
            with serve(root, env, "--store", url) as server:
                page = browser.new_page()
                times = []
                for _ in range(repeat + 1):
                    page.goto(server.url + page_path, wait_until="load")
                    times.append(
                        page.evaluate(
                            "() => { const n = performance.getEntriesByType('navigation')[0];"
                            " return [n.responseEnd - n.startTime,"
                            " n.domContentLoadedEventEnd - n.startTime,"
                            " n.loadEventEnd - n.startTime]; }"
                        )
                    )
                page.close()
            rows.append(
                (f"/{page_path}", *(statistics.median(t[i] for t in times[1:]) for i in range(3)))
            )
        browser.close()
    return rows


def chart_time(long: str) -> float:
    from starlette.testclient import TestClient

    from skillstate.ui import UIConfig, create_app

    with TestClient(create_app(UIConfig(store_url=long, hosts=()))) as client:
        started = time.perf_counter()
        assert client.get("/chart/long").status_code == 200
        return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--browser", action="store_true")
    parser.add_argument("--chart", action="store_true")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="skillstate-ui-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    many_db, long_db = root / f"many-{args.tasks}.db", root / f"long-{args.steps}.db"
    for path, build, size in ((many_db, build_many, args.tasks), (long_db, build_long, args.steps)):
        if not path.exists():
            started = time.perf_counter()
            build(path, size)
            print(f"built {path.name} in {time.perf_counter() - started:.1f} s", flush=True)
    many, long = f"sqlite:///{many_db}", f"sqlite:///{long_db}"
    from skillstate.store import open_store

    store = open_store(long, create=False)
    versions = store.load("long", verify=False).version
    store.close()
    print(f"{args.tasks} tasks; the long task has {versions} versions")
    print(f"{'server (TestClient)':40} {'page ms':>9} {'store read ms':>14} {'ratio':>6}")
    for name, page_ms, base_ms in server_times(many, long, args.repeat):
        print(f"{name:40} {page_ms:9.1f} {base_ms:14.1f} {page_ms / base_ms:6.1f}")
    if args.browser:
        head = f"{'response':>9} {'DOM ready':>9} {'load':>9}"
        print(f"{'browser (Chromium), ms from navigation':40} {head}")
        for name, response, ready, load in browser_times(many, long, root, args.repeat):
            print(f"{name:40} {response:9.1f} {ready:9.1f} {load:9.1f}")
    if args.chart:
        print(f"token chart of the long task, cold: {chart_time(long):.0f} ms")


if __name__ == "__main__":
    main()
