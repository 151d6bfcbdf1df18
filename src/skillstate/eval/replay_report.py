"""``eval --replay RUN_DIR``: replay every recorded run under a directory, and report.

``RUN_DIR`` is an ``eval --out`` directory (its ``runs/*/run/`` are replayed), or one
recorded run's directory. The results go to ``replay.json`` and ``replay.md`` in the
output directory (by default ``RUN_DIR/replay``), with each replay's own store under
``runs/`` there, and a table on the terminal. Any run that differs from its
recording raises :class:`~skillstate.errors.RegressionDetected` (exit 9) after
the files are written.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from skillstate.errors import RegressionDetected, UsageError
from skillstate.eval.cassettes import MANIFEST, write_json_atomic
from skillstate.eval.replay import ReplayResult, replay_run

__all__ = ["find_recordings", "replay_all", "write_replay_report"]

_SHORT = 110
"""Characters of a divergence's detail shown in the terminal's table."""


def find_recordings(target: Path) -> list[Path]:
    """The recorded run directories under ``target`` (itself, if it is one)."""
    if not target.is_dir():
        raise UsageError(f"--replay {str(target)!r} is not a directory")
    if (target / MANIFEST).is_file():
        return [target]
    found = sorted(path.parent for path in target.glob(f"runs/*/run/{MANIFEST}"))
    found = found or sorted(path.parent for path in target.glob(f"*/run/{MANIFEST}"))
    if not found:
        raise UsageError(
            f"no recorded runs under {str(target)!r} (an eval run records each task's "
            "run unless --no-record; give its --out directory)"
        )
    return found


def default_out(target: Path) -> Path:
    """Where a replay writes unless told: ``replay/`` in the eval directory."""
    if (target / MANIFEST).is_file():
        # runs/<name>/run -> the eval directory two levels above runs/
        parents = target.parents
        return (parents[2] if len(parents) > 2 and parents[1].name == "runs" else target) / "replay"
    return target / "replay"


def replay_all(target: Path, out: Path) -> list[ReplayResult]:
    """Replay each recording under ``target`` into ``out/runs``; write the report; raise
    :class:`RegressionDetected` when any run differs."""
    from skillstate.eval.cli import _progress

    recordings = find_recordings(target)
    started = datetime.now(timezone.utc)
    results: list[ReplayResult] = []
    with _progress() as progress:
        bar = progress.add_task("replay", total=len(recordings))
        for recorded in recordings:
            name = recorded.parent.name if recorded.name == "run" else recorded.name
            progress.update(bar, description=f"replay {name}")
            results.append(replay_run(recorded, out / "runs" / name))
            progress.advance(bar)
    write_replay_report(results, out, source=target, started_at=started)
    print_replay(results, out)
    differ = [r for r in results if not r.same]
    if differ:
        first = differ[0]
        assert first.divergence is not None
        where = first.divergence
        raise RegressionDetected(
            f"replay: {len(differ)} of {len(results)} run(s) differ from their recording; "
            f"first: {first.run} at step {where.step} ({where.label}"
            + (f", decision {where.decision}" if where.decision else "")
            + f"): {', '.join(where.aspects)} (see {out / 'replay.md'})",
            [r.run for r in differ],
        )
    return results


def write_replay_report(
    results: Sequence[ReplayResult], out: Path, *, source: Path, started_at: datetime
) -> tuple[Path, Path]:
    """``replay.json`` (every result) and ``replay.md`` (a table) in ``out``."""
    from skillstate.state.redact import RedactionPolicy

    redactor = RedactionPolicy().redactor()
    document: dict[str, Any] = {
        "source": str(source),
        "started_at": started_at.isoformat(),
        "runs": len(results),
        "same": sum(1 for r in results if r.same),
        "results": [r.as_json() for r in results],
    }
    json_path = out / "replay.json"
    write_json_atomic(json_path, redactor.json(document), indent=2, mode=0o644)
    md_path = out / "replay.md"
    md_path.write_text(redactor.text(_markdown(results, source)), encoding="utf-8")
    return json_path, md_path


def _markdown(results: Sequence[ReplayResult], source: Path) -> str:
    from skillstate.eval.markdown import _code, _table

    same = sum(1 for r in results if r.same)
    lines = [
        "# skillstate replay",
        "",
        f"- Recording: {_code(str(source))}",
        f"- Runs: {len(results)}; same as recorded: {same}; differ: {len(results) - same}",
        "",
        "Each run was replayed with its recorded model replies and tool outputs against "
        "the current skills; the first step whose outcome differs is named.",
        "",
    ]
    lines += _table(
        ["Run", "Model", "Steps (rec/replay)", "Verdict", "First differing step", "What", "Detail"],
        [_cells(r) for r in results],
    )
    notes = [(r.run, note) for r in results for note in r.notes]
    if notes:
        lines += ["## Notes", ""]
        lines += [f"- {run}: {note}" for run, note in notes]
        lines += [""]
    return "\n".join(lines)


def _cells(result: ReplayResult) -> list[str]:
    steps = f"{result.steps_recorded}/{result.steps_replayed}"
    where = result.divergence
    if where is None:
        return [result.run, result.model, steps, "same", "—", "—", "—"]
    step = f"step {where.step}" + (f", decision {where.decision}" if where.decision else "")
    detail = f"recorded: {where.recorded} | replay: {where.replayed}"
    return [
        result.run,
        result.model,
        steps,
        "differs",
        f"{step} ({where.label})",
        ", ".join(where.aspects),
        detail,
    ]


def print_replay(results: Sequence[ReplayResult], out: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    from skillstate._render import console, print_table

    table = Table(title="replay against the current skills")
    for name in ("Run", "Steps", "Verdict", "First differing step", "What", "Replay (first)"):
        table.add_column(name, overflow="fold")
    for result in results:
        run, _, steps, verdict, step, what, _ = _cells(result)
        # The terminal gets the replay's side of the first aspect; the files get it all.
        first = result.divergence.replayed.split("; ")[0] if result.divergence else "—"
        short = first if len(first) <= _SHORT else first[: _SHORT - 1] + "…"
        style = None if result.same else "bold red"
        table.add_row(*(escape(c) for c in (run, steps, verdict, step, what, short)), style=style)
    print_table(table)
    same = sum(1 for r in results if r.same)
    console.print(f"{same}/{len(results)} run(s) same as recorded; report: {out / 'replay.md'}")
