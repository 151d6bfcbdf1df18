# Sourced by the other scripts: make sure .venv exists and matches pyproject.toml.
# Only python3 (>= 3.10) is needed beforehand; everything else comes from PyPI.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"
EXTRAS="${SKILLSTATE_EXTRAS:-dev,all}"
STAMP="$VENV/.installed-$(cat pyproject.toml | sha256sum | cut -c1-16)-${EXTRAS//,/_}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating .venv with $($PY --version)" >&2
  "$PY" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ]; then
  echo "bootstrap: installing skillstate[$EXTRAS] into .venv (first run only)" >&2
  LOG="$VENV/install.log"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
         "$VENV/bin/python" -m pip install -e ".[$EXTRAS]"; } >"$LOG" 2>&1; then
    tail -20 "$LOG" >&2
    echo "bootstrap: pip install failed; full log in $LOG" >&2
    exit 1
  fi
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
