#!/usr/bin/env bash
# gpu-forward-check.sh - the CUDA forward pass on a GPU machine: build with CUDA=1,
# the no-GPU unit test of the seam (now taking its CUDA branch), test-forward-gpu check
# (logits vs the CPU pass, device capture sums vs lib/stats, determinism, the MoE fixtures and their
# routing controls included; each model in
# the default bf16 mode and in the fp32 mode, oscar_fwd_params.fp32, the latter against
# the CPU pass on unrounded weights with 1e-4 bounds), a compute-sanitizer memcheck of
# the small cases (both modes), then the Qwen3-8B-shape calibration
# benchmark (oscar bare / capture pass 1 / pass 2, transformers sdpa bf16 baseline).
# Prints markdown tables; about 3-5 minutes of GPU time.
#
#   bash tests/gpu/gpu-forward-check.sh [--no-bench] [--no-hf] [--profile] [--seed N] [--seqs 15] [--len 2048]
# --profile: OSCAR_FWD_PROFILE=1 for the oscar bench (per-stage cudaEvent table, and the
# attention stage of the fp32 kernel for comparison); --no-hf skips the transformers baseline.
# Env: OSCAR_DEBS (folder of .debs for libraries pkg-config cannot find; default
# ../../../debs relative to this script), OUT (logs are copied there if set),
# JOBS (make -j, default nproc). Exit 0 only if the build and every check pass.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
bench=1
hf=1
profile=0
seed_args=()
seqs=15
len=2048
while [ $# -gt 0 ]; do
    case "$1" in
        --no-bench) bench=0 ;;
        --no-hf) hf=0 ;;
        --profile) profile=1 ;;
        --seed) seed_args=(--seed "$2"); shift ;;
        --seqs) seqs=$2; shift ;;
        --len) len=$2; shift ;;
        *) echo "usage: $0 [--no-bench] [--no-hf] [--profile] [--seed N] [--seqs N] [--len N]" >&2; exit 2 ;;
    esac
    shift
done
logdir=${OUT:-$root/build/gpu-forward-check}
mkdir -p "$logdir"
jobs=${JOBS:-$(nproc)}

# --- libraries the GPU image lacks (jansson, pcre2, utf8proc, cmocka): as gpu-check.sh ---
. "$here/gpu-deps.sh"
. "$here/memcheck.sh"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv 2>&1 | tee "$logdir/nvidia-smi.txt"

# --- build ----------------------------------------------------------------------------------
echo "gpu-forward-check: make CUDA=1 -j$jobs"
make CUDA=1 WERROR=1 -j"$jobs" >"$logdir/build.log" 2>&1 || { tail -40 "$logdir/build.log"; echo "gpu-forward-check: BUILD FAILED"; exit 1; }
libs="$(pkg-config --libs hdf5 openblas lapacke libpcre2-8 jansson libutf8proc libcurl libzstd zlib libcrypto 2>/dev/null) -lm -lpthread"
cflags="$(pkg-config --cflags hdf5 openblas 2>/dev/null)"
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
cc -std=c11 -D_GNU_SOURCE -O2 -g -I. -Ilib $cflags -Wall -Wextra -Werror -fopenmp tests/gpu/test-forward-gpu.c \
    build/liboscar.a -o build/test-forward-gpu $libs -L"$cuda_home/lib64" -lcudart -lcublas -lstdc++ \
    >>"$logdir/build.log" 2>&1 || { tail -20 "$logdir/build.log"; echo "gpu-forward-check: test-forward-gpu build failed"; exit 1; }
nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Ilib -DOSCAR_USE_CUDA -Xptxas -v -c kernels/fwd-kernels.cu \
    -o /tmp/oscar-fwd-ptxas.o 2>&1 | grep -E 'Compiling|registers|spill' >"$logdir/ptxas.txt"

rc=0
# --- correctness ---------------------------------------------------------------------------------
echo "gpu-forward-check: unit test of the seam (test-forward-backend)"
./build/tests/test-forward-backend 2>&1 | tee "$logdir/test-forward-backend.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gpu-forward-check: test-forward-backend FAILED"; rc=1; }

echo "gpu-forward-check: test-forward-gpu check"
timeout 300 ./build/test-forward-gpu check "${seed_args[@]}" 2>&1 | tee "$logdir/check.md"
r=${PIPESTATUS[0]}
[ "$r" -eq 0 ] || { echo "gpu-forward-check: check FAILED (exit $r)"; rc=1; }

echo "gpu-forward-check: compute-sanitizer memcheck (tiny models)"
memcheck "$logdir/memcheck.log" ./build/test-forward-gpu check --small "${seed_args[@]}" \
    || { echo "gpu-forward-check: memcheck FAILED"; rc=1; }

# --- benchmark ----------------------------------------------------------------------------------
if [ "$bench" -eq 1 ]; then
    if [ "$hf" -eq 1 ]; then
        echo "gpu-forward-check: transformers baseline (Qwen3-8B shape, $seqs x $len)"
        PYTHONUNBUFFERED=1 timeout 300 python3 tests/gpu/bench-prefill-hf.py --csv "$logdir/hf.csv" --seqs "$seqs" \
            --len "$len" 2>&1 | tee "$logdir/hf.log" || echo "gpu-forward-check: transformers baseline failed (continuing)"
    fi
    echo "gpu-forward-check: oscar bench"
    OSCAR_FWD_PROFILE=$profile timeout 300 ./build/test-forward-gpu bench --seqs "$seqs" --len "$len" --hf "$logdir/hf.csv" "${seed_args[@]}" 2>&1 \
        | tee "$logdir/bench.md"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gpu-forward-check: bench FAILED"; rc=1; }
fi
if [ "$bench" -eq 1 ]; then
    echo "gpu-forward-check: end-to-end calibration (the layer-major engine, random-init qwen3-8b)"
    timeout 180 ./build/bin/bench-calibrate-device --device cuda --random-init qwen3-8b --tokens $((seqs * len)) \
        --seq-len "$len" --batch "$seqs" --heldout 1 >"$logdir/e2e.md" 2>"$logdir/e2e.log"
    r=$?
    cat "$logdir/e2e.md"
    [ "$r" -eq 0 ] || { tail -5 "$logdir/e2e.log"; echo "gpu-forward-check: end-to-end calibration FAILED (exit $r)"; rc=1; }
fi
echo "gpu-forward-check: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
exit $rc
