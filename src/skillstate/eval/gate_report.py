"""The comparison of ``eval --compare`` for people: a rich table on the terminal, and
the section written into the new report (``comparison`` in its JSON, ``## Compared
with the baseline`` in its Markdown)."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

from skillstate.errors import UsageError
from skillstate.eval.gate import Comparison, Row, delta_text, number_text

__all__ = ["SECTION", "markdown_section", "print_comparison", "write_comparison"]

SECTION = "## Compared with the baseline"


def markdown_section(comparison: Comparison) -> list[str]:
    """``## Compared with the baseline``: the same table as the terminal's."""
    from skillstate.eval.markdown import _code, _table

    lines = [SECTION, ""]
    lines += [f"- Baseline: {_code(comparison.baseline_path)}"]
    gates = ", ".join(_code(g.text) for g in comparison.gates) or "none"
    lines += [f"- Gates (`--fail-under`): {gates}", ""]
    if comparison.mismatches:
        lines += [
            "> **Not like for like.** The baseline measured something else: "
            + "; ".join(comparison.mismatches)
            + ". Only the variants both reports have are compared (`--allow-mismatch`).",
            "",
        ]
    breaches = comparison.breaches
    lines += [
        f"**{len(breaches)} gate(s) breached.**" if breaches else "No gate breached.",
        "",
    ]
    shown = comparison.moved
    if shown:
        lines += _table(
            ["Variant", "Metric", "Better", "Baseline", "New", "Delta", "Gate", "Status"],
            [_cells(row) for row in shown],
        )
    same = len(comparison.rows) - len(shown)
    lines += [f"{same} other metric(s) did not move.", ""]
    return lines


def _cells(row: Row) -> list[str]:
    arrow = "↑ higher" if row.metric.better == "higher" else "↓ lower"
    status = "**BREACH**" if row.breach else row.status
    return [
        row.variant,
        row.metric.name,
        arrow,
        number_text(row.baseline),
        number_text(row.new),
        delta_text(row),
        row.gate_text or "—",
        status,
    ]


def print_comparison(comparison: Comparison) -> None:
    """The comparison as a rich table on stdout (what moved, and every gated metric)."""
    from rich.markup import escape
    from rich.table import Table

    from skillstate._render import console, errors, print_table

    for line in comparison.mismatches:
        errors.print(
            f"[bold red]WARNING: baseline differs: {escape(line)}[/] (compared anyway)",
            soft_wrap=True,
        )
    table = Table(title=f"compared with {comparison.baseline_path}")
    for name in ("Variant", "Metric", "Better", "Baseline", "New", "Delta", "Gate", "Status"):
        # What a reader greps for (a metric's name, as --fail-under takes it, and
        # BREACH): the other columns wrap on a narrow terminal, never these.
        table.add_column(
            name,
            justify="right" if name in {"Baseline", "New", "Delta"} else "left",
            no_wrap=name in {"Variant", "Metric", "Status"},
        )
    styles = {"breach": "bold red", "worse": "yellow", "better": "green"}
    for row in comparison.moved:
        cells = _cells(row)
        cells[-1] = "BREACH" if row.breach else row.status
        table.add_row(*(escape(cell) for cell in cells), style=styles.get(row.status))
    print_table(table)
    same = len(comparison.rows) - len(comparison.moved)
    breaches = len(comparison.breaches)
    verdict = f"{breaches} gate(s) breached" if breaches else "no gate breached"
    console.print(f"{same} other metric(s) did not move; {verdict}")


def write_comparison(comparison: Comparison, report: str | Path) -> tuple[Path, Path | None]:
    """Write the comparison into the new report: ``comparison`` in its JSON, and the
    section in the ``report.md`` beside it (replacing an earlier one). Atomic writes."""
    from skillstate.eval.cassettes import write_json_atomic

    path = Path(report)
    path = path / "report.json" if path.is_dir() else path
    document = json.loads(path.read_text(encoding="utf-8"))
    document["comparison"] = comparison.as_json()
    try:
        write_json_atomic(path, document, indent=2)
    except OSError as exc:
        raise UsageError(f"cannot write the comparison into {str(path)!r}: {exc}") from None
    markdown = path.with_name("report.md")
    if not markdown.is_file():
        return path, None
    text = markdown.read_text(encoding="utf-8")
    start = text.find("\n" + SECTION + "\n")
    if start >= 0:
        end = text.find("\n## ", start + len(SECTION) + 2)
        text = text[: start + 1] + (text[end + 1 :] if end >= 0 else "")
    text = text.rstrip("\n") + "\n\n" + "\n".join(markdown_section(comparison)).rstrip() + "\n"
    try:
        _write_text_atomic(markdown, text)
    except OSError as exc:
        raise UsageError(f"cannot write the comparison into {str(markdown)!r}: {exc}") from None
    return path, markdown


def _write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` through a temporary file, keeping its mode."""
    mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
