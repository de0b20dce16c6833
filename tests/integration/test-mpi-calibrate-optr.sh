#!/usr/bin/env bash
# test-mpi-calibrate-optr.sh - --refine optr under mpirun: OptR is split over the ranks by KV head
# (refine.c, optr-route.h: rank r refines heads floor(r·Hkv/N) .. floor((r+1)·Hkv/N)-1; the training
# rows go from the ranks that computed them to the ranks refining their heads), so with SmolLM2's 3
# KV heads np 2 refines 1 + 2 heads and np 3 one head per rank:
#  1. without centring, training sequences in rank 0's batches: np 2 == one process, byte for byte;
#  2. with centring (the key mean's block sums of every rank gathered on rank 0): np 2 and np 3 == one
#     process, byte for byte, also with the clip search after OptR split over the ranks (the key
#     mean broadcast with the rotations);
#  3. training sequences on ranks other than 0 (5 and 6 of 8 sequences: rank 0 holds 4 at np 2,
#     2 or 4 at np 3), without and with centring, with the clip search: np 2 and np 3 == one
#     process, byte for byte (the rows routed in the single-process order).
# Step 1 fails when the ranks' parts are put together in the wrong order (checked by placing each
# rank's share of osc_dp_gather_shares as if the ranks arrived in reverse: "oscar.safetensors
# differs: mpirun -np 2 vs one process").
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

# 2. centred: np 2 and np 3 == one process (rank 0 holds 2 sequences at np 3: train on those)
"$CAL" "${ARGS[@]}" --optr-train-seq 2 -o "$T/cref" || fail "single-process centred run failed"
for np in 2 3; do
    "${MPIRUN[@]}" -np $np "$CAL" "${ARGS[@]}" --optr-train-seq 2 -o "$T/c$np" > "$T/c$np.log" 2>&1 \
        || fail "centred np $np failed: $(tail -5 "$T/c$np.log")"
    for f in oscar.safetensors oscar.json README.md; do
        cmp -s "$T/cref/$f" "$T/c$np/$f" || fail "$f differs: centred mpirun -np $np vs one process"
    done
done
# ... and with the clip search after OptR split over the ranks (its candidates keyed by the key mean rank 0 sent)
S=(-m "$MODEL" -f "$CORPUS" --tokens 512 -c 64 -b 2 --heldout 1 --sink 8 --recent 16 --clip-search 1.0:0.9:0.05 -t 1 -q
   --refine optr --optr-steps 2 --optr-train-seq 2)
"$CAL" "${S[@]}" -o "$T/sref" || fail "single-process centred search run failed"
"${MPIRUN[@]}" -np 2 "$CAL" "${S[@]}" -o "$T/s2" > "$T/s2.log" 2>&1 || fail "centred search np 2 failed: $(tail -5 "$T/s2.log")"
for f in oscar.safetensors oscar.json README.md; do
    cmp -s "$T/sref/$f" "$T/s2/$f" || fail "$f differs: centred search mpirun -np 2 vs one process"
done

# 3. training sequences past rank 0's batches: their rows come from ranks 1 and 2
same() { for f in oscar.safetensors oscar.json README.md; do cmp -s "$1/$f" "$2/$f" || fail "$f differs: $3"; done; }
"$CAL" "${ARGS[@]}" --no-optr-center --optr-train-seq 5 -o "$T/fref" || fail "single-process --optr-train-seq 5 failed"
"$CAL" "${S[@]}" --optr-train-seq 6 -o "$T/gref" || fail "single-process centred --optr-train-seq 6 failed"
for np in 2 3; do
    "${MPIRUN[@]}" -np $np "$CAL" "${ARGS[@]/#-q/-v}" --no-optr-center --optr-train-seq 5 -o "$T/f$np" > "$T/f$np.log" 2>&1 \
        || fail "np $np --optr-train-seq 5 failed: $(tail -5 "$T/f$np.log")"
    same "$T/fref" "$T/f$np" "mpirun -np $np --optr-train-seq 5 (rank 1's sequences) vs one process"
    grep -q "data-parallel OptR: rank 0 sent" "$T/f$np.log" || fail "np $np: no OptR bytes at -v: $(tail -3 "$T/f$np.log")"
    "${MPIRUN[@]}" -np $np "$CAL" "${S[@]}" --optr-train-seq 6 -o "$T/g$np" > "$T/g$np.log" 2>&1 \
        || fail "centred np $np --optr-train-seq 6 failed: $(tail -5 "$T/g$np.log")"
    same "$T/gref" "$T/g$np" "centred mpirun -np $np --optr-train-seq 6 with the clip search vs one process"
done
echo "ok: OptR split by KV head, np 2/3 byte-identical (rank 0's and other ranks' training rows, centred or not)"
