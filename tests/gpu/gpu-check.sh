#!/usr/bin/env bash
# gpu-check.sh - the CUDA path on a GPU machine: build with CUDA=1, compare every
# kernel with the CPU reference (tests/gpu/test-kernels: head dims 64/128/256, GQA
# groups 1..16; the evaluator, the simulated cache, OptR: test-*-device), compute-sanitizer
# memcheck on small cases (D 64, 128, 256), then the benchmarks (bench-decode against every PyTorch SDPA backend and the measured
# read bandwidth). Ends with one PASS/FAIL line per check and the overall verdict.
#
#   bash tests/gpu/gpu-check.sh [--no-bench] [--seed N]
# Env: OSCAR_DEBS (folder of .debs for libraries pkg-config cannot find; default
# ../../../debs relative to this script), OUT (logs are copied there if set),
# JOBS (make -j, default nproc). Exit 0 only if the build and every check pass.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
bench=1
seed_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-bench) bench=0 ;;
        --seed) seed_args=(--seed "$2"); shift ;;
        *) echo "usage: $0 [--no-bench] [--seed N]" >&2; exit 2 ;;
    esac
    shift
done
logdir=${OUT:-$root/build/gpu-check}
mkdir -p "$logdir"
jobs=${JOBS:-$(nproc)}

# --- libraries the GPU image lacks (jansson, pcre2, utf8proc, cmocka) ---------
. "$here/gpu-deps.sh"
. "$here/memcheck.sh"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$logdir/nvidia-smi.txt"

# --- build ----------------------------------------------------------------------
echo "gpu-check: make CUDA=1 -j$jobs"
make CUDA=1 WERROR=1 -j"$jobs" >"$logdir/build.log" 2>&1 || { tail -40 "$logdir/build.log"; echo "gpu-check: BUILD FAILED"; exit 1; }
libs="$(pkg-config --libs hdf5 openblas lapacke libpcre2-8 jansson libutf8proc libcurl libzstd zlib libcrypto 2>/dev/null) -lm -lpthread"
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
for t in test-kernels test-verify-sim test-eval-device test-verify-kl-device test-fwd-kvsim test-optr-device \
         bench-verify-device; do
    cc -std=c11 -D_GNU_SOURCE -O2 -g -I. -Ilib -Wall -Wextra -Werror -fopenmp tests/gpu/$t.c build/liboscar.a \
        -o build/$t $libs -L"$cuda_home/lib64" -lcudart -lcublas -lstdc++ >>"$logdir/build.log" 2>&1 \
        || { tail -20 "$logdir/build.log"; echo "gpu-check: $t build failed"; exit 1; }
done
nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Ilib tests/gpu/bench-decode.cu build/liboscar.a \
    -o build/bench-decode $libs -lcublas -lgomp >>"$logdir/build.log" 2>&1 \
    || { tail -20 "$logdir/build.log"; echo "gpu-check: bench-decode build failed"; exit 1; }
# Registers and spills per kernel instance (entry name, then its stack/spill and register lines).
for k in decode-attention int2-quantize; do
    nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Ilib -Xptxas -v -c kernels/$k.cu \
        -o /tmp/oscar-ptxas.o 2>&1 | grep -E 'Compiling entry|registers|spill' | sed 's/ptxas info *: //'
done >"$logdir/ptxas.txt"

rc=0
summary=()
# result NAME STATUS: records one line of the closing summary (FAIL sets rc).
result() {
    summary+=("$(printf '%-4s %s' "$2" "$1")")
    [ "$2" = FAIL ] && rc=1
    echo "gpu-check: $1: $2"
}
# check NAME: runs build/NAME with the seed, log in $logdir/NAME.log.
check() {
    ./build/"$1" "${seed_args[@]}" 2>&1 | tee "$logdir/$1.log"
    local r=${PIPESTATUS[0]}
    [ "$r" -eq 0 ] && result "$1" PASS || result "$1 (exit $r, see $logdir/$1.log)" FAIL
}
echo "gpu-check: kernel registers / spills (ptxas):"
cat "$logdir/ptxas.txt"
# --- correctness ----------------------------------------------------------------------
echo "gpu-check: test-kernels"
check test-kernels

