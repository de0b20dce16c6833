#!/usr/bin/env bash
# gpu-optr-bench.sh - on the GPU machine: OptR's refine stage on CUDA against the CPU path, the
# Qwen3-8B shape (36 layers x 8 KV heads, head_dim 128):
#   1. oscar-calibrate --device cuda --random-init qwen3-8b --tokens 30720 -c 2048 -b 15 --heldout 1
#      --clip 0.96,0.92 --refine optr -v: every layer refined on the GPU (15 training sequences of
#      2048 rows, 80 + 80 Adam steps, keys centred), its gate on the GPU; the timing lines (refine),
#      each layer's device breakdown, peak device memory and host RSS;
#   2. build/test-optr-device --bench: one layer of that shape on the GPU (80 + 80 steps) and on
#      the CPU for --cpu-steps steps per phase, extrapolated to 80 (the CPU path would take far
#      longer than this machine's lease for 36 layers), and 2 lockstep steps per phase.
#
#   bash tests/gpu/gpu-optr-bench.sh [--cpu-steps N]     (OUT: logs go there)
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
cpu_steps=8
[ "${1:-}" = --cpu-steps ] && cpu_steps=$2
logdir=${OUT:-$root/build/gpu-optr-bench}
mkdir -p "$logdir"
. "$here/gpu-deps.sh"
make CUDA=1 WERROR=1 -j"${JOBS:-$(nproc)}" build/liboscar.a build/bin/oscar-calibrate >"$logdir/build.log" 2>&1 \
    || { tail -40 "$logdir/build.log"; exit 1; }
libs="$(pkg-config --libs hdf5 openblas lapacke libpcre2-8 jansson libutf8proc libcurl libzstd zlib libcrypto 2>/dev/null) -lm -lpthread"
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
cc -std=c11 -D_GNU_SOURCE -O2 -g -I. -Ilib -Wall -Wextra -Werror -fopenmp tests/gpu/test-optr-device.c build/liboscar.a \
    -o build/test-optr-device $libs -L"$cuda_home/lib64" -lcudart -lcublas -lstdc++ >>"$logdir/build.log" 2>&1 \
    || { tail -20 "$logdir/build.log"; exit 1; }
rc=0
work=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

echo "== 1. oscar-calibrate --device cuda --refine optr, Qwen3-8B shape, 30720 tokens"
/usr/bin/time -v timeout 300 build/bin/oscar-calibrate --device cuda --random-init qwen3-8b --tokens 30720 -c 2048 \
    -b 15 --heldout 1 --clip 0.96,0.92 --refine optr -o "$work/q8b" -v >"$logdir/calibrate.out" 2>"$logdir/calibrate.err" \
    || { echo "FAIL: oscar-calibrate: $(tail -3 "$logdir/calibrate.err")"; rc=1; }
grep -E "^timing|keeps one layer|peak|Elapsed|Maximum resident|cuda optr layer (0|17|35):|optr layer (0|35):" \
    "$logdir/calibrate.err" | cut -c1-300

echo "== 2. one layer of the shape: GPU (80 + 80 steps) and CPU ($cpu_steps + $cpu_steps steps, extrapolated)"
./build/test-optr-device --bench --cpu-steps "$cpu_steps" 2>&1 | tee "$logdir/bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
rm -rf "$work"
[ $rc = 0 ] && echo "gpu-optr-bench: ok" || echo "gpu-optr-bench: FAIL"
exit $rc
