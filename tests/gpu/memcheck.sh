# memcheck.sh - sourced by the GPU scripts: memcheck LOG CMD... runs CMD under
# compute-sanitizer's memcheck (5-minute limit), prints the log's last lines and
# returns its status (non-zero on any error); returns 0 with a note when
# compute-sanitizer is not installed.
memcheck() {
    local log=$1
    shift
    if ! command -v compute-sanitizer >/dev/null; then
        echo "memcheck: compute-sanitizer not found (skipped)"
        return 0
    fi
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$@" >"$log" 2>&1
    local r=$?
    tail -n 2 "$log"
    return $r
}
