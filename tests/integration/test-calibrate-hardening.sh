#!/usr/bin/env bash
# test-calibrate-hardening.sh - oscar-calibrate checks its setup before any compute and
# keeps its outputs whole (issue 18):
#  1. pre-flight: an --out that is a file, a directory of other files, a path under /proc
#     or empty fails before the model is opened (exit 1, or 2 for the empty name), naming
#     --out and the problem;
#  2. --seq-len <= --sink + --recent (every held-out row BF16, so the clip search and the
#     gate compare nothing) is a usage error;
#  3. replacing an artifact removes the stale .NAME.tmp.PID/ and .NAME.old.PID/ of dead
#     writers (only names of that pattern, never those of a live process);
#  4. --resume refuses a checkpoint made on another corpus (or capture dtype, or backend), naming what
#     differs; the matching resume completes and removes OUT.ckpt and a stale
#     OUT.ckpt.tmp.PID;
#  5. --json is valid JSON with a quote in the --out path, and -q / --json print nothing
#     else (issue 20).
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
MK=$B/bin/oscar-make-artifact
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
want() { # want RC PATTERN cmd...: exit status RC and PATTERN on stderr
    local rc=$1 pat=$2; shift 2
    "$@" > "$T/out" 2> "$T/err"; local got=$?
    [ "$got" = "$rc" ] || fail "$* -> exit $got, want $rc: $(head -3 "$T/err")"
    grep -q -- "$pat" "$T/err" || fail "$*: stderr lacks '$pat': $(head -3 "$T/err")"
}
dead_pid() { sh -c 'exit 0' & local p=$!; wait $p; echo $p; }   # a pid no process has now

# 1. --model names no file: an error about the model would mean --out was checked too late
NOMODEL=(-m "$T/no-model.gguf" -f "$CORPUS" --tokens 256 -c 64 --sink 8 --recent 16 -q)
mkdir -p "$T/foreign" && echo notes > "$T/foreign/notes.txt"
want 1 "notes.txt" "$CAL" "${NOMODEL[@]}" -o "$T/foreign"
[ "$(ls -A "$T/foreign")" = notes.txt ] || fail "a foreign --out was touched: $(ls -A "$T/foreign")"
echo x > "$T/file"
want 1 "not a directory" "$CAL" "${NOMODEL[@]}" -o "$T/file"
want 1 "/proc/oscar-calibrate-test" "$CAL" "${NOMODEL[@]}" -o /proc/oscar-calibrate-test
want 2 "empty" "$CAL" "${NOMODEL[@]}" -o ""
ls -A "$T" | grep -q '\.tmp\.' && fail "pre-flight left a temporary: $(ls -A "$T")"
ok "--out checked before the model is opened (file, foreign directory, /proc, empty)"

# 2. a gate over all-BF16 rows measures nothing
want 2 "seq-len" "$CAL" "${NOMODEL[@]}" -c 64 --sink 32 --recent 32 -o "$T/v"
[ ! -e "$T/v" ] || fail "vacuous gate: wrote $T/v"
ok "--seq-len <= --sink + --recent is a usage error"

# 3. stale siblings of an artifact
d=$(dead_pid)
"$MK" "$T/art" 2 4 2 16 0 1 > /dev/null 2>&1 || fail "make artifact"
mkdir "$T/.art.tmp.$d" "$T/.art.old.$d" "$T/.art.tmp.12ab" "$T/.art.tmp.$$"
touch "$T/.art.tmp.$d/oscar.json" "$T/.art.old.$d/oscar.safetensors"
"$MK" "$T/art" 2 4 2 16 0 2 > /dev/null 2> "$T/err" || fail "replace artifact: $(cat "$T/err")"
[ -s "$T/art/oscar.safetensors" ] || fail "replaced artifact missing"
[ ! -e "$T/.art.tmp.$d" ] && [ ! -e "$T/.art.old.$d" ] || fail "stale siblings left: $(ls -A "$T")"
[ -d "$T/.art.tmp.12ab" ] && [ -d "$T/.art.tmp.$$" ] || fail "removed a name that is not a dead writer's"
rmdir "$T/.art.tmp.12ab" "$T/.art.tmp.$$"
ok "stale .NAME.tmp.PID/ and .NAME.old.PID/ of dead writers are removed, nothing else"

