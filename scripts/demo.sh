#!/usr/bin/env bash
# The main job: an offline demo on the embedded defaults (SQLite store, no API key).
# Usage: scripts/demo.sh [ticket|orders] [skillstate demo options]
source "$(dirname "$0")/_bootstrap.sh"
name="${1:-ticket}"
shift || true
exec skillstate demo "$name" "$@"
