#!/usr/bin/env bash
# test-stats-oracle.sh - runs the numpy oracle live (every kind per head, all
# nine compositions) and checks lib/stats + lib/rotation/fit against it with
# 1 and 2 threads. Skips (77) when the oscar venv is missing.
set -eu
cd "$(dirname "$0")/../.."
py=${OSCAR_CACHE:-$HOME/.cache/oscar}/venv/bin/python
build=${OSCAR_BUILD:-build}
[ -x "$py" ] || { echo "no venv python at $py"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" tests/oracle/stats_oracle.py --out "$tmp"
"$build/bin/stats-oracle-check" --threads 1 "$tmp"/stats-*.bin
"$build/bin/stats-oracle-check" --threads 2 "$tmp"/stats-*.bin
