"""The sales task's data: ``sales.csv`` drawn from ``spec.params``, every trap live.

The draw is deterministic: a draw where one of the traps would not change the
answer (checked with :mod:`~skillstate.eval.families.sales.analysis`) is redrawn
with the next attempt number, so the rows depend on ``params`` alone.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillstate.errors import UsageError
from skillstate.eval.families.sales.analysis import Totals, analyse, cents, totals_of, trap_answers
from skillstate.eval.families.sales.files import (
    CHART,
    CLEANED,
    REPORT,
    SALES,
    TABLE_NAME,
    write_csv,
)

__all__ = ["COLUMNS", "make_rows", "write_files"]

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
"""The columns of ``sales.csv``, in order."""
_MONTH = re.compile(r"\d{4}-\d{2}")
_NOTES = """customer asked invoice copy promo applied late delivery refund pending revenue
restated partial return gift wrap bulk order manual entry price override sales rep follow
up duplicate suspected courier damaged reship approved finance review"""
_WORDS = tuple(_NOTES.split())
_SEGMENTS = ("smb", "enterprise", "consumer", "public")


@dataclass
class _Order:
    channel: str
    month: str
    cents: int | None
    """The booked revenue; ``None`` for a null revenue."""
    underlying: int
    """What the order was worth (the estimate columns are derived from it)."""


def _money(amount: int) -> str:
    """Cents as a money amount (``"12.34"``)."""
    return f"{amount / 100:.2f}"


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
    if any(not TABLE_NAME.fullmatch(str(c)) for c in channels):
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
        added += cents(row["revenue"])
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


def _trap_failures(params: Mapping[str, Any], rows: Sequence[Mapping[str, str]]) -> list[str]:
    """Why a draw does not do (empty when it does): a clear answer, every trap live."""
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


def write_files(root: Path, rows: Sequence[Mapping[str, str]]) -> None:
    """The task folder as a run starts it: ``sales.csv`` and none of the outputs."""
    root.mkdir(parents=True, exist_ok=True)
    write_csv(root / SALES, COLUMNS, ([r[c] for c in COLUMNS] for r in rows))
    for name in (CLEANED, REPORT, CHART):
        (root / name).unlink(missing_ok=True)
