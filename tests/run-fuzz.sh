#!/usr/bin/env bash
# run-fuzz.sh - runs every build-fuzz/fuzz-* for $OSCAR_FUZZ_SECONDS seconds
# (default 20) over tests/fuzz/corpus/<name>/ (seeds are copied to a scratch
# corpus so the committed one stays small; every seed runs first, so the
# regression inputs there are replayed each time). Fails on the first
# finding, undefined behaviour included. Prints libFuzzer's final coverage
# (cov: edges, ft: features) per target.
# Arguments, if any, name the fuzz binaries to run (default: all).
set -u
cd "$(dirname "$0")/.."
secs=${OSCAR_FUZZ_SECONDS:-20}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
rc=0
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(build-fuzz/fuzz-*)
for bin in "${bins[@]}"; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    work=$(mktemp -d)
    scratch=$(mktemp -d) # the targets' input files (fuzz-common.h), outside the corpus
    cp tests/fuzz/corpus/"$name"/* "$work"/ 2>/dev/null || true
    echo "== $name ($secs s)"
    if ! TMPDIR="$scratch" "$bin" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 \
            -artifact_prefix="build-fuzz/$name-" -print_final_stats=1 "$work" > "build-fuzz/$name.log" 2>&1; then
        tail -n 40 "build-fuzz/$name.log"
        echo "FAILED: $name (artifact in build-fuzz/)"
        rc=1
    else
        grep -E "stat::number_of_executed_units|Done" "build-fuzz/$name.log" | tail -n 2
        grep -E "^#[0-9]+.*DONE" "build-fuzz/$name.log" | sed -E 's/.*(cov: [0-9]+ ft: [0-9]+).*/\1/' | tail -n 1
    fi
    rm -rf "$work" "$scratch"
done
exit $rc
