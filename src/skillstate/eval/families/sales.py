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
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.errors import MissingExtra, UsageError
from skillstate.eval.tasks import CheckResult, Environment, TaskSpec
from skillstate.events import Verdict
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState

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

SALES = "sales.csv"
CLEANED = "cleaned.csv"
REPORT = "report.md"
CHART = "chart.png"

COLUMNS = (
    "order_id",
    "date",
    "channel",
    "region",
    "customer_segment",
    "sku",
    "revenue",
    "revenue_usd_est",
    "net_revenue",
    "currency",
    "coupon_code",
    "promo_id",
    "notes",
)
CLEAN_QUERY = (
    "SELECT DISTINCT order_id, date, channel, revenue FROM sales "
    "WHERE revenue IS NOT NULL AND channel IS NOT NULL AND TRIM(channel) <> '' "
    "ORDER BY order_id"
)
"""What the oracle cleans with: null revenues and blank channels dropped, duplicates once."""
AGGREGATE_QUERY = (
    "SELECT channel, substr(date, 1, 7) AS month, ROUND(SUM(revenue), 2) AS revenue "
    "FROM cleaned GROUP BY channel, month ORDER BY channel, month"
)

BAR_COLOR = "#4c72b0"
"""The one colour ``plot_channels`` fills bars with: how the chart is read back."""
_BAR_RGB = (0x4C / 255, 0x72 / 255, 0xB0 / 255)
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_MIN_SIZE = (200, 150)
"""Width and height (px) below which a PNG is not a chart."""
_SQL_ROWS = 30
"""Rows a query shows (the rest is counted, not shown)."""
_TOTAL_TOLERANCE = 1.0
"""How far (currency units) a tabulated total may be from the true one: whole-unit rounding."""
_PCT_TOLERANCE = 0.1
_BLANK_NAMES = frozenset(
    {"", "blank", "empty", "missing", "unknown", "other", "none", "null", "nan", "n/a", "0"}
)
"""What a blank channel gets called once it is (wrongly) kept as a channel."""
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MONTH = re.compile(r"\d{4}-\d{2}")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
_NOTES = """customer asked invoice copy promo applied late delivery refund pending revenue
restated partial return gift wrap bulk order manual entry price override sales rep follow
up duplicate suspected courier damaged reship approved finance review"""
_WORDS = tuple(_NOTES.split())
_SEGMENTS = ("smb", "enterprise", "consumer", "public")

Totals = dict[str, dict[str, int]]
"""Channel -> month (``YYYY-MM``) -> revenue in cents."""


# ---------------------------------------------------------------- data


@dataclass
class _Order:
    channel: str
    month: str
    cents: int | None
    """The booked revenue; ``None`` for a null revenue."""
    underlying: int
    """What the order was worth (the estimate columns are derived from it)."""


def _cents(text: str) -> int:
    return round(float(text) * 100)


def _money(cents: int) -> str:
    return f"{cents / 100:.2f}"


def make_rows(params: Mapping[str, Any]) -> list[dict[str, str]]:
    """The rows of ``sales.csv``: deterministic from ``params``, every trap live.

    A draw where one of the traps would not change the answer is redrawn with the
    next attempt number, so the result depends on ``params`` only.
    """
    _check_params(params)
    for attempt in range(50):
        rows = _draw(params, attempt)
        if not _trap_failures(params, rows):
            return rows
    raise UsageError(f"sales params {dict(params)} give no data where every trap holds")


def _check_params(params: Mapping[str, Any]) -> None:
    channels = list(params.get("channels", ()))
    months = list(params.get("months", ()))
    roles = [params.get(k) for k in ("falls_most", "runner_up", "duplicated")]
    problems: list[str] = []
    if not 4 <= len(set(channels)) == len(channels) <= 6:
        problems.append("channels must be 4 to 6 distinct names")
    if any(not _TABLE_NAME.fullmatch(str(c)) for c in channels):
        problems.append("channel names must be identifiers (letters, digits, _)")
    if len(months) != 2 or months != sorted(months) or len(set(months)) != 2:
        problems.append("months must be two months in order")
    if any(not _MONTH.fullmatch(str(m)) for m in months):
        problems.append("months are YYYY-MM")
    if len(set(roles)) != 3 or any(r not in channels for r in roles):
        problems.append("falls_most, runner_up and duplicated must be three different channels")
    if problems:
        raise UsageError("invalid sales params: " + "; ".join(problems))


