"""Skill library at scale: what a decision costs at 30 / 300 / 3,000 skills, with and
without retrieval, in one run.

    .venv/bin/python benchmarks/skill_library.py [--sizes 30,300,3000] [--decisions 40]
        [--stats-tasks 200] [--markdown PATH] [--quick]

Needs the ``library`` extra (bm25s, PyStemmer). Prints markdown on stdout (progress on
stderr); ``--markdown PATH`` also writes it to PATH. ``--quick`` is a smoke run (30 and
300 skills, 5 decisions, 10 tasks for the success rates). What is measured and how:
:mod:`skillstate.bench.library`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skillstate.bench.library import LABELLED, measure


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="30,300,3000")
    parser.add_argument("--decisions", type=int, default=len(LABELLED))
    parser.add_argument("--stats-tasks", type=int, default=200)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.decisions, args.stats_tasks = "30,300", 5, 10
    try:
        sizes = [int(n) for n in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: expected numbers separated by commas, got {args.sizes!r}")
    if not all(1 <= n <= 3000 for n in sizes) or not 1 <= args.decisions <= len(LABELLED):
        parser.error(f"sizes are 1 to 3000 skills, decisions 1 to {len(LABELLED)}")
    command = "python benchmarks/skill_library.py " + " ".join(argv)
    text = measure(
        sizes,
        decisions=args.decisions,
        stats_tasks=args.stats_tasks,
        command=command.strip(),
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(text)
    if args.markdown is not None:
        args.markdown.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
