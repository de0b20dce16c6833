#!/usr/bin/env bash
# gpu-nccl-check.sh - on the GPU machine: data-parallel calibration on CUDA under mpirun, with
# the MPI engine and the NCCL engine (OSCAR_DP=nccl), on the random-init SmolLM2-135M shape
# (seconds per run):
#   1. one process --device cuda, mpirun -np 1 (MPI), mpirun -np 1 (NCCL): artifacts
#      byte-identical (cmp);
#   2. with >= 2 GPUs, np = 2, 4, 8 (up to the GPU count) with both engines (one GPU: np 2
#      sharing it, MPI engine only): eigenvalues within
#      the README's bound of the one-process artifact (compare-artifacts.py, 1e-6 of each
#      layer's largest), wall time, rank 0's bytes sent/received: a table on stdout;
#   3. the clip search and gate split over 2 ranks on CUDA (MPI engine): byte-identical to np 1
#      with one rotation per layer; per KV head and auto within 1e-6;
#   4. kill -9 of one rank mid-run (the same engines): non-zero exit, no artifact;
#   5. --ranks (the ranks as threads of one process): --ranks 2 byte-identical to mpirun -np 2
#      (grid split too), OSCAR_DP=nccl --ranks 1 (ncclCommInitAll) to one process, with >= 2 GPUs
#      OSCAR_DP=nccl --ranks N to mpirun -np N with NCCL; more NCCL ranks than GPUs refused.
# Builds with CUDA=1 MPI=1 NCCL=1 (NCCL_HOME: default torch's nvidia-nccl wheel); Open MPI from
# .devcarry/mpi-debs when the machine has none (gpu-deps.sh).
#   bash tests/gpu/gpu-nccl-check.sh      (OUT: logs go there)
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
logdir=${OUT:-$root/build/gpu-nccl-check}
mkdir -p "$logdir"
. "$here/gpu-deps.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make CUDA=1 MPI=1 NCCL=1 WERROR=1 -j"${JOBS:-$(nproc)}" build/bin/oscar-calibrate >"$logdir/build.log" 2>&1 \
    || { tail -40 "$logdir/build.log"; echo "FAIL: build"; exit 1; }
CAL=build/bin/oscar-calibrate
rc=0
work=$(mktemp -d)
fail() { echo "FAIL: $*"; rc=1; }
# 8 batches of 2 x 512 tokens: every rank of np <= 8 gets whole batches on the 128-token grid
args=(--device cuda --random-init smollm2-135m --tokens 8192 -c 512 -b 2 --heldout 1 --clip 0.96,0.92 -v)
mpi() { timeout 300 mpirun --oversubscribe -np "$1" "${@:2}"; }

echo "== 1. one process vs mpirun -np 1 (MPI) vs mpirun -np 1 (NCCL)"
timeout 300 $CAL "${args[@]}" -o "$work/single" 2>"$logdir/single.err" || fail "single process"
mpi 1 $CAL "${args[@]}" -o "$work/mpi1" 2>"$logdir/mpi1.err" || fail "mpirun -np 1, MPI engine"
OSCAR_DP=nccl mpi 1 -x OSCAR_DP $CAL "${args[@]}" -o "$work/nccl1" 2>"$logdir/nccl1.err" || fail "mpirun -np 1, NCCL engine"
grep -h "CUDA device" "$logdir"/nccl1.err | head -2
for a in mpi1 nccl1; do
    if cmp "$work/single/oscar.safetensors" "$work/$a/oscar.safetensors"; then echo "$a: oscar.safetensors byte-identical"
    else fail "$a: oscar.safetensors differs from the one-process artifact"; fi
