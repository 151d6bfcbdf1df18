#!/usr/bin/env bash
# The whole test suite: lint, format check, type check, then pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k contract).
source "$(dirname "$0")/_bootstrap.sh"
echo "== ruff check" && ruff check src tests benchmarks
echo "== ruff format --check" && ruff format --check src tests benchmarks
echo "== mypy src" && mypy
echo "== pytest"
exec pytest "$@"
