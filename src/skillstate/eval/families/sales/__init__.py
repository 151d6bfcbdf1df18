"""The ``sales`` family: which sales channel fell most, month over month?

The task (the seed articles' running example): ``sales.csv`` holds two months of
orders (``order_id, date, channel, revenue`` plus noise columns). Clean it, total
the revenue by channel and month, compute each channel's month-over-month change,
find the channel that fell most (by percentage), draw a bar chart ``chart.png``
and write ``report.md`` naming that channel with its change and a table of the
channel totals. Several steps depend on earlier results, and the data is built
so that every shortcut changes the answer:

* **Duplicates**: exact duplicate rows pile up in the first month of one channel
  (``params.duplicated``). Not removing them makes *that* channel fall most.
* **Blank channels**: orders with an empty channel are many in the first month
  and few in the second. Filling them in (with ``0``, ``unknown``...) or grouping
  them as a channel of their own makes that pseudo-channel fall most (about -85%).
* **Null revenues and near-identical columns**: the falling channel's second
  month holds orders whose ``revenue`` is null while ``revenue_usd_est`` and
  ``net_revenue`` are filled in. Filling a null revenue from either column, or
  using either column instead of ``revenue``, hides its drop, and another channel
  (``params.runner_up``) falls most; ``net_revenue`` also carries a large
  discount on the runner-up's second month. Filling null revenues with ``0``
  leaves the totals alone (a sum ignores zeros) but keeps rows that must go:
  the cleaned data then has the wrong row count.
* **A constraint stated only at the start** ("revenue is the ``revenue`` column;
  null revenues are dropped, never filled; blank channels are dropped;
  duplicates count once"), and noisy tool output (long notes, coupon and promo
  columns that are mostly empty).

Raw tools: ``csv_info`` (header, row count, first rows: long and noisy),
``run_sql`` (one read-only SQLite query; every CSV file in the folder is a table),
``export_csv`` (a query's rows saved as a new CSV file, e.g. ``cleaned.csv``),
``plot_channels`` and ``write_report`` (effects). Skills, one applicable at a time:
``clean_data`` -> ``aggregate`` -> ``find_biggest_drop`` -> ``write_report``, each
verified against the files (a recount from the raw CSV in Python, not the SQL that
wrote them); the two that write files remove them when they fail.

Every trap is checked when the data is drawn: a draw where one of them would not
change the answer is redrawn (deterministically), so the environment, the
oracle's plans and the checks are reproducible from ``spec.params`` alone
(``seed``, ``months``, ``channels``, ``falls_most``, ``runner_up``, ``duplicated``).

The final checks read the files only: ``report.md`` names the right channel and
its change (within 0.1 points) and tabulates both months' totals of every real
channel; ``chart.png`` is a real PNG with one bar per channel whose heights match
the changes; ``cleaned.csv``, when written, holds exactly the clean rows.
Drawing and reading the chart needs matplotlib (``pip install 'skillstate[eval]'``),
imported only when a chart is drawn or read.

Modules, one thing each: ``files`` (file names, CSV reading and writing), ``data``
(the deterministic draw of ``sales.csv``), ``analysis`` (the independent recount),
``chart`` and ``report`` (drawing and reading back ``chart.png`` and ``report.md``),
``tools`` (the raw tools), ``checks`` (the re-checks verify and the final checks
share), ``skills`` (state, skills, machine) and ``plans`` (the oracle's plans).
"""

from __future__ import annotations

from pathlib import Path

from skillstate.eval.families.sales.analysis import Analysis, analyse, totals_of, trap_answers
from skillstate.eval.families.sales.chart import BAR_COLOR, chart_bars
from skillstate.eval.families.sales.checks import SalesChecks
from skillstate.eval.families.sales.data import make_rows, write_files
from skillstate.eval.families.sales.files import CHART, CLEANED, REPORT, SALES
from skillstate.eval.families.sales.plans import skills_plan, tools_plan
from skillstate.eval.families.sales.report import render_report
from skillstate.eval.families.sales.skills import CLEAN_QUERY, MACHINE, SalesState, skill_library
from skillstate.eval.families.sales.tools import SalesTools
from skillstate.eval.tasks import Environment, TaskSpec

__all__ = [
    "BAR_COLOR",
    "CHART",
    "CLEANED",
    "CLEAN_QUERY",
    "MACHINE",
    "REPORT",
    "SALES",
    "Analysis",
    "SalesFamily",
    "SalesState",
    "analyse",
    "chart_bars",
    "make_rows",
    "render_report",
    "totals_of",
    "trap_answers",
]


class SalesFamily:
    """Builds a sales task: files, tools, skills, machine, plans and checks."""

    name = "sales"

    def build(self, spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
        rows = make_rows(dict(spec.params))
        checks = SalesChecks(root, rows)
        if fresh:
            write_files(root, rows)
        plan, facts = skills_plan(checks.truth, checks.clean_count)
        return Environment(
            root=root,
            state_type=SalesState,
            machine=MACHINE,
            tools=SalesTools(root).as_dict(),
            skills=skill_library(checks),
            plan_skills=plan,
            plan_tools=tools_plan(checks.truth, checks.clean_count),
            check=checks.check,
            expected_facts=facts,
            effect_tools=frozenset({"export_csv", "plot_channels", "write_report"}),
        )