done

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# One GPU: two ranks share it (dp-device.c: local rank mod GPU count), so the CUDA sums exchange
# still runs for real; MPI engine only, NCCL refuses two ranks on one device.
if [ "$ngpu" -lt 2 ]; then nps=(2); engines=(mpi); else nps=(2 4 8); engines=(mpi nccl); fi
echo "== 2. np >= 2 ($ngpu GPUs: np ${nps[*]}, engines ${engines[*]})"
printf '%-6s %-4s %8s %10s %12s  %s\n' engine np wall_s sent_MiB received_MiB eigenvalues
for np in "${nps[@]}"; do
    [ "$np" -le "$ngpu" ] || [ "$ngpu" -lt 2 ] || continue
    for eng in "${engines[@]}"; do
        t0=$(date +%s.%N)
        OSCAR_DP=$eng mpi "$np" -x OSCAR_DP $CAL "${args[@]}" -o "$work/$eng$np" 2>"$logdir/$eng$np.err" \
            || fail "$eng np=$np"
        t1=$(date +%s.%N)
        bytes=$(grep -ho "sent [0-9.]* MiB and received [0-9.]* MiB" "$logdir/$eng$np.err" | head -1 | awk '{print $2, $6}')
        if python3 "$here/compare-artifacts.py" "$work/single" "$work/$eng$np" --eig-rtol 1e-6 >"$logdir/$eng$np.cmp" 2>&1
        then eig=ok; else eig=FAIL; fail "$eng np=$np: eigenvalues beyond 1e-6 (see $eng$np.cmp)"; fi
        printf '%-6s %-4s %8.2f %10s %12s  %s\n' "$eng" "$np" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" ${bytes:-n/a n/a} "$eig"
        grep -h "eigenvalues:" "$logdir/$eng$np.cmp" | head -1
    done
done
echo "== 3. the clip search and gate split over ranks on CUDA: np 2 (MPI) byte-identical to np 1"
search=(--device cuda --random-init smollm2-135m --tokens 8192 -c 512 -b 2 --heldout 2 -v)
for g in layer head auto; do   # the grid split (auto: each candidate's), the gate split
    for np in 1 2; do
        OSCAR_DP=mpi mpi "$np" -x OSCAR_DP $CAL "${search[@]}" --rotation-grouping $g -o "$work/s-$g$np" \
            2>"$logdir/s-$g$np.err" || fail "search $g np=$np"
    done
    split=$(grep -ho 'finishing ([a-z, ]*split over 2 ranks)' "$logdir/s-${g}2.err" | head -1)
    if [ "$g" = layer ]; then   # identical sums: the split finishing must give the same bytes
        if cmp "$work/s-${g}1/oscar.safetensors" "$work/s-${g}2/oscar.safetensors"; then
            echo "search $g: np 2 byte-identical to np 1 ($split)"
        else fail "search $g: np 2 differs from np 1"; fi
    # per-KV-head fits are not byte-identical across rank counts on the H200 (measured: 4 of 90 V
    # rotations differ by <= 5e-10, eigenvalues and clips equal; whether the per-head sums or the
    # host's eigh differ is not traced), so they are compared within the README's bound
    elif python3 "$here/compare-artifacts.py" "$work/s-${g}1" "$work/s-${g}2" --eig-rtol 1e-6 >"$logdir/s-$g.cmp" 2>&1
    then echo "search $g: np 2 within 1e-6 of np 1 ($split; $(grep -h 'eigenvalues:' "$logdir/s-$g.cmp" | head -1))"
    else fail "search $g: np 2 beyond 1e-6 of np 1 (see s-$g.cmp)"; fi
