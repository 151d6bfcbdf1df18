"""The independent re-derivation of the answer, in plain Python over CSV rows.

Cleaning, totals and month-over-month changes are recomputed here, never through
the SQL that the tools and skills run: the data draw, the skills' verifiers and
the final checks all trust this, not what wrote the files. The trap readings
(what each shortcut would answer) come from the same function with one switch
turned wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "TRAPS",
    "Analysis",
    "Totals",
    "analyse",
    "cents",
    "cents_of",
    "clean_count",
    "totals_of",
    "trap_answers",
]

Totals = dict[str, dict[str, int]]
"""Channel -> month (``YYYY-MM``) -> revenue in cents."""


def cents(text: str) -> int:
    """A money amount (``"12.34"``) in cents."""
    return round(float(text) * 100)


def cents_of(totals: Mapping[str, Mapping[str, float]]) -> Totals:
    """Totals in currency units (as a state holds them) in cents."""
    return {c: {m: round(v * 100) for m, v in per.items()} for c, per in totals.items()}


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
        per[month] = per.get(month, 0) + cents(value)
    return totals


def clean_count(rows: Sequence[Mapping[str, str]]) -> int:
    """Distinct rows with a revenue and a channel: the recount every check relies on."""
    return len(
        {
            tuple(sorted(r.items()))
            for r in rows
            if (r.get("revenue") or "").strip() and (r.get("channel") or "").strip()
        }
    )


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


TRAPS = {
    "no_dedupe": "the answer without removing duplicate rows",
    "blank_channel": "the answer with blank channels kept as a channel",
    "filled": "the answer with null revenues filled from revenue_usd_est",
    "net_revenue": "the answer on net_revenue instead of revenue",
    "usd_est": "the answer on revenue_usd_est instead of revenue",
}
"""Each wrong reading of the data, by name: what its answer is."""


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