echo "gpu-check: test-eval-device (gate / clip-search layer errors on the GPU vs lib/verify)"
check test-eval-device
memcheck "$logdir/memcheck-eval.log" ./build/test-eval-device --small "${seed_args[@]}" \
    && result "memcheck test-eval-device --small" PASS \
    || result "memcheck test-eval-device --small (see $logdir/memcheck-eval.log)" FAIL
echo "gpu-check: test-verify-sim (oscar_verify_run --device cuda vs the CPU run)"
check test-verify-sim
echo "gpu-check: test-verify-kl-device (next-token KL against bf16 through the device paths)"
check test-verify-kl-device
echo "gpu-check: test-fwd-kvsim (the cache simulated inside the CUDA forward vs the CPU sim)"
check test-fwd-kvsim
memcheck "$logdir/memcheck-kvsim.log" ./build/test-fwd-kvsim --small "${seed_args[@]}" \
    && result "memcheck test-fwd-kvsim --small" PASS \
    || result "memcheck test-fwd-kvsim --small (see $logdir/memcheck-kvsim.log)" FAIL

echo "gpu-check: test-optr-device (OptR on the GPU vs the CPU reference: lockstep, control, free-running)"
check test-optr-device
memcheck "$logdir/memcheck-optr.log" ./build/test-optr-device --small "${seed_args[@]}" \
    && result "memcheck test-optr-device --small" PASS \
    || result "memcheck test-optr-device --small (see $logdir/memcheck-optr.log)" FAIL

echo "gpu-check: compute-sanitizer memcheck (small cases: D 64, 128, 256; GQA 3, 4, 16)"
memcheck "$logdir/memcheck.log" ./build/test-kernels --small "${seed_args[@]}" \
    && result "memcheck test-kernels --small" PASS \
    || result "memcheck test-kernels --small (see $logdir/memcheck.log)" FAIL

# --- benchmarks -------------------------------------------------------------------------
if [ "$bench" -eq 1 ]; then
    echo "gpu-check: PyTorch SDPA baselines (each backend forced)"
    if PYTHONUNBUFFERED=1 python3 tests/gpu/bench-sdpa.py --csv "$logdir/sdpa.csv" 2>&1 | tee "$logdir/sdpa.log"; then
        result "bench-sdpa (every SDPA backend)" PASS
    else   # the bench still runs, its SDPA columns n/a
        result "bench-sdpa (see $logdir/sdpa.log; SDPA columns will read n/a)" FAIL
    fi
    echo "gpu-check: bench-verify-device (quantized-cache perplexity throughput, Qwen3-8B shape)"
    ./build/bench-verify-device 2>&1 | tee "$logdir/bench-verify.md"
    [ "${PIPESTATUS[0]}" -eq 0 ] && result "bench-verify-device (table: $logdir/bench-verify.md)" PASS \
        || result "bench-verify-device" FAIL
    echo "gpu-check: bench-decode"
    # OSCAR_COMMIT names the source when set; otherwise HEAD, marked when a copied
    # working tree differs from it.
    commit=${OSCAR_COMMIT:-}
    if [ -z "$commit" ]; then
        commit=$(git rev-parse --short HEAD 2>/dev/null || cat .commit 2>/dev/null || echo unknown)
        git diff --quiet HEAD -- 2>/dev/null; [ $? -eq 1 ] && commit="$commit+modified"
    fi
    OSCAR_COMMIT=$commit \
        ./build/bench-decode --sdpa "$logdir/sdpa.csv" --csv "$logdir/bench.csv" 2>&1 | tee "$logdir/bench.md"
    [ "${PIPESTATUS[0]}" -eq 0 ] && result "bench-decode (table: $logdir/bench.md, CSV: $logdir/bench.csv)" PASS \
        || result "bench-decode" FAIL
fi
echo
echo "gpu-check summary (logs in $logdir):"
printf '  %s\n' "${summary[@]}"
echo "gpu-check: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
exit $rc