done
echo "== 4. kill -9 of rank 1 mid-run"
for eng in "${engines[@]}"; do
    OSCAR_DP=$eng mpi 2 -x OSCAR_DP $CAL "${args[@]}" --tokens 2097152 -o "$work/kill-$eng" 2>"$logdir/kill-$eng.err" &
    job=$!
    victim=
    for _ in $(seq 300); do # rank 1: the oscar-calibrate of this run with OMPI_COMM_WORLD_RANK=1
        for p in $(pgrep -x oscar-calibrate); do
            grep -q "kill-$eng" "/proc/$p/cmdline" 2>/dev/null && tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null \
                | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
        done
        [ -n "$victim" ] && break; sleep 0.1
    done
    sleep 1; [ -n "$victim" ] && kill -9 "$victim"   # 2M tokens: the run lasts well past this
    wait $job; code=$?
    if [ "$code" -ne 0 ] && [ ! -e "$work/kill-$eng/oscar.safetensors" ]; then echo "$eng: killed rank -> exit $code, no artifact"
    else fail "$eng: killed rank gave exit $code (artifact: $(ls "$work/kill-$eng" 2>/dev/null))"; fi
done
echo "== 5. the ranks as threads of one process (--ranks): the bytes of mpirun with as many ranks"
timeout 300 $CAL "${args[@]}" --ranks 2 -o "$work/threads2" 2>"$logdir/threads2.err" || fail "--ranks 2 (threads)"
grep -h "CUDA device" "$logdir/threads2.err" | head -2
if cmp "$work/mpi2/oscar.safetensors" "$work/threads2/oscar.safetensors"; then echo "--ranks 2 == mpirun -np 2 (MPI)"
else fail "--ranks 2 differs from mpirun -np 2"; fi
timeout 300 $CAL "${search[@]}" --rotation-grouping layer --ranks 2 -o "$work/s-threads2" 2>"$logdir/s-threads2.err" \
    || fail "--ranks 2 search"
if cmp "$work/s-layer2/oscar.safetensors" "$work/s-threads2/oscar.safetensors"; then
    echo "search layer: --ranks 2 == mpirun -np 2 (the finishing split on CUDA in one process)"
else fail "search layer: --ranks 2 differs from mpirun -np 2"; fi
# --ranks 1 is a group of one thread (not the one-process path): ncclCommInitAll over GPU 0
OSCAR_DP=nccl timeout 300 $CAL "${args[@]}" --ranks 1 -v -o "$work/nccl-threads1" 2>"$logdir/nccl-threads1.err" \
    || fail "OSCAR_DP=nccl --ranks 1"
if cmp "$work/single/oscar.safetensors" "$work/nccl-threads1/oscar.safetensors"; then
    grep -q "(nccl): CUDA device" "$logdir/nccl-threads1.err" || fail "OSCAR_DP=nccl --ranks 1 did not use the NCCL engine"
    echo "OSCAR_DP=nccl --ranks 1 (ncclCommInitAll) == one process"
else fail "OSCAR_DP=nccl --ranks 1 differs from one process"; fi
for np in 2 4 8; do   # several GPUs: NCCL's in-process ranks against its mpirun ranks
    [ "$np" -le "$ngpu" ] || continue
    t0=$(date +%s.%N)
    OSCAR_DP=nccl timeout 300 $CAL "${args[@]}" --ranks $np -o "$work/nccl-threads$np" 2>"$logdir/nccl-threads$np.err" \
        || fail "OSCAR_DP=nccl --ranks $np"
    t1=$(date +%s.%N)
    if cmp "$work/nccl$np/oscar.safetensors" "$work/nccl-threads$np/oscar.safetensors"; then
        echo "OSCAR_DP=nccl --ranks $np == mpirun -np $np (NCCL), $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
    else fail "OSCAR_DP=nccl --ranks $np differs from mpirun -np $np"; fi
done
OSCAR_DP=nccl timeout 60 $CAL "${args[@]}" --ranks $((ngpu + 1)) -o "$work/nccl-over" 2>"$logdir/nccl-over.err" \
    && fail "OSCAR_DP=nccl --ranks $((ngpu + 1)) on $ngpu GPUs was taken"
grep -h "GPUs" "$logdir/nccl-over.err" | head -1
rm -rf "$work"
[ $rc -eq 0 ] && echo "gpu-nccl-check: PASS" || echo "gpu-nccl-check: FAIL"
exit $rc
