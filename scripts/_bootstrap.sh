# Sourced by the other scripts: make sure .venv exists and matches pyproject.toml.
# Only python3 (>= 3.10) is needed beforehand; everything else comes from PyPI.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"
EXTRAS="${SKILLSTATE_EXTRAS:-dev,all}"
STAMP="$VENV/.installed-$(cat pyproject.toml scripts/_bootstrap.sh | sha256sum | cut -c1-16)-${EXTRAS//,/_}"

# Run a long command with its output in $LOG, printing a progress line every 30 s
# (a first install compiles llama-cpp-python: 5 minutes on a quiet 2-core machine,
# up to 45 under load).
with_progress() {
  local what="$1"; shift
  local started=$SECONDS
  "$@" >>"$LOG" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null && sleep 1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "bootstrap: $what, $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s:" \
        "$(tail -1 "$LOG" | cut -c1-100)" >&2
    fi
  done
  wait "$pid"
}

# llama-cpp-python (the `local` extra) builds llama.cpp from source. A native build
# (-march=native) uses every instruction the CPU advertises; on virtual machines
# that advertise AMX it crashes at the first decode. Build for AVX2 instead, into a
# wheelhouse keyed by the flags, so pip never reuses a wheel built with others
# (pip's own cache ignores CMAKE_ARGS). Override with CMAKE_ARGS.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/skillstate/wheels/$(echo "$CMAKE_ARGS" | sha256sum | cut -c1-12)"

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating .venv with $($PY --version)" >&2
  "$PY" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ]; then
  echo "bootstrap: installing skillstate[$EXTRAS] into .venv (first run only)" >&2
  LOG="$VENV/install.log"
  : >"$LOG"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip >>"$LOG" 2>&1 &&
         { [[ ",$EXTRAS," != *,local,* ]] || ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1 ||
           { echo "bootstrap: compiling llama-cpp-python for the local model" \
               "(5-45 min, once per machine)" >&2 &&
             with_progress "compiling llama-cpp-python" "$VENV/bin/python" -m pip wheel \
               --no-cache-dir --no-deps "llama-cpp-python>=0.3,<0.4" -w "$WHEELS"; }; } &&
         with_progress "installing" "$VENV/bin/python" -m pip install \
           --find-links "$WHEELS" -e ".[$EXTRAS]"; }; then
    tail -20 "$LOG" >&2
    echo "bootstrap: pip install failed; full log in $LOG" >&2
    exit 1
  fi
  touch "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
