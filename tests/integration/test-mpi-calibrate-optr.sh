#!/usr/bin/env bash
# test-mpi-calibrate-optr.sh - --refine optr under mpirun: OptR runs on rank 0 with the rows rank 0
# computed, so
#  1. without centring, training sequences in rank 0's batches: np 2 == one process, byte for byte;
#  2. with centring (the key mean would sum every rank's rows): refused, naming --no-optr-center;
#  3. training sequences past rank 0's batches: refused, naming --optr-train-seq.
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
command -v mpirun > /dev/null || skip "mpirun missing (Debian: openmpi-bin libopenmpi-dev)"
CAL=$B/bin/oscar-calibrate
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
# 4 batches of 2 x 64 tokens: rank 0 runs batches 0-1 (sequences 0-3), on the 128-token block grid
ARGS=(-m "$MODEL" -f "$CORPUS" --tokens 512 -c 64 -b 2 --heldout 1 --sink 8 --recent 16 --clip 0.96,0.92 -t 1 -q
      --refine optr --optr-steps 2)

# 1. np 2 == one process
"$CAL" "${ARGS[@]}" --no-optr-center --optr-train-seq 3 -o "$T/ref" || fail "single-process run failed"
"${MPIRUN[@]}" -np 2 "$CAL" "${ARGS[@]}" --no-optr-center --optr-train-seq 3 -o "$T/np2" > "$T/np2.log" 2>&1 \
    || fail "np 2 failed: $(tail -5 "$T/np2.log")"
for f in oscar.safetensors oscar.json README.md; do
    cmp -s "$T/ref/$f" "$T/np2/$f" || fail "$f differs: mpirun -np 2 vs one process"
done

# 2. centring refused
"${MPIRUN[@]}" -np 2 "$CAL" "${ARGS[@]}" --optr-train-seq 3 -o "$T/c" > "$T/c.log" 2>&1 && fail "centred np 2 ran"
grep -q "no-optr-center" "$T/c.log" && [ ! -e "$T/c" ] || fail "centred np 2: $(tail -5 "$T/c.log")"

# 3. training sequences on rank 1
"${MPIRUN[@]}" -np 2 "$CAL" "${ARGS[@]}" --no-optr-center --optr-train-seq 5 -o "$T/s" > "$T/s.log" 2>&1 \
    && fail "np 2 with rank 1's training sequences ran"
grep -q "optr-train-seq" "$T/s.log" && [ ! -e "$T/s" ] || fail "np 2 past rank 0: $(tail -5 "$T/s.log")"
echo "ok"
