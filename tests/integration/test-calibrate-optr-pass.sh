#!/usr/bin/env bash
# test-calibrate-optr-pass.sh - --refine optr inside the layer-major pass (optr-rows.c):
#  1. from the model, with key centring and --optr-train-seq 2 of 4 sequences: the same bytes as
#     the store route (--save-activations, then --from-activations --refine optr);
#  2. the same without centring and one training sequence (only the first batch's rows kept);
#  3. -t 1 and -t 2 write identical bytes;
#  4. SIGKILL after a checkpoint and --resume: identical bytes to the run without a break;
#  5. sequences too short for OptR (sink + recent + 8 rows) are refused, naming the options.
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
ARGS=(-m "$MODEL" --sink 8 --recent 16 --clip 0.96,0.92 --tokens 256 -c 64 --heldout 1 --batch 2 -q)
same() { # A B WHAT
    for f in oscar.safetensors oscar.json README.md; do cmp -s "$1/$f" "$2/$f" || fail "$f differs: $3"; done
}

# 1. in the pass == from the store (centred)
"$CAL" "${ARGS[@]}" -f "$CORPUS" --refine optr --optr-steps 2 --optr-train-seq 2 -t 2 \
    --save-activations "$T/act.h5" -o "$T/a" || fail "--refine optr in the pass failed"
"$CAL" "${ARGS[@]}" --from-activations "$T/act.h5" --refine optr --optr-steps 2 --optr-train-seq 2 -t 2 -o "$T/b" \
    || fail "--refine optr from the store failed"
same "$T/a" "$T/b" "in the pass vs the store (centred)"
head -c 65536 "$T/a/oscar.safetensors" | tr -d '\0' | grep -q '"layers.29.k_mean"' || fail "no k_mean"

# 2. no centring, one training sequence (the hook keeps the first batch's rows only)
"$CAL" "${ARGS[@]}" -f "$CORPUS" --refine optr --optr-steps 2 --optr-train-seq 1 --no-optr-center -t 2 -o "$T/c" \
    || fail "--no-optr-center in the pass failed"
"$CAL" "${ARGS[@]}" --from-activations "$T/act.h5" --refine optr --optr-steps 2 --optr-train-seq 1 \
    --no-optr-center -t 2 -o "$T/d" || fail "--no-optr-center from the store failed"
same "$T/c" "$T/d" "in the pass vs the store (no centring)"
cmp -s "$T/a/oscar.safetensors" "$T/c/oscar.safetensors" && fail "centring and one sequence changed nothing"
rm -f "$T/act.h5"

# 3. thread count
"$CAL" "${ARGS[@]}" -f "$CORPUS" --refine optr --optr-steps 2 --optr-train-seq 2 -t 1 -o "$T/e" || fail "-t 1 failed"
same "$T/a" "$T/e" "-t 1 vs -t 2"

# 4. kill after a checkpoint, resume
OPT=(-f "$CORPUS" --refine optr --optr-steps 2 --optr-train-seq 2 -t 2 --checkpoint-every 64)
"$CAL" "${ARGS[@]}" "${OPT[@]}" -o "$T/r" & pid=$!
for _ in $(seq 1 1200); do [ -f "$T/r.ckpt" ] && break; sleep 0.05; done
[ -f "$T/r.ckpt" ] || { kill -9 $pid; fail "no checkpoint appeared"; }
sleep 0.5; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
[ -e "$T/r/oscar.safetensors" ] && fail "the run finished before it was killed: make it longer"
"$CAL" "${ARGS[@]}" "${OPT[@]}" --resume -o "$T/r" 2> "$T/r.err" || fail "resume failed: $(tail -3 "$T/r.err")"
same "$T/a" "$T/r" "kill + resume vs straight"

# 5. sequences shorter than sink + recent + 8
"$CAL" -m "$MODEL" --sink 28 --recent 30 --tokens 256 -c 64 --heldout 1 -q -f "$CORPUS" --refine optr \
    -o "$T/x" 2> "$T/err"; rc=$?
[ $rc -ne 0 ] && grep -q "no calibration sequence has the 66 rows" "$T/err" && [ ! -e "$T/x/oscar.safetensors" ] \
    || fail "short sequences: rc=$rc $(cat "$T/err")"
echo "ok"
