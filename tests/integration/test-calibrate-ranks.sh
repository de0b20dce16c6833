#!/usr/bin/env bash
# test-calibrate-ranks.sh - oscar-calibrate --ranks N: the data-parallel ranks as
# threads of one process (lib/calibrate/dp-threads.c) on SmolLM2-135M with a small
# budget, against the single-process run of the same arguments:
#   - --ranks 1 (a group of one thread), 2 and 3 with block-aligned shares: artifact byte-identical (the finishing
#     split too: the gate over 3 ranks); --sign-search with per-KV-head rotations
#   - shares off the 128-token block grid: byte-identical to mpirun -np 3 (the same
#     engine bytes in the same rank order) when mpirun is there
#   - -q prints nothing; --json prints rank 0's summary once
#   - kill -9 after a checkpoint, then --resume with --ranks 2: byte-identical
#   - refusals: more ranks than batches (every rank's error, exit 1, nothing written),
#     --save-activations, --ranks under mpirun
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
ARGS=(-m "$MODEL" -f "$CORPUS" --tokens 1536 -c 128 -b 2 --heldout 1 --sink 16 --recent 32
      --clip-search 1.0:0.8:0.04 -t 1)
same() { for f in oscar.safetensors oscar.json README.md; do cmp -s "$1/$f" "$2/$f" || fail "$f differs: $3"; done; }

# 1. one process, then --ranks 2 and 3 (3 batches of 2 x 128 tokens each: shares on the block grid)
"$CAL" "${ARGS[@]}" -q -o "$T/ref" || fail "single-process run failed"
"$CAL" "${ARGS[@]}" --ranks 1 -q -o "$T/r1" || fail "--ranks 1 failed"   # a group of one thread
same "$T/ref" "$T/r1" "--ranks 1 vs one process"
"$CAL" "${ARGS[@]}" --ranks 2 -q -o "$T/r2" > "$T/r2.log" 2>&1 || fail "--ranks 2 failed: $(tail -5 "$T/r2.log")"
same "$T/ref" "$T/r2" "--ranks 2 vs one process"
[ -s "$T/r2.log" ] && fail "--ranks 2 with -q printed: $(head -5 "$T/r2.log")"
"$CAL" "${ARGS[@]}" --ranks 3 -v -o "$T/r3" > "$T/r3.log" 2>&1 || fail "--ranks 3 failed: $(tail -5 "$T/r3.log")"
same "$T/ref" "$T/r3" "--ranks 3 vs one process"
grep -q "(fit, clip search and gate split over 3 ranks)" "$T/r3.log" || fail "--ranks 3 did not split the finisher: $(tail -3 "$T/r3.log")"
[ "$(grep -c "^timing:" "$T/r3.log")" -eq 1 ] || fail "--ranks 3 -v: expected rank 0's timing line only"
"$CAL" "${ARGS[@]}" --ranks 2 --json -o "$T/rj" > "$T/rj.json" 2> "$T/rj.err" || fail "--ranks 2 --json failed"
[ "$(wc -l < "$T/rj.json")" -eq 1 ] || fail "--ranks 2 --json: $(wc -l < "$T/rj.json") lines on stdout"
[ -s "$T/rj.err" ] && fail "--ranks 2 --json printed on stderr: $(head -3 "$T/rj.err")"

# 2. --sign-search with per-head rotations
S=("${ARGS[@]}" --rotation-grouping head --sign-search --sign-passes 1)
"$CAL" "${S[@]}" -q -o "$T/sref" || fail "single-process --sign-search run failed"
"$CAL" "${S[@]}" --ranks 2 -q -o "$T/s2" || fail "--ranks 2 --sign-search failed"
same "$T/sref" "$T/s2" "--ranks 2 --sign-search --rotation-grouping head vs one process"

# 3. shares off the 128-token grid (seq 96, 8 batches over 3 ranks): the bytes of mpirun -np 3
U=(-m "$MODEL" -f "$CORPUS" --tokens 768 -c 96 -b 1 --heldout 1 --sink 16 --recent 32 --clip-search 1.0:0.8:0.04
   -t 1)
"$CAL" "${U[@]}" --ranks 3 -q -o "$T/u3" || fail "--ranks 3 (seq 96) failed"
if command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mpirun --oversubscribe --bind-to none -np 3 "$CAL" "${U[@]}" -q -o "$T/m3" > "$T/m3.log" 2>&1 ||
        fail "mpirun -np 3 (seq 96) failed: $(tail -5 "$T/m3.log")"
    same "$T/m3" "$T/u3" "--ranks 3 vs mpirun -np 3, shares off the block grid"
    mpirun --oversubscribe --bind-to none -np 2 "$CAL" "${ARGS[@]}" --ranks 2 -q -o "$T/both" > "$T/both.log" 2>&1 &&
        fail "--ranks under mpirun was taken"
    grep -q "one or the other" "$T/both.log" || fail "no clear error for --ranks under mpirun: $(tail -3 "$T/both.log")"
else
    echo "note: mpirun missing: --ranks 3 against mpirun -np 3 not compared"
fi

# 4. kill -9 after the first checkpoint, then --resume with --ranks 2: the one-process artifact
"$CAL" "${ARGS[@]}" --ranks 2 -o "$T/k" --checkpoint-every 1 > "$T/k.log" 2>&1 & pid=$!
for _ in $(seq 1 600); do [ -f "$T/k.ckpt" ] && break; sleep 0.05; done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[ -f "$T/k.ckpt" ] || fail "no checkpoint before the kill: $(tail -5 "$T/k.log")"
[ -e "$T/k/oscar.safetensors" ] && fail "the run ended before the kill: nothing to resume"
"$CAL" "${ARGS[@]}" --ranks 2 -o "$T/k" --checkpoint-every 1 --resume > "$T/kr.log" 2>&1 ||
    fail "--ranks 2 --resume failed: $(tail -5 "$T/kr.log")"
grep -q "resuming at layer" "$T/kr.log" || fail "--resume did not resume: $(grep -m3 . "$T/kr.log")"
same "$T/ref" "$T/k" "killed and resumed --ranks 2 vs one process"

# 5. refusals: more ranks than batches (each rank names itself), --save-activations
"$CAL" "${ARGS[@]}" -b 8 --ranks 3 -o "$T/many" > "$T/many.log" 2>&1 && fail "--ranks 3 with 2 batches succeeded"
grep -q "rank [0-9] of 3: .*3 ranks but only 2 calibration batches" "$T/many.log" ||
    fail "no clear error for too many ranks: $(tail -5 "$T/many.log")"
[ -e "$T/many" ] && fail "an artifact was written by a failed run"
"$CAL" "${ARGS[@]}" --ranks 2 --save-activations "$T/s.h5" -o "$T/sa" > "$T/sa.log" 2>&1 &&
    fail "--ranks 2 --save-activations was taken"
grep -q "not available with several ranks" "$T/sa.log" || fail "no clear refusal of --save-activations: $(cat "$T/sa.log")"
[ -e "$T/sa" ] || [ -e "$T/s.h5" ] && fail "a refused run wrote files"
echo "ok: --ranks 2/3 byte-identical to one process (finishing split, sign search), off-grid = mpirun -np 3, kill + resume identical, refusals clear"
