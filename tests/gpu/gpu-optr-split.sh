#!/usr/bin/env bash
# gpu-optr-split.sh - on the GPU machine: --refine optr split over ranks by KV head with
# --device cuda (lib/calibrate/refine.c's shares, each rank's heads refined on the GPU),
# the random-init SmolLM2-135M shape (3 KV heads): mpirun -np 1, 2 and 3 (MPI engine, the
# ranks sharing the one GPU) against one process, --rotation-grouping layer; with fixed clips
# the artifact must be byte-identical (as tests/integration/test-mpi-calibrate-optr.sh asks
# of the CPU path), with the clip search after OptR too (split over the ranks as well).
# Prints each run's timing line; exit 0 only if every comparison holds.
#   bash tests/gpu/gpu-optr-split.sh      (OUT: logs go there; OSCAR_DEBS as gpu-deps.sh;
#   DEVICE=cpu runs the same comparisons on the CPU path, a check of the script itself)
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
logdir=${OUT:-build/gpu-optr-split}
mkdir -p "$logdir"
. "$here/gpu-deps.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make CUDA=1 MPI=1 WERROR=1 -j"${JOBS:-$(nproc)}" build/bin/oscar-calibrate >"$logdir/build.log" 2>&1 \
    || { tail -30 "$logdir/build.log"; echo "FAIL: build"; exit 1; }
CAL=build/bin/oscar-calibrate
rc=0
work=$(mktemp -d)
for clips in fixed search; do
    args=(--device "${DEVICE:-cuda}" --random-init smollm2-135m --tokens 8192 -c 512 -b 2 --heldout 1 --rotation-grouping layer
          --refine optr --optr-steps 10 --optr-train-seq 4 -v)
    [ $clips = fixed ] && args+=(--clip 0.96,0.92)
    timeout 300 $CAL "${args[@]}" -o "$work/one-$clips" 2>"$logdir/one-$clips.err" \
        || { echo "FAIL: one process ($clips): $(tail -2 "$logdir/one-$clips.err")"; rc=1; continue; }
    grep -h "^timing" "$logdir/one-$clips.err" | sed "s/^/one process ($clips): /"
    for np in 1 2 3; do
        if ! timeout 300 mpirun --oversubscribe -np $np $CAL "${args[@]}" -o "$work/np$np-$clips" \
                2>"$logdir/np$np-$clips.err"; then
            echo "FAIL: mpirun -np $np ($clips): $(tail -2 "$logdir/np$np-$clips.err")"; rc=1; continue
        fi
        grep -h "^timing" "$logdir/np$np-$clips.err" | head -1 | sed "s/^/np $np ($clips): /"
        if cmp -s "$work/one-$clips/oscar.safetensors" "$work/np$np-$clips/oscar.safetensors"; then
            echo "ok: np $np ($clips) byte-identical to one process"
        else
            echo "FAIL: np $np ($clips) differs from one process:"
            python3 "$here/compare-artifacts.py" "$work/one-$clips" "$work/np$np-$clips" --eig-rtol 1e-6 2>&1 | tail -4
            rc=1
        fi
    done
done
rm -rf "$work"
[ $rc = 0 ] && echo "gpu-optr-split: PASS" || echo "gpu-optr-split: FAIL"
exit $rc
