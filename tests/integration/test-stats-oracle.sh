#!/usr/bin/env bash
# test-stats-oracle.sh - runs the numpy oracle live (every kind per head, all
# nine compositions) and checks lib/stats + lib/rotation/fit against it with
# 1 and 2 threads. Skips (77) when the oscar venv is missing.
set -eu
. "$(dirname "$0")/common.sh"
build=$B py=$PY tmp=$T
[ -x "$py" ] || skip "no venv python at $py"
"$py" tests/oracle/stats_oracle.py --out "$tmp"
"$build/bin/stats-oracle-check" --threads 1 "$tmp"/stats-*.bin
"$build/bin/stats-oracle-check" --threads 2 "$tmp"/stats-*.bin