def _draw(params: Mapping[str, Any], attempt: int) -> list[dict[str, str]]:
    rng = random.Random(f"{params['seed']}:{attempt}")
    channels: list[str] = list(params["channels"])
    first, second = params["months"]
    target, runner, duplicated = params["falls_most"], params["runner_up"], params["duplicated"]
    # Clean changes by role: the target falls most, clear of the runner-up; the decoy
    # only a little (its duplicates do the rest); the others move a few % either way.
    bands = {target: (-0.32, -0.24), runner: (-0.19, -0.14), duplicated: (-0.10, -0.05)}
    drops = {
        c: rng.uniform(*bands.get(c, rng.choice(((-0.05, -0.02), (0.03, 0.12))))) for c in channels
    }
    orders: list[_Order] = []
    booked: Totals = {}
    for channel in channels:
        base = rng.uniform(9_000, 16_000)
        for month, total in ((first, base), (second, base * (1 + drops[channel]))):
            batch = _batch(rng, channel, month, total, rng.randint(26, 38))
            orders += batch
            booked.setdefault(channel, {})[month] = sum(o.underlying for o in batch)

    # The falling channel's hidden orders: null revenue, estimates filled in. Filled
    # from revenue_usd_est (~1.08x) they lift its second month above the runner-up's.
    t1, t2 = booked[target][first], booked[target][second]
    r1, r2 = booked[runner][first], booked[runner][second]
    needed = (t1 * (r2 / r1 + 0.04) - t2) / 100
    orders += _batch(rng, target, second, needed / 1.08 * 1.1, rng.randint(5, 8), null=True)
    others = [c for c in channels if c not in (target, runner)]
    for _ in range(4):  # a few more nulls where filling them changes nothing that matters
        month = rng.choice((first, second))
        orders += _batch(rng, rng.choice(others), month, rng.uniform(200, 500), 1, null=True)
    # Blank channels: many in the first month, few in the second.
    orders += _batch(rng, "", first, rng.uniform(3_500, 5_000), rng.randint(8, 11))
    orders += _batch(rng, "", second, rng.uniform(400, 800), rng.randint(1, 2))

    rows = _rows(rng, orders, params)
    return _with_duplicates(rng, rows, params, booked)


def _batch(
    rng: random.Random, channel: str, month: str, total: float, n: int, *, null: bool = False
) -> list[_Order]:
    weights = [rng.uniform(0.3, 1.7) for _ in range(n)]
    scale = total * 100 / sum(weights)
    return [
        _Order(channel, month, None if null else cents, cents)
        for cents in (max(100, round(w * scale)) for w in weights)
    ]


def _rows(
    rng: random.Random, orders: list[_Order], params: Mapping[str, Any]
) -> list[dict[str, str]]:
    runner, second = params["runner_up"], params["months"][1]
    discount = {
        (c, m): rng.uniform(0.22, 0.28) if (c, m) == (runner, second) else rng.uniform(0.02, 0.06)
        for c in [*params["channels"], ""]
        for m in params["months"]
    }
    dated = sorted(
        ((f"{o.month}-{rng.randint(1, 28):02d}", rng.random(), o) for o in orders),
        key=lambda item: (item[0], item[1]),
    )
    rows: list[dict[str, str]] = []
    for i, (date, _, order) in enumerate(dated):
        net = round(order.underlying * (1 - discount[order.channel, order.month]))
        rows.append(
            {
                "order_id": f"SO-{10_001 + i}",
                "date": date,
                "channel": order.channel,
                "region": rng.choice(("north", "south", "east", "west", "central")),
                "customer_segment": "" if rng.random() < 0.1 else rng.choice(_SEGMENTS),
                "sku": f"SKU-{rng.randrange(1000, 9999)}",
                "revenue": "" if order.cents is None else _money(order.cents),
                "revenue_usd_est": _money(round(order.underlying * 1.08 * rng.uniform(0.97, 1.03))),
                "net_revenue": _money(net),
                "currency": "EUR",
                "coupon_code": f"SPRING{rng.randint(5, 30)}" if rng.random() < 0.15 else "",
                "promo_id": f"P-{rng.randrange(100, 999)}" if rng.random() < 0.1 else "",
                "notes": _note(rng) if rng.random() < 0.35 else "",
            }
        )
    return rows


def _note(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 14)))


def _with_duplicates(
    rng: random.Random, rows: list[dict[str, str]], params: Mapping[str, Any], booked: Totals
) -> list[dict[str, str]]:
    """Exact copies: enough of the decoy's first month that it "falls most" undeduplicated,
    and a few in other channels' second months (they only soften those changes)."""
    first, second = params["months"]
    decoy, target = params["duplicated"], params["falls_most"]
    d1, d2 = booked[decoy][first], booked[decoy][second]
    t_drop = booked[target][second] / booked[target][first] - 1
    needed = d1 * (d2 / d1 / (1 + t_drop - 0.05) - 1)
    pool = [
        r for r in rows if r["channel"] == decoy and r["date"].startswith(first) and r["revenue"]
    ]
    rng.shuffle(pool)
    copies: list[dict[str, str]] = []
    added = 0
    for row in pool:
        if added >= needed:
            break
        copies.append(dict(row))
        added += _cents(row["revenue"])
    for channel in rng.sample([c for c in params["channels"] if c != decoy], 3):
        candidates = [
            r
            for r in rows
            if r["channel"] == channel and r["date"].startswith(second) and r["revenue"]
        ]
        copies.append(dict(rng.choice(candidates)))
    out = list(rows)
    for copy in copies:
        out.insert(rng.randint(0, len(out)), copy)
    return out