# 4. a checkpoint of a run killed after its first one (it stays until that run would end).
#    Another model's checkpoint is tests/unit/test-calibrate.c's (no second model with a
#    tokenizer here); another corpus is this one's.
ARGS=(-f "$CORPUS" --tokens 256 -c 64 -b 1 --heldout 1 --sink 8 --recent 16 --clip 0.96,0.92 -t 2 -q
      --checkpoint-every 64)
"$CAL" -m "$MODEL" "${ARGS[@]}" -o "$T/c" & pid=$!
for _ in $(seq 1 600); do [ -f "$T/c.ckpt" ] && break; sleep 0.1; done
kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
[ -f "$T/c.ckpt" ] || fail "no checkpoint appeared"
want 1 "corpus" "$CAL" -m "$MODEL" "${ARGS[@]}" -f "$AUSTEN/persuasion.txt" -o "$T/c" --resume
grep -q "persuasion.txt" "$T/err" && grep -q "prideprejudice.txt" "$T/err" && grep -q "c.ckpt" "$T/err" \
    || fail "corpus mismatch: the message names not both corpora and the checkpoint: $(cat "$T/err")"
want 1 "capture" "$CAL" -m "$MODEL" "${ARGS[@]}" --capture-dtype bf16 -o "$T/c" --resume
# a CPU checkpoint does not continue on CUDA (refused before any device is needed)
want 1 "made on --device cpu" "$CAL" -m "$MODEL" "${ARGS[@]}" --device cuda --gpu-precision fp32 -o "$T/c" --resume
[ ! -e "$T/c" ] && [ -f "$T/c.ckpt" ] || fail "a refused resume wrote the artifact or lost the checkpoint"
ok "--resume refuses a checkpoint of another corpus, capture dtype or backend, naming what differs"
touch "$T/c.ckpt.tmp.$d"
"$CAL" -m "$MODEL" "${ARGS[@]}" -o "$T/c" --resume 2> "$T/err" || fail "resume: $(cat "$T/err")"
[ -s "$T/c/oscar.safetensors" ] || fail "resume wrote no artifact"
[ ! -e "$T/c.ckpt" ] && [ ! -e "$T/c.ckpt.tmp.$d" ] || fail "checkpoint files left: $(ls -A "$T")"
ok "the matching resume completes and removes OUT.ckpt and a stale OUT.ckpt.tmp.PID"

# 5. (issue 20) --json is valid JSON whatever the path holds, and the only output: -q and
#    --json leave stderr empty on success
mkdir -p "$T/q\"x"
"$CAL" -m "$MODEL" "${ARGS[@]}" -o "$T/q\"x/a" --json > "$T/j.json" 2> "$T/err" || fail "--json run: $(cat "$T/err")"
[ ! -s "$T/err" ] || fail "--json printed on stderr: $(head -3 "$T/err")"
"$PY" - "$T/j.json" "$T/q\"x/a" <<'PY' || fail "--json output: $(head -c 300 "$T/j.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["out"] == sys.argv[2], j["out"]
assert j["source"] == "forward" and j["tokens"] > 0 and "gate" in j["summary"], j
# the gate's verdict is in oscar.json and in the card (issue 20), the same as in the summary
passed = j["summary"]["gate"]["pass"]
meta = json.load(open(sys.argv[2] + "/oscar.json"))["metadata"]
assert meta["oscar.gate"] == ("pass" if passed else "fail"), meta["oscar.gate"]
card = open(sys.argv[2] + "/README.md").read()
assert ("**PASS**" if passed else "**FAILED**") in card, card[:800]
PY
"$CAL" -m "$MODEL" "${ARGS[@]}" -o "$T/q\"x/b" -q > "$T/out" 2> "$T/err" || fail "-q run: $(cat "$T/err")"
[ ! -s "$T/err" ] && [ ! -s "$T/out" ] || fail "-q printed: $(head -3 "$T/err" "$T/out")"
ok "--json is valid JSON (a quote in --out) and, like -q, leaves stderr empty; the gate verdict is in oscar.json and the card"
echo "test-calibrate-hardening: $n checks passed"
