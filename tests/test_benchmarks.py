"""The store benchmark runs end to end (a smoke run: no timing is asserted here).

Timing targets are never unit-tested in this project: the benchmark prints them as
PASS/FAIL and ``docs/benchmarks.md`` records a full run. This only checks that
``benchmarks/store_overhead.py --quick`` works on the backends that need no server
and prints every table.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "store_overhead.py"
_RICH_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM", "COLUMNS")
HAS_LANGGRAPH = (
    all(importlib.util.find_spec(name) is not None for name in ("langgraph", "ormsgpack"))
    and importlib.util.find_spec("langgraph.checkpoint.sqlite") is not None
)


def run_benchmark(
    *args: str, script: Path = SCRIPT, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run a benchmark script as a user would, without rich's terminal settings."""
    env = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    env["PYTHONIOENCODING"] = "utf-8"
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], str]:
    markdown = tmp_path_factory.mktemp("bench") / "store_overhead.md"
    result = run_benchmark("--quick", "--backends", "sqlite,memory", "--markdown", str(markdown))
    return result, markdown.read_text(encoding="utf-8") if markdown.exists() else ""


def test_quick_run_exits_cleanly(quick: tuple[subprocess.CompletedProcess[str], str]) -> None:
    result, _ = quick
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_quick_run_prints_every_table(quick: tuple[subprocess.CompletedProcess[str], str]) -> None:
    result, markdown = quick
    headings = [
        "Commit latency, bytes stored, load head: explicit workload",
        "Commit latency, bytes stored, load head: history workload",
        "Concurrency: 8 writer processes",
        "Targets",
        "Definitions",
    ]
    if HAS_LANGGRAPH:
        headings += ["Ours / LangGraph (same run)", "Real LangGraph StateGraph"]
    for heading in headings:
        assert heading in result.stdout, heading
        if heading != "Definitions":
            assert f"### {heading}" in markdown, heading
    for system in ("sqlite", "memory"):
        assert f"│ {system} " in result.stdout
    assert "FAILED" not in result.stdout
    assert markdown.startswith("## Store overhead")


def test_unknown_backend_is_a_usage_error() -> None:
    result = run_benchmark("--quick", "--backends", "sqlite,nope")
    assert result.returncode == 2
    assert "unknown backend(s) nope" in result.stderr


DRIVERS = ROOT / "benchmarks" / "store_drivers.py"