def totals_of(
    rows: Iterable[Mapping[str, str]],
    *,
    column: str = "revenue",
    dedupe: bool = True,
    drop_blank: bool = True,
    fill_from: str | None = None,
) -> Totals:
    """Revenue in cents by channel and month, under one reading of the data.

    The right reading is the default; the others are the traps (``dedupe=False``,
    ``drop_blank=False``, ``fill_from="revenue_usd_est"``, ``column="net_revenue"``).
    A month comes from a ``month`` column if there is one, else from ``date``.
    """
    seen: set[tuple[tuple[str, str], ...]] = set()
    totals: Totals = {}
    for row in rows:
        key = tuple(sorted(row.items()))
        if dedupe and key in seen:
            continue
        seen.add(key)
        channel = (row.get("channel") or "").strip()
        value = (row.get(column) or "").strip()
        if not value and fill_from:
            value = (row.get(fill_from) or "").strip()
        if (drop_blank and not channel) or not value:
            continue
        month = row.get("month") or (row.get("date") or "")[:7]
        per = totals.setdefault(channel, {})
        per[month] = per.get(month, 0) + _cents(value)
    return totals


@dataclass(frozen=True)
class Analysis:
    """Totals, month-over-month changes and the channel that fell most."""

    months: tuple[str, str]
    totals: Totals
    mom: dict[str, float]
    """Channel -> change from the first month to the second, in %, 2 decimals."""
    biggest: str
    pct: float

    def total(self, channel: str, month: str) -> float:
        return self.totals[channel].get(month, 0) / 100


def analyse(totals: Totals) -> Analysis:
    """The changes of ``totals`` (two months); a ``ValueError`` when it cannot be analysed."""
    months = sorted({m for per in totals.values() for m in per})
    if len(months) != 2:
        raise ValueError(f"expected two months of data, found {months or 'none'}")
    first, second = months
    mom = {
        channel: round((per.get(second, 0) - per[first]) / per[first] * 100, 2)
        for channel, per in sorted(totals.items())
        if per.get(first)
    }
    if not mom:
        raise ValueError("no channel has revenue in the first month")
    biggest = min(mom, key=lambda c: (mom[c], c))
    return Analysis((first, second), totals, mom, biggest, mom[biggest])


_TRAPS = {
    "no_dedupe": "the answer without removing duplicate rows",
    "blank_channel": "the answer with blank channels kept as a channel",
    "filled": "the answer with null revenues filled from revenue_usd_est",
    "net_revenue": "the answer on net_revenue instead of revenue",
    "usd_est": "the answer on revenue_usd_est instead of revenue",
}


