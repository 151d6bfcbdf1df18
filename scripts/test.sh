#!/usr/bin/env bash
# The whole test suite: lint, format check, type check, then pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k contract).
# The suite also runs the LangGraph comparison (bench) and one real local-model call
# (local: llama-cpp-python compiles on first install, about 5 minutes).
SKILLSTATE_EXTRAS="${SKILLSTATE_EXTRAS:-dev,all,bench,local,docs}"
source "$(dirname "$0")/_bootstrap.sh"
echo "== ruff check" && ruff check src tests benchmarks
echo "== ruff format --check" && ruff format --check src tests benchmarks
echo "== mypy src" && mypy
echo "== pytest"
exec pytest "$@"
