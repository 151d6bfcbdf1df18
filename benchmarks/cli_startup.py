"""How long ``skillstate --help`` takes, against a bare interpreter start, in one run.

    .venv/bin/python benchmarks/cli_startup.py [--runs N]

Prints the best of N wall-clock runs of each command and the ratios. The CLI
imports only typer and the core models at start-up; stores, rich tables and
tokenizers load inside the commands that need them.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time


def best_of(cmd: list[str], runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    exe = shutil.which("skillstate") or sys.exit("skillstate is not installed in this environment")
    rows = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import skillstate": [sys.executable, "-c", "import skillstate"],
        "import skillstate.cli": [sys.executable, "-c", "import skillstate.cli"],
        "skillstate --help": [exe, "--help"],
    }
    times = {name: best_of(cmd, args.runs) for name, cmd in rows.items()}
    base = times["python -c pass"]
    print(f"{'command':<24}{'best of ' + str(args.runs):>12}{'minus bare python':>20}")
    for name, seconds in times.items():
        print(f"{name:<24}{seconds * 1000:>10.0f}ms{(seconds - base) * 1000:>18.0f}ms")


if __name__ == "__main__":
    main()
