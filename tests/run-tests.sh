#!/usr/bin/env bash
# run-tests.sh - runs every test and prints one closing "N passed, N failed" line.
#
#   unit:        $OSCAR_BUILD/tests/test-*   (cmocka binaries; each case counts)
#   sanitizers:  $OSCAR_SAN_BUILD/tests/test-* again, when OSCAR_SAN_BUILD is set
#   integration: tests/integration/test-*.sh (exit 0 pass, 77 skip, else fail)
#   fuzz:        build-fuzz/fuzz-* for $OSCAR_FUZZ_SECONDS each, when that is set
#
# --unit-only skips the integration scripts. A filter argument (a substring)
# restricts which tests run.
set -u
cd "$(dirname "$0")/.."
unit_only=0
filter=""
for a in "$@"; do
    case "$a" in
        --unit-only) unit_only=1 ;;
        *) filter="$a" ;;
    esac
done
build=${OSCAR_BUILD:-build}
passed=0 failed=0 skipped=0
failed_names=()

run_unit_dir() {
    local dir=$1 tag=$2
    for t in "$dir"/tests/test-*; do
        [ -x "$t" ] || continue
        case "$t" in *"$filter"*) ;; *) continue ;; esac
        local log
        log=$(CMOCKA_MESSAGE_OUTPUT=stdout "$t" 2>&1)
        local rc=$?
        local p f
        p=$(printf '%s\n' "$log" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test(s)\./\1/p' | tail -n 1)
        f=$(printf '%s\n' "$log" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test(s), listed below:/\1/p' | tail -n 1)
        p=${p:-0}
        f=${f:-0}
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            f=1 # crashed or exited early: count it
        fi
        passed=$((passed + p))
        failed=$((failed + f))
        if [ "$f" -ne 0 ]; then
            failed_names+=("$tag $(basename "$t")")
            printf '%s\n' "$log" | tail -n 40
        fi
        printf '%-8s %-40s %3d passed %3d failed\n' "$tag" "$(basename "$t")" "$p" "$f"
    done
}

run_unit_dir "$build" unit
if [ -n "${OSCAR_SAN_BUILD:-}" ]; then
    run_unit_dir "$OSCAR_SAN_BUILD" asan
fi

if [ "$unit_only" -eq 0 ]; then
    for t in tests/integration/test-*.sh; do
        [ -f "$t" ] || continue
        case "$t" in *"$filter"*) ;; *) continue ;; esac
        start=$(date +%s)
        log=$(OSCAR_BUILD="$build" bash "$t" 2>&1)
        rc=$?
        secs=$(( $(date +%s) - start ))
        if [ "$rc" -eq 0 ]; then
            passed=$((passed + 1)); res=passed
        elif [ "$rc" -eq 77 ]; then
            skipped=$((skipped + 1)); res=skipped
        else
            failed=$((failed + 1)); res=FAILED
            failed_names+=("integration $(basename "$t")")
            printf '%s\n' "$log" | tail -n 60
        fi
        printf '%-8s %-40s %s (%ds)\n' integ "$(basename "$t")" "$res" "$secs"
    done
fi

# Fuzz targets, when built and a time budget is given (make test does both).
if [ "$unit_only" -eq 0 ] && [ -n "${OSCAR_FUZZ_SECONDS:-}" ]; then
    for f in build-fuzz/fuzz-*; do
        [ -x "$f" ] || continue
        case "$f" in *.log|*-crash-*|*-leak-*|*-timeout-*|*-oom-*) continue ;; esac
        case "$f" in *"$filter"*) ;; *) continue ;; esac
        if log=$(bash tests/run-fuzz.sh "$f" 2>&1); then
            passed=$((passed + 1)); res=passed
        else
            failed=$((failed + 1)); res=FAILED
            failed_names+=("fuzz $(basename "$f")")
            printf '%s\n' "$log" | tail -n 40
        fi
        printf '%-8s %-40s %s (%ss)\n' fuzz "$(basename "$f")" "$res" "$OSCAR_FUZZ_SECONDS"
    done
fi

for n in "${failed_names[@]+"${failed_names[@]}"}"; do
    echo "FAILED: $n"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
