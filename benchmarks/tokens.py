"""Prompt tokens per decision: the state policy against the history baseline.

    .venv/bin/python benchmarks/tokens.py [--steps 50] [--json]

The same as ``skillstate bench tokens``; the work is in
:mod:`skillstate.bench.tokens` (its docstring says what is measured and how).
"""

from __future__ import annotations

import sys

from skillstate.cli import main

if __name__ == "__main__":
    main(["bench", "tokens", *sys.argv[1:]])