def trap_answers(rows: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The channel that "falls most" under each wrong reading of the data (``""``: blank)."""
    readings = {
        "no_dedupe": totals_of(rows, dedupe=False),
        "blank_channel": totals_of(rows, drop_blank=False),
        "filled": totals_of(rows, fill_from="revenue_usd_est"),
        "net_revenue": totals_of(rows, column="net_revenue"),
        "usd_est": totals_of(rows, column="revenue_usd_est"),
    }
    return {name: analyse(totals).biggest for name, totals in readings.items()}


def _trap_failures(params: Mapping[str, Any], rows: Sequence[Mapping[str, str]]) -> list[str]:
    right = analyse(totals_of(rows))
    target = params["falls_most"]
    failures: list[str] = []
    if right.biggest != target:
        failures.append(f"{right.biggest} falls most, not {target}")
    others = sorted(v for c, v in right.mom.items() if c != target)
    if others and others[0] - right.pct < 3.0:
        failures.append("the biggest drop is not clear (3 points) of the next one")
    if any(abs(v) < 1.5 for v in right.mom.values()):
        failures.append("a change is too close to 0 for a visible bar")
    answers = trap_answers(rows)
    wanted = {
        "no_dedupe": params["duplicated"],
        "blank_channel": "",
        "filled": params["runner_up"],
    }
    failures += [f"{k}: {answers[k]!r}" for k, want in wanted.items() if answers[k] != want]
    failures += [
        f"{k} gives the right answer" for k in ("net_revenue", "usd_est") if answers[k] == target
    ]
    return failures


# ---------------------------------------------------------------- files


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and rows of a CSV file (short rows padded with empty cells)."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        padded = ([*row, *[""] * len(header)] for row in reader if row)
        rows = [dict(zip(header, row, strict=False)) for row in padded]
    return header, rows


def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow(["" if v is None else v for v in row])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _load_tables(root: Path) -> sqlite3.Connection:
    """An in-memory database with one table per CSV file in ``root`` (its stem).

    Empty cells are NULL; a column whose values all parse as numbers is REAL. Built
    for each query, so the files are the only truth.
    """
    conn = sqlite3.connect(":memory:")
    for path in sorted(root.glob("*.csv")):
        if not _TABLE_NAME.fullmatch(path.stem):
            continue
        header, rows = _read_csv(path)
        if not header:
            continue
        numeric = {
            col: all(_is_number(r[col]) for r in rows if r[col] != "") and any(r[col] for r in rows)
            for col in header
        }
        columns = ", ".join(f'"{c}" {"REAL" if numeric[c] else "TEXT"}' for c in header)
        conn.execute(f'CREATE TABLE "{path.stem}" ({columns})')
        values = [
            [None if r[c] == "" else float(r[c]) if numeric[c] else r[c] for c in header]
            for r in rows
        ]
        marks = ", ".join("?" for _ in header)
        conn.executemany(f'INSERT INTO "{path.stem}" VALUES ({marks})', values)
    return conn


_READ_ONLY = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_RECURSIVE,
        sqlite3.SQLITE_PRAGMA,
    }
)


def _read_only(
    action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
) -> int:
    # Queries only read: no ATTACH or VACUUM INTO writing files beside the task's own.
    return sqlite3.SQLITE_OK if action in _READ_ONLY else sqlite3.SQLITE_DENY


def _query(root: Path, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with closing(_load_tables(root)) as conn:
        conn.set_authorizer(_read_only)
        try:
            cursor = conn.execute(query)
            rows = cursor.fetchall()
        except (sqlite3.Error, sqlite3.Warning) as exc:
            raise ValueError(f"SQL error: {exc}") from None
        columns = [d[0] for d in cursor.description or ()]
    return columns, rows


def chart_bars(path: Path) -> tuple[list[int], str]:
    """The heights (px) of the bars in a chart ``plot_channels`` drew, left to right;
    or, when the file is no such chart, why (``""`` when it is).

    Bars are found by their fill colour, column by column, in the decoded pixels:
    the PNG's own content is read, not what whoever drew it said about it.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], f"{path.name} is missing"
    if not data.startswith(_PNG_MAGIC):
        return [], f"{path.name} is not a PNG (bad magic bytes)"
    try:
        from matplotlib import image
    except ImportError:
        return [], f"reading {path.name} needs matplotlib: pip install 'skillstate[eval]'"
    try:
        pixels = image.imread(io.BytesIO(data), format="png")
    except Exception as exc:
        return [], f"{path.name} does not decode as a PNG ({type(exc).__name__})"
    if pixels.ndim != 3 or pixels.shape[2] < 3:
        return [], f"{path.name} has no colour channels"
    height, width = pixels.shape[:2]
    if width < _MIN_SIZE[0] or height < _MIN_SIZE[1]:
        return [], f"{path.name} is {width}x{height} px: too small for a chart"
    import numpy as np  # matplotlib's own dependency

    rgb = pixels[..., :3].astype(float) / (255.0 if pixels.dtype.kind in "ui" else 1.0)
    # A pixel is a bar's when it has the bar colour (antialiasing is off for bars).
    mask = np.asarray(np.all(np.abs(rgb - np.array(_BAR_RGB)) <= 0.02, axis=2), dtype=bool)
    columns = [bool(v) for v in np.any(mask, axis=0)]
    heights: list[int] = []
    start: int | None = None
    for x, filled in enumerate([*columns, False]):
        if filled and start is None:
            start = x
        elif not filled and start is not None:
            if x - start >= 3:  # thinner than that is no bar
                heights.append(int(mask[:, (start + x) // 2].sum()))
            start = None
    return heights, ""


def _chart_problems(path: Path, expected: Analysis) -> list[str]:
    heights, unreadable = chart_bars(path)
    if unreadable:
        return [unreadable]
    want = sorted(abs(v) for v in expected.mom.values())
    if len(heights) != len(want):
        return [f"{path.name} has {len(heights)} bars, expected {len(want)} (one per channel)"]
    got = sorted(heights)
    tolerance = 0.03 + 2 / max(got[-1], 1)
    if any(abs(g / got[-1] - w / want[-1]) > tolerance for g, w in zip(got, want, strict=True)):
        return [f"the bars of {path.name} do not match the month-over-month changes"]
    return []


def _finding(text: str) -> tuple[str | None, float | None]:
    """The channel and % of the report's ``Biggest drop: <channel> (<pct>%)`` line."""
    for line in text.splitlines():
        head, colon, rest = line.partition(":")
        if not colon or "biggest drop" not in head.lower():
            continue
        rest = rest.replace("\u2212", "-").replace("*", "").replace("`", "").strip()
        found = re.match(r"(.*?)\s*[(,:]\s*([+-]?\d+(?:\.\d+)?)", rest)
        if found is not None:  # "retail (-27.43%)", "(blank) (-85%)", "retail, -27.4%"
            return found.group(1).strip().lower(), float(found.group(2))
        # "retail -27.4%", "retail (MoM -27.4%)": the first word, then the first number.
        word = re.match(r"[^\s(,:]+", rest)
        if word is None:
            return None, None
        number = _NUMBER.search(rest, word.end())
        return word.group().lower(), float(number.group()) if number else None
    return None, None


def _table_rows(text: str) -> dict[str, list[float]]:
    """Markdown table rows by first cell (lower case): the numbers in the other cells."""
    rows: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.strip().startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
            continue
        numbers: list[float] = []
        for cell in cells[1:]:
            cleaned = re.sub(r"[\s,$€%*`]", "", cell.replace("\u2212", "-"))
            if _NUMBER.fullmatch(cleaned):
                numbers.append(float(cleaned))
        if numbers:  # a header or a label row carries no totals
            rows.setdefault(cells[0].strip("*`_ ").lower(), []).extend(numbers)
    return rows


def _table_problems(text: str, expected: Analysis) -> list[str]:
    rows = _table_rows(text)
    first, second = expected.months
    problems: list[str] = []
    for channel in sorted(expected.totals):
        numbers = rows.get(channel.lower())
        if numbers is None:
            problems.append(f"the table has no row for {channel}")
            continue
        for month in (first, second):
            total = expected.total(channel, month)
            if not any(abs(n - total) <= _TOTAL_TOLERANCE for n in numbers):
                problems.append(f"{channel} {month}: the table lacks its total {total:.2f}")
    # Other rows (a total, a second table) are fine; a row for blank channels is the trap.
    blank = [name for name in rows if _is_blank(name)]
    problems += [f"the table has a row {name!r}, which is no channel" for name in blank]
    return problems


def _is_blank(name: str) -> bool:
    return name.strip("()[]<>- ") in _BLANK_NAMES


# ---------------------------------------------------------------- state


class SalesState(AgentState):
    """The card of a sales task: what the analysis has established so far."""

    cleaned_rows: int | None = None
    """Rows in cleaned.csv (set once the data is cleaned)."""
    totals: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Channel -> month -> revenue (2 decimals), from the cleaned data."""
    mom_pct: dict[str, float] = Field(default_factory=dict)
    """Channel -> month-over-month change in % (2 decimals)."""
    biggest_drop: str | None = None
    biggest_drop_pct: float | None = None
    report_written: bool = False
    """report.md and chart.png are written and verified."""


def _cents_of(totals: Mapping[str, Mapping[str, float]]) -> Totals:
    return {c: {m: round(v * 100) for m, v in per.items()} for c, per in totals.items()}


def render_report(analysis: Analysis, cleaned_rows: int) -> str:
    """The report the oracle writes (any report with the same facts passes the checks)."""
    first, second = analysis.months
    lines = [
        f"# Revenue by channel: {first} vs {second}",
        "",
        f"Biggest drop: {analysis.biggest} ({analysis.pct:+.2f}%)",
        "",
        f"| channel | {first} | {second} | MoM change |",
        "|---|---:|---:|---:|",
    ]
    for channel, change in analysis.mom.items():
        lines.append(
            f"| {channel} | {analysis.total(channel, first):.2f} | "
            f"{analysis.total(channel, second):.2f} | {change:+.2f}% |"
        )
    lines += [
        "",
        f"Cleaned data: {cleaned_rows} orders (null revenues and blank channels dropped, "
        "exact duplicate rows counted once).",
        "",
        f"![Month-over-month change by channel]({CHART})",
        "",
    ]
    return "\n".join(lines)


class _Task:
    """One built task: its files, its tools, and the re-checks verify and check share.

    The tools are bound methods, so the harness sees plain keyword signatures and
    every run of the task works on its own directory.
    """

    def __init__(self, params: dict[str, Any], root: Path) -> None:
        self.params = params
        self.root = root
        self.rows = make_rows(params)
        self.truth = analyse(totals_of(self.rows))
        self.clean_count = _clean_count(self.rows)
        self.traps = trap_answers(self.rows)

    def write_files(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _write_csv(self.root / SALES, COLUMNS, ([r[c] for c in COLUMNS] for r in self.rows))
        for name in (CLEANED, REPORT, CHART):
            (self.root / name).unlink(missing_ok=True)

    # ---- tools

    def csv_info(self) -> str:
        """Describe sales.csv: its columns, row count and first rows."""
        header, rows = _read_csv(self.root / SALES)
        lines = [
            f"{SALES}: {len(rows)} rows, {len(header)} columns",
            "columns: " + ", ".join(header),
            "first rows:",
        ]
        lines += [", ".join(f"{k}={v!r}" for k, v in row.items()) for row in rows[:8]]
        lines.append("(every CSV file in the folder is a table for run_sql: sales, ...)")
        return "\n".join(lines)

    def run_sql(self, query: str) -> dict[str, Any]:
        """Run one SQLite query: each CSV file is a table (sales, ...), empty cells are NULL."""
        columns, rows = _query(self.root, query)
        return {
            "columns": columns,
            "row_count": len(rows),
            "rows": [list(r) for r in rows[:_SQL_ROWS]],
            "truncated": len(rows) > _SQL_ROWS,
        }

    def export_csv(self, query: str, filename: str) -> dict[str, Any]:
        """Run one SQLite query and save its rows as a new CSV file (e.g. cleaned.csv)."""
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.csv", filename) or filename == SALES:
            raise ValueError(f"{filename!r}: give a new file name like cleaned.csv (not {SALES})")
        columns, rows = _query(self.root, query)
        _write_csv(self.root / filename, columns, rows)
        return {"filename": filename, "rows": len(rows), "columns": columns}

    def plot_channels(
        self,
        channels: list[str],
        values: list[float],
        title: str = "Month-over-month change by channel (%)",
    ) -> str:
        """Draw a bar chart, one bar per channel (values in the same order), as chart.png."""
        if not channels or len(channels) != len(values) or len(channels) > 20:
            raise ValueError("give 1 to 20 channels and exactly one value per channel")
        if not all(math.isfinite(v) for v in values):
            raise ValueError("values must be finite numbers")
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError as exc:
            raise MissingExtra("plot_channels needs: pip install 'skillstate[eval]'") from exc
        # The Agg canvas, no pyplot: no global figure state, no display needed.
        figure = Figure(figsize=(6.4, 4.0), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        positions = list(range(len(channels)))
        # One flat colour without edges or antialiasing: chart_bars reads bars back by it.
        axes.bar(positions, values, width=0.6, color=BAR_COLOR, linewidth=0, antialiased=False)
        axes.axhline(0, color="black", linewidth=0.8)
        axes.set_xticks(positions, labels=[str(c) for c in channels])
        axes.set_title(title)
        figure.tight_layout()
        figure.savefig(self.root / CHART, format="png", metadata={"Software": None})
        return f"{CHART} written: {len(channels)} bars"

    def write_report(self, markdown: str) -> str:
        """Write report.md (Markdown)."""
        if not markdown.strip():
            raise ValueError("the report is empty")
        (self.root / REPORT).write_text(markdown, encoding="utf-8")
        return f"{REPORT} written ({len(markdown)} characters)"

    # ---- independent re-checks

    def cleaned_analysis(self) -> tuple[Analysis | None, list[str]]:
        """The analysis recomputed from cleaned.csv, after checking it against sales.csv."""
        problems = self.cleaned_problems(_clean_count(_read_csv(self.root / SALES)[1]))
        if problems:
            return None, problems
        try:
            return analyse(totals_of(_read_csv(self.root / CLEANED)[1], dedupe=False)), []
        except ValueError as exc:
            return None, [f"{CLEANED}: {exc}"]

    def cleaned_problems(self, expected_rows: int) -> list[str]:
        """What is wrong with cleaned.csv, given how many clean rows the raw data has."""
        path = self.root / CLEANED
        if not path.exists():
            return [f"{CLEANED} is missing"]
        header, rows = _read_csv(path)
        missing = {"channel", "revenue"} - set(header)
        if missing or not ({"date", "month"} & set(header)):
            return [f"{CLEANED} needs channel, revenue and date columns; it has {header}"]
        problems: list[str] = []
        nulls = sum(1 for r in rows if not r["revenue"].strip())
        blanks = sum(1 for r in rows if not r["channel"].strip())
        zeros = sum(1 for r in rows if _is_number(r["revenue"]) and float(r["revenue"]) == 0)
        copies = len(rows) - len({tuple(r.values()) for r in rows})
        ids = [r["order_id"] for r in rows if r.get("order_id")]
        copies = max(copies, len(ids) - len(set(ids)))
        for count, what in (
            (nulls, "a null revenue"),
            (zeros, "revenue 0 (a null filled with 0?)"),
            (blanks, "a blank channel"),
            (copies, "a duplicate"),
        ):
            if count:
                problems.append(f"{CLEANED}: {count} rows with {what}")
        if len(rows) != expected_rows:
            problems.append(
                f"{CLEANED} has {len(rows)} rows; {SALES} has {expected_rows} distinct rows "
                "with a revenue and a channel"
            )
        return problems

    def report_problems(self, expected: Analysis) -> tuple[str, str, list[str]]:
        """Problems with report.md: its channel, its %, its table (each ``""``/[] if fine)."""
        try:
            text = (self.root / REPORT).read_text(encoding="utf-8")
        except FileNotFoundError:
            return f"{REPORT} is missing", f"{REPORT} is missing", [f"{REPORT} is missing"]
        table = _table_problems(text, expected)
        channel, pct = _finding(text)
        if channel is None:
            missing = "no 'Biggest drop: <channel> (<change>%)' line"
            return missing, missing, table
        wrong = ""
        if channel != expected.biggest.lower():
            wrong = f"names {channel!r}, expected {expected.biggest!r}" + self._trap_note(channel)
        off = ""
        if pct is None:
            off = "the biggest-drop line has no %"
        # "a drop of 25.08%" says the sign in words: the size is what must match.
        elif abs(abs(pct) - abs(expected.pct)) > _PCT_TOLERANCE:
            off = f"says {pct:+.2f}%, expected {expected.pct:+.2f}%"
        return wrong, off, table

    def _trap_note(self, channel: str) -> str:
        if _is_blank(channel):
            return " (a blank channel is not a channel: those rows are dropped)"
        names = [_TRAPS[k] for k, v in self.traps.items() if v.lower() == channel]
        return f" ({'; '.join(names)})" if names else ""

    def check(self, final_state: AgentState) -> list[CheckResult]:
        """The final checks, on the files only: valid whatever state class a variant used."""
        wrong, off, table = self.report_problems(self.truth)
        chart = _chart_problems(self.root / CHART, self.truth)
        cleaned = self.cleaned_problems(self.clean_count) if (self.root / CLEANED).exists() else []
        return [
            CheckResult("report_biggest_drop", not wrong, wrong),
            CheckResult("report_mom_pct", not off, off),
            CheckResult("report_table", not table, "; ".join(table[:3])),
            CheckResult("chart_png", not chart, "; ".join(chart)),
            CheckResult(
                "cleaned_csv",
                not cleaned,
                "; ".join(cleaned[:3]) or ("" if (self.root / CLEANED).exists() else "not written"),
            ),
        ]


def _clean_count(rows: Sequence[Mapping[str, str]]) -> int:
    """Distinct rows with a revenue and a channel: the recount every check relies on."""
    return len(
        {
            tuple(sorted(r.items()))
            for r in rows
            if (r.get("revenue") or "").strip() and (r.get("channel") or "").strip()
        }
    )


# ---------------------------------------------------------------- skills


def _skill_library(task: _Task) -> SkillRegistry:
    """The verified skills: the cleaning rules live in clean_data, not in the policy.

    The file-writing skills are not declared ``effects=True``: they overwrite whole
    files, so running one again after a crash writes the same bytes (no probe needed),
    and their rollback removes what a failed attempt left.
    """
    skills = SkillRegistry()
    root = task.root

    @skills.skill(
        step="cleaning",
        outputs=["cleaned_rows"],
        tools=["export_csv"],
        max_retries=1,
        when=lambda s: s.cleaned_rows is None,
    )
    def clean_data(state: SalesState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Write cleaned.csv: null revenues and blank channels dropped, duplicates once."""
        result = ctx.call("export_csv", query=CLEAN_QUERY, filename=CLEANED)
        rows = int(result["rows"])
        return Outcome(
            writes={"cleaned_rows": rows},
            summary=f"{CLEANED}: {rows} rows",
            evidence=[ctx.evidence(f"{CLEANED} written with {rows} clean rows")],
        )

    @clean_data.verifier
    def _clean(state: SalesState, outcome: Outcome) -> Verdict:
        # Recount from the raw file itself, in Python: not the SQL that wrote cleaned.csv.
        expected = _clean_count(_read_csv(root / SALES)[1])
        problems = task.cleaned_problems(expected)
        if state.cleaned_rows != expected:
            problems.append(f"cleaned_rows is {state.cleaned_rows}, the raw data has {expected}")
        return Verdict.failed("; ".join(problems[:3])) if problems else Verdict.passed()

    clean_data.rollbacker(lambda state, outcome, ctx: (root / CLEANED).unlink(missing_ok=True))

    @skills.skill(
        step="aggregating",
        outputs=["totals"],
        reads=["cleaned_rows"],
        tools=["run_sql"],
        when=lambda s: s.cleaned_rows is not None and not s.totals,
    )
    def aggregate(state: SalesState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Total the cleaned revenue by channel and month."""
        result = ctx.call("run_sql", query=AGGREGATE_QUERY)
        totals: dict[str, dict[str, float]] = {}
        for channel, month, revenue in result["rows"]:
            totals.setdefault(str(channel), {})[str(month)] = round(float(revenue), 2)
        return Outcome(
            writes={"totals": totals},
            summary=f"totals of {len(totals)} channels",
            evidence=[ctx.evidence(f"revenue by channel and month: {totals}")],
        )

    @aggregate.verifier
    def _totals(state: SalesState, outcome: Outcome) -> Verdict:
        recomputed, problems = task.cleaned_analysis()
        if recomputed is None:
            return Verdict.failed("; ".join(problems[:3]))
        if _cents_of(state.totals) != recomputed.totals:
            return Verdict.failed(f"totals {state.totals} differ from {CLEANED}'s")
        return Verdict.passed()

    @skills.skill(
        step="analyzing",
        outputs=["mom_pct", "biggest_drop", "biggest_drop_pct"],
        reads=["totals"],
        when=lambda s: bool(s.totals) and s.biggest_drop is None,
    )
    def find_biggest_drop(state: SalesState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Compute each channel's month-over-month change and the channel that fell most."""
        result = analyse(_cents_of(state.totals))
        return Outcome(
            writes={
                "mom_pct": result.mom,
                "biggest_drop": result.biggest,
                "biggest_drop_pct": result.pct,
            },
            summary=f"{result.biggest} fell most: {result.pct:+.2f}%",
        )

    @find_biggest_drop.verifier
    def _drop(state: SalesState, outcome: Outcome) -> Verdict:
        recomputed, problems = task.cleaned_analysis()
        if recomputed is None:
            return Verdict.failed("; ".join(problems[:3]))
        if state.mom_pct.keys() != recomputed.mom.keys() or any(
            abs(state.mom_pct[c] - v) > 0.01 for c, v in recomputed.mom.items()
        ):
            return Verdict.failed(f"mom_pct {state.mom_pct}, recomputed {recomputed.mom}")
        pct = state.biggest_drop_pct
        if state.biggest_drop != recomputed.biggest or pct is None:
            return Verdict.failed(f"{state.biggest_drop} is not the biggest drop")
        if abs(pct - recomputed.pct) > 0.01:
            return Verdict.failed(f"biggest_drop_pct {pct}, recomputed {recomputed.pct}")
        return Verdict.passed()

    @skills.skill(
        step="reporting",
        outputs=["report_written"],
        reads=["totals", "mom_pct", "biggest_drop", "biggest_drop_pct", "cleaned_rows"],
        tools=["plot_channels", "write_report"],
        max_retries=1,
        when=lambda s: s.biggest_drop is not None and not s.report_written,
    )
    def write_report(state: SalesState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Draw chart.png (MoM change per channel) and write report.md."""
        result = analyse(_cents_of(state.totals))
        ctx.call("plot_channels", channels=list(result.mom), values=list(result.mom.values()))
        ctx.call("write_report", markdown=render_report(result, state.cleaned_rows or 0))
        return Outcome(
            writes={"report_written": True},
            summary=f"{REPORT} and {CHART} written: {result.biggest} {result.pct:+.2f}%",
            evidence=[ctx.evidence(f"{REPORT} names {result.biggest} ({result.pct:+.2f}%)")],
        )

    @write_report.verifier
    def _report(state: SalesState, outcome: Outcome) -> Verdict:
        recomputed, problems = task.cleaned_analysis()
        if recomputed is None:
            return Verdict.failed("; ".join(problems[:3]))
        wrong, off, table = task.report_problems(recomputed)
        problems = [p for p in (wrong, off) if p] + table
        problems += _chart_problems(root / CHART, recomputed)
        return Verdict.failed("; ".join(problems[:3])) if problems else Verdict.passed()

    @write_report.rollbacker
    def _unwrite(state: SalesState, outcome: Outcome | None, ctx: SkillContext) -> None:
        for name in (REPORT, CHART):
            (root / name).unlink(missing_ok=True)

    return skills


MACHINE = StateMachine(
    {
        "init": ["cleaning"],
        "cleaning": ["aggregating"],
        "aggregating": ["analyzing"],
        "analyzing": ["reporting"],
        "reporting": ["done"],
        "done": [],
    },
    initial="init",
)
"""init -> cleaning -> aggregating -> analyzing -> reporting -> done: one skill each."""


# ---------------------------------------------------------------- plans


def _skills_plan(task: _Task) -> tuple[list[Action], list[dict[str, Any]]]:
    """The oracle's skills-mode actions and the facts expected after each of them."""
    truth = task.truth
    finish = Finish(summary=f"{truth.biggest} fell most ({truth.pct:+.2f}%)")
    plan: list[Action] = [
        CallSkill(skill="clean_data", reason="clean before aggregating"),
        CallSkill(skill="aggregate", reason="data is clean"),
        CallSkill(skill="find_biggest_drop", reason="totals are known"),
        CallSkill(skill="write_report", reason="the biggest drop is known"),
        finish,
    ]
    cleaned = {"cleaned_rows": task.clean_count}
    totals = {f"totals.{c}.{m}": truth.total(c, m) for c in truth.totals for m in truth.totals[c]}
    drop = {
        "biggest_drop": truth.biggest,
        "biggest_drop_pct": truth.pct,
        **{f"mom_pct.{c}": v for c, v in truth.mom.items()},
    }
    done = {**cleaned, **drop, "report_written": True}
    facts: list[dict[str, Any]] = [cleaned, {**cleaned, **totals}, {**totals, **drop}, done, done]
    return plan, facts


def _tools_plan(task: _Task) -> list[Action]:
    """The oracle's raw-tools actions: the same analysis through SQL and the raw tools."""
    truth = task.truth
    totals = {c: {m: truth.total(c, m) for m in truth.months} for c in truth.totals}
    return [
        CallSkill(skill="tool_csv_info", params={}, reason="look at the data first"),
        CallSkill(
            skill="tool_export_csv",
            params={"query": CLEAN_QUERY, "filename": CLEANED},
            reason="drop null revenues and blank channels, count duplicates once",
        ),
        CallSkill(
            skill="tool_run_sql", params={"query": AGGREGATE_QUERY}, reason="totals by month"
        ),
        CallSkill(
            skill="remember",
            params={
                "key": "analysis",
                "value": {
                    "totals": totals,
                    "mom_pct": truth.mom,
                    "biggest_drop": truth.biggest,
                    "biggest_drop_pct": truth.pct,
                },
            },
            reason="keep the totals and changes for the report",
        ),
        CallSkill(
            skill="tool_plot_channels",
            params={"channels": list(truth.mom), "values": list(truth.mom.values())},
            reason="chart of the changes",
        ),
        CallSkill(
            skill="tool_write_report",
            params={"markdown": render_report(truth, task.clean_count)},
            reason="report the biggest drop",
        ),
        Finish(summary=f"{truth.biggest} fell most ({truth.pct:+.2f}%)"),
    ]


class SalesFamily:
    """Builds a sales task: files, tools, skills, machine, plans and checks."""

    name = "sales"

    def build(self, spec: TaskSpec, root: Path) -> Environment:
        task = _Task(dict(spec.params), root)
        task.write_files()
        plan, facts = _skills_plan(task)
        return Environment(
            root=root,
            state_type=SalesState,
            machine=MACHINE,
            tools={
                "csv_info": task.csv_info,
                "run_sql": task.run_sql,
                "export_csv": task.export_csv,
                "plot_channels": task.plot_channels,
                "write_report": task.write_report,
            },
            skills=_skill_library(task),
            plan_skills=plan,
            plan_tools=_tools_plan(task),
            check=task.check,
            expected_facts=facts,
            effect_tools=frozenset({"export_csv", "plot_channels", "write_report"}),
        )
