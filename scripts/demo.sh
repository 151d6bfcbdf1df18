#!/usr/bin/env bash
# The main job: an offline demo on the embedded defaults (SQLite store, no API key).
# Usage: scripts/demo.sh [ticket|orders] [skillstate demo options]
source "$(dirname "$0")/_bootstrap.sh"
name=ticket
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then name="$1"; shift; fi
exec skillstate demo "$name" "$@"
