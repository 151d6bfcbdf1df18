"""``skillstate extract``, measured: precision and recall of constraints and facts on a
labelled set of transcripts built from the evaluation families' conversations.

    .venv/bin/python benchmarks/extract_eval.py                       # the rules (heuristic)
    .venv/bin/python benchmarks/extract_eval.py --model local --limit 2 --turn-chars 300
    .venv/bin/python benchmarks/extract_eval.py --out docs/results/2026-12-03-extract

The set (:mod:`skillstate.extract.labelled`): the ``seeds`` suite's tasks and the
``long`` suite's first ``--long`` tasks for each of ``--seeds`` seeds, each run by the
oracle and rendered twice (``history``: the opening message with ``Goal:`` and a
``Constraints:`` list; ``prose``: the same words in one paragraph). Scoring
(:mod:`skillstate.extract.score`): constraints by word overlap, facts by key and equal
value; recall of facts both over every fact the task established and over those whose
value occurs in the transcript. ``--model`` is ``heuristic`` or any provider spec
(``local`` is Gemma 3 270M: a pipeline check, not a measure of what extraction can do).
A case whose model call fails (a prompt over the context window) or whose replies were
never an extraction is counted with no items and listed. ``--out DIR`` writes
``results.json`` and ``report.md`` there.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from skillstate.errors import ExtractionFailed, ProviderError
from skillstate.eval.suites import load_suite
from skillstate.extract import HEURISTIC, extract
from skillstate.extract.labelled import RENDERINGS, Case, build_cases
from skillstate.extract.model import MAX_ITEMS, REPLY_TOKENS, TURN_CHARS
from skillstate.extract.score import Counts, score_constraints, score_facts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=HEURISTIC)
    parser.add_argument("--base-url")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the long suite")
    parser.add_argument("--long", type=int, default=4, help="long-suite tasks per seed")
    parser.add_argument("--limit", type=int, help="only the first N tasks (shortest first)")
    parser.add_argument("--renderings", default=",".join(RENDERINGS))
    parser.add_argument("--turn-chars", type=int, default=TURN_CHARS)
    parser.add_argument("--max-repairs", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=REPLY_TOKENS)
    parser.add_argument("--max-items", type=int, default=MAX_ITEMS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    renderings = [r for r in args.renderings.split(",") if r]
    if not set(renderings) <= set(RENDERINGS):
        parser.error(f"--renderings: choose from {', '.join(RENDERINGS)}")
    specs = list(load_suite("seeds"))
    for seed in range(args.seeds):
        # A seed gives other records, traps and sizes under the same ids: tell them apart.
        for spec in load_suite("long", seed, count=args.long):
            specs.append(spec.model_copy(update={"id": f"{spec.id}-seed{seed}"}))
    started = time.perf_counter()
    cases = [c for c in build_cases(specs) if c.rendering in renderings]
    if args.limit is not None:
        ids = sorted({c.id for c in cases}, key=lambda i: _size(cases, i))[: args.limit]
        cases = [c for c in cases if c.id in ids]
    built = time.perf_counter() - started
    provider = None
    if args.model != HEURISTIC:
        from skillstate.llm import open_provider

        provider = open_provider(args.model, base_url=args.base_url)
    rows = [_run(case, provider, args) for case in cases]
    command = "python benchmarks/extract_eval.py " + " ".join(argv)
    report = _report(rows, args, command.strip(), built)
    print(report["markdown"])
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(
            json.dumps({k: v for k, v in report.items() if k != "markdown"}, indent=1) + "\n",
            encoding="utf-8",
        )
        (args.out / "report.md").write_text(report["markdown"], encoding="utf-8")
    return 0


def _size(cases: list[Case], case_id: str) -> int:
    return min(sum(len(t.text) for t in c.transcript.turns) for c in cases if c.id == case_id)


def _run(case: Case, provider: Any, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    error = None
    constraints: list[str] = []
    facts: dict[str, Any] = {}
    info: dict[str, Any] = {}
    notes: list[str] = []
    try:
        proposal = extract(
            case.transcript,
            case.agent,
            provider=provider,
            max_repairs=args.max_repairs,
            turn_chars=args.turn_chars,
            max_tokens=args.max_tokens,
            max_items=args.max_items,
        )
    except (ProviderError, ExtractionFailed) as exc:
        error = " ".join(str(exc).split())[:200]
    else:
        constraints = [c.text for c in proposal.constraints]
        facts = {f.key: f.value for f in proposal.facts}
        info = proposal.extractor.model_dump()
        notes = list(proposal.notes)
    seconds = time.perf_counter() - started
    print(
        f"{case.id} {case.rendering}: {seconds:.1f} s{' ' + error if error else ''}",
        file=sys.stderr,
    )
    extractable = {k: v for k, v in case.facts.items() if k in case.extractable}
    return {
        "id": case.id,
        "family": case.family,
        "rendering": case.rendering,
        "turns": len(case.transcript.turns),
        "chars": sum(len(t.text) for t in case.transcript.turns),
        "constraints": _counts(score_constraints(constraints, case.constraints)),
        "facts": _counts(score_facts(facts, case.facts)),
        "facts_extractable": _counts(score_facts(facts, extractable)),
        "proposed_constraints": constraints,
        "proposed_facts": facts,
        "labels": {"constraints": list(case.constraints), "facts": case.facts},
        "rejected": len(notes),
        "notes": notes,
        "extractor": info,
        "seconds": round(seconds, 3),
        "error": error,
    }


def _counts(counts: Counts) -> dict[str, Any]:
    return {
        "proposed": counts.proposed,
        "right": counts.right,
        "labelled": counts.labelled,
        "recalled": counts.recalled,
        **counts.extra,
    }


def _total(rows: list[dict[str, Any]], field: str) -> Counts:
    total = Counts()
    for row in rows:
        c = row[field]
        extra = {
            k: v for k, v in c.items() if k not in {"proposed", "right", "labelled", "recalled"}
        }
        total.add(Counts(c["proposed"], c["right"], c["labelled"], c["recalled"], extra))
    return total


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _report(
    rows: list[dict[str, Any]], args: argparse.Namespace, command: str, built: float
) -> dict[str, Any]:
    lines = [
        f"## skillstate extract: {args.model}",
        "",
        f"`{command}` · {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC · "
        f"{platform.machine()} {platform.python_version()} · set built in {built:.1f} s",
        "",
        "| rendering | transcripts | constraints P | constraints R | facts P | facts R (all) "
        "| facts R (extractable) | fact keys P | rejected items | failed | s / transcript |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, Any] = {}
    for rendering in sorted({r["rendering"] for r in rows}):
        mine = [r for r in rows if r["rendering"] == rendering]
        cons, facts, ext = (_total(mine, f) for f in ("constraints", "facts", "facts_extractable"))
        keys = facts.extra.get("right_keys", 0) / facts.proposed if facts.proposed else None
        failed = sum(1 for r in mine if r["error"])
        seconds = sum(r["seconds"] for r in mine) / len(mine)
        summary[rendering] = {
            "transcripts": len(mine),
            "constraints": {"precision": cons.precision, "recall": cons.recall},
            "facts": {"precision": facts.precision, "recall": facts.recall},
            "facts_extractable": {"recall": ext.recall},
            "fact_keys": {"precision": keys},
            "failed": failed,
        }
        lines.append(
            f"| {rendering} | {len(mine)} | {_pct(cons.precision)} ({cons.right}/{cons.proposed}) "
            f"| {_pct(cons.recall)} ({cons.recalled}/{cons.labelled}) "
            f"| {_pct(facts.precision)} ({facts.right}/{facts.proposed}) "
            f"| {_pct(facts.recall)} ({facts.recalled}/{facts.labelled}) "
            f"| {_pct(ext.recall)} ({ext.recalled}/{ext.labelled}) | {_pct(keys)} "
            f"| {sum(r['rejected'] for r in mine)} | {failed} | {seconds:.2f} |"
        )
    lines += [
        "",
        "| family | rendering | constraints P / R | facts P / R (all) |",
        "|---|---|---|---|",
    ]
    for family in sorted({r["family"] for r in rows}):
        for rendering in sorted({r["rendering"] for r in rows}):
            mine = [r for r in rows if r["family"] == family and r["rendering"] == rendering]
            if not mine:
                continue
            cons, facts = _total(mine, "constraints"), _total(mine, "facts")
            lines.append(
                f"| {family} | {rendering} | {_pct(cons.precision)} / {_pct(cons.recall)} "
                f"| {_pct(facts.precision)} / {_pct(facts.recall)} |"
            )
    errors = [f"- {r['id']} ({r['rendering']}): {r['error']}" for r in rows if r["error"]]
    if errors:
        lines += ["", "Failed model calls (counted with no items):", *errors]
    return {
        "command": command,
        "model": args.model,
        "date": f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
        "summary": summary,
        "cases": rows,
        "markdown": "\n".join(lines) + "\n",
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