def test_store_drivers_quick_run(tmp_path: Path) -> None:
    """The driver benchmark's smoke run: both tables, or each backend skipped with a reason."""
    markdown = tmp_path / "drivers.md"
    args = ["--quick", "--writers", "1", "--seconds", "0.1", "--markdown", str(markdown)]
    result = run_benchmark(*args, script=DRIVERS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith("## Store drivers")
    assert "### Targets" in text
    for backend in ("redis", "postgres"):
        assert f"| {backend} | 1 |" in text or f"| {backend} | skipped |" in text
    # Issue 30: a target line per backend x writers, for commits and for whole steps.
    assert text.count("store.commit ≥ 0.9x bare |") == 4
    assert text.count("whole step ≥ 0.9x bare (stricter reading) |") == 4
    assert "Whole step / bare CAS write of the same head" in text
    assert "Load average (1/5/15 min):" in text
    assert "load average (1/5/15 min)" in result.stdout


RUNTIME_STEP = ROOT / "benchmarks" / "runtime_step.py"


def test_runtime_step_quick_run(tmp_path: Path) -> None:
    """The runtime-step benchmark's smoke run on the backends that need no server."""
    markdown = tmp_path / "runtime_step.md"
    args = ["--quick", "--backends", "memory,sqlite", "--markdown", str(markdown)]
    result = run_benchmark(*args, script=RUNTIME_STEP, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = markdown.read_text(encoding="utf-8")
    for needle in ("skillstate", "memory", "sqlite"):
        assert needle in text, needle
    assert "PASS" in text or "FAIL" in text  # the target lines were computed


STEP_FLOOR = ROOT / "benchmarks" / "step_floor.py"


def test_step_floor_quick_run(tmp_path: Path) -> None:
    """The step-against-the-floor benchmark's smoke run: every subject, every target line
    (Burr's rows need the bench extra; without it they say so)."""
    markdown = tmp_path / "step_floor.md"
    args = ["--quick", "--profile", "--markdown", str(markdown)]
    result = run_benchmark(*args, script=STEP_FLOOR, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = markdown.read_text(encoding="utf-8")
    for needle in (
        "skillstate sqlite",
        "skillstate memory",
        "bare SQLite head write",
        "Load average",
        "at depth 200 ≤ 1.1x at depth 50",
        "share of a step",
    ):
        assert needle in text, needle
    assert text.count("PASS:") + text.count("FAIL:") + text.count("SKIP:") == 7
    if importlib.util.find_spec("burr") is not None:
        assert "burr + SQLLitePersister (WAL, NORMAL)" in text
        assert "SKIP:" not in text


def test_step_floor_bad_depths_is_a_usage_error() -> None:
    result = run_benchmark("--depths", "ten", script=STEP_FLOOR)
    assert result.returncode == 2
    assert "--depths takes whole numbers" in result.stderr
    assert "Traceback" not in result.stderr


WORKERS = ROOT / "benchmarks" / "workers.py"


def test_workers_quick_run(tmp_path: Path) -> None:
    """The workers benchmark's smoke run (Postgres + RabbitMQ; skipped, or failed in CI,
    when either is down)."""
    pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")
    from tests.contract.backends import require_service

    for name, port in (("PostgreSQL", 5432), ("RabbitMQ", 5672)):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError as exc:
            require_service(name, False, f"127.0.0.1:{port}: {exc}")
    markdown = tmp_path / "workers.md"
    result = run_benchmark("--quick", "--markdown", str(markdown), script=WORKERS, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = markdown.read_text(encoding="utf-8")
    assert "| 1 worker process |" in text
    assert "engine per step" in text


def test_async_concurrency_quick_run(tmp_path: Path) -> None:
    """The async benchmark's smoke run: every task completes and the table is written
    (its ratio is a measurement printed by the full run, not asserted here)."""
    markdown = tmp_path / "async.md"
    script = ROOT / "benchmarks" / "async_concurrency.py"
    result = run_benchmark("--quick", "--markdown", str(markdown), script=script)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = markdown.read_text(encoding="utf-8")
    assert "| sqlite: 20 tasks at once, one loop |" in text
    assert "concurrency ratio" in result.stdout


LANGGRAPH_SAVER = ROOT / "benchmarks" / "langgraph_saver.py"


@pytest.mark.skipif(not HAS_LANGGRAPH, reason="pip install -e '.[bench]'")
def test_langgraph_saver_quick_run(tmp_path: Path) -> None:
    """The saver benchmark's smoke run on SQLite: both tables, both savers, every ratio."""
    markdown = tmp_path / "langgraph_saver.md"
    args = ["--quick", "--backends", "sqlite", "--markdown", str(markdown)]
    result = run_benchmark(*args, script=LANGGRAPH_SAVER)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith("## LangGraph savers")
    for needle in ("### LangGraph savers, same workloads", "### skillstate / LangGraph"):
        assert needle in text, needle
    for workload in ("explicit", "history"):
        assert f"| sqlite | {workload} | 20 | skillstate |" in text
        assert f"| sqlite | {workload} | 20 | SqliteSaver |" in text
    assert text.count("x |") >= 8  # ratios were computed, not left as "-"
    assert "### Issue 30 targets" in text
    for target in ("| put |", "| old read (", "| bytes |"):
        assert text.count(target) == 2, target  # one line per workload
    assert text.count("| PASS |") + text.count("| FAIL |") == 6
    assert "load average" in text
    assert "load average" in result.stdout


WORKERS_CHAOS = ROOT / "benchmarks" / "workers_chaos.py"


def test_workers_chaos_quick_run(tmp_path: Path) -> None:
    """The chaos benchmark's smoke run: one broker, one slice, with kills (Postgres +
    RabbitMQ; skipped, or failed in CI, when either is down). Exit 0 means every task
    completed once, nothing stranded."""
    pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")
    from tests.contract.backends import require_service

    for name, port in (("PostgreSQL", 5432), ("RabbitMQ", 5672)):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError as exc:
            require_service(name, False, f"127.0.0.1:{port}: {exc}")
    markdown = tmp_path / "chaos.md"
    result = run_benchmark(
        "--quick", "--brokers", "rabbitmq", "--slices", "5", "--kills", "yes",
        "--markdown", str(markdown), script=WORKERS_CHAOS, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "rabbitmq slice 5 kill -9" in result.stdout
    assert "completed 12/12, duplicated 0, stranded 0" in markdown.read_text(encoding="utf-8")
    assert "PASS" in result.stdout
