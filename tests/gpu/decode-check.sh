#!/usr/bin/env bash
# decode-check.sh - the decode kernels alone, for kernel work on the GPU machine:
# builds bench-decode from the kernel sources (no library build), prints the SASS
# instruction mix of the INT2 split kernel's main loop, times the shapes asked for,
# and optionally profiles them with ncu. An older decode-attention.cu (--against F)
# is built into a second bench and timed in the same run, so a change is measured
# as a ratio against the kernel it replaces. --test first builds the library and
# runs test-kernels' attention checks against the CPU reference (and memcheck on its
# small cases); the whole suite stays gpu-check.sh's job.
#
#   bash tests/gpu/decode-check.sh [--test] [--against old-decode-attention.cu] [--ncu] [--sdpa]
#                                  [--reps N] [bench-decode options: --head-dim D --only L:B ...]
# Env: OUT (the logs go there; default build/decode-check), OSCAR_DEBS (see gpu-deps.sh). Exit 1 if a build or
# a test fails.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
against="" ncu=0 sdpa=0 test=0 bench_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --against) against=$2; shift ;;
        --ncu) ncu=1 ;;
        --test) test=1 ;;
        --sdpa) sdpa=1 ;;
        *) bench_args+=("$1") ;;
    esac
    shift
done
logdir=${OUT:-$root/build/decode-check}
mkdir -p "$logdir" build/decode-check
arch="-gencode arch=compute_90,code=sm_90"
nv="nvcc -O3 -std=c++17 $arch -I. -Ilib"

# build NAME KERNEL_SOURCE: build/decode-check/NAME from the bench and that decode kernel.
build() {
    local dir=build/decode-check/$1
    mkdir -p "$dir"
    for f in lib/quant/*.c lib/util/error.c; do
        [ "$(basename "$f")" = oscar-omni.c ] && continue   # needs the FWHT (lib/rotation); the bench does not
        cc -std=c11 -D_GNU_SOURCE -O2 -I. -Ilib -c "$f" -o "$dir/$(basename "$f" .c).o" || return 1
    done
    $nv -Xptxas -v -c "$2" -o "$dir/decode-attention.o" 2>"$dir/ptxas.txt" || { cat "$dir/ptxas.txt"; return 1; }
    $nv -c kernels/int2-quantize.cu -o "$dir/int2-quantize.o" && $nv -c kernels/cuda-common.cu -o "$dir/cuda-common.o" \
        && $nv tests/gpu/bench-decode.cu "$dir"/*.o -o "$dir/bench-decode" -lcublas -lgomp -lm
}

# sass_mix NAME: SASS opcode counts of the INT2 split kernel's main loop (D 128, one head tile, each
# metadata dtype): the backward branch whose range holds the most HMMAs (one 16-token tile per warp;
# the rarely taken rescale branch inside it included).
sass_mix() {
    local dir=build/decode-check/$1
    cuobjdump -sass "$dir/decode-attention.o" > "$dir/all.sass" || return 1
    python3 - "$dir/all.sass" <<'EOF'
import re, sys, collections
text = open(sys.argv[1]).read()
for f in re.split(r"\n\s+Function : ", text)[1:]:
    name = f.split("\n", 1)[0].strip()
    if "decode_split_int2_kernel" not in name or "ILi128ELi1E" not in name:
        continue
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", f)]
    best = None
    for a, t in ins:
        m = re.search(r"BRA[^0-9x]*(0x[0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a:
            lo = int(m.group(1), 16)
            n = sum(1 for x, y in ins if lo <= x <= a and "HMMA" in y)
            if best is None or n > best[0]:
                best = (n, lo, a)
    if not best:
        print(name, ": no loop found")
        continue
    body = [t for a, t in ins if best[1] <= a <= best[2]]
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in body)
    print(f"{name}: main loop {len(body)} SASS instructions")
    print("  " + ", ".join(f"{k} {v}" for k, v in ops.most_common()))
EOF
}

if [ "$test" -eq 1 ]; then
    . "$here/gpu-deps.sh"
    . "$here/memcheck.sh"
    echo "decode-check: make CUDA=1 build/liboscar.a, test-kernels -o attn"
    make CUDA=1 WERROR=1 -j"$(nproc)" build/liboscar.a >"$logdir/build.log" 2>&1 || { tail -30 "$logdir/build.log"; exit 1; }
    libs="$(pkg-config --libs hdf5 openblas lapacke libpcre2-8 jansson libutf8proc libcurl libzstd zlib libcrypto 2>/dev/null) -lm -lpthread"
    cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
    cc -std=c11 -D_GNU_SOURCE -O2 -g -I. -Ilib -Wall -Wextra -Werror -fopenmp tests/gpu/test-kernels.c build/liboscar.a \
        -o build/test-kernels $libs -L"$cuda_home/lib64" -lcudart -lcublas -lstdc++ >>"$logdir/build.log" 2>&1 \
        || { tail -20 "$logdir/build.log"; exit 1; }
    ./build/test-kernels -o attn 2>&1 | tee "$logdir/test-kernels.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "decode-check: test-kernels FAILED"; exit 1; }
    memcheck "$logdir/memcheck.log" ./build/test-kernels -o attn --small || { echo "decode-check: memcheck FAILED"; exit 1; }
fi
echo "decode-check: building the bench with kernels/decode-attention.cu"
build new kernels/decode-attention.cu || { echo "decode-check: BUILD FAILED"; exit 1; }
grep -E 'int2_kernel|registers|spill' build/decode-check/new/ptxas.txt | sed 's/ptxas info *: //' > "$logdir/ptxas-new.txt"
sass_mix new | tee "$logdir/sass-new.txt"
if [ -n "$against" ]; then
    echo "decode-check: building the bench with $against"
    build old "$against" || { echo "decode-check: BUILD FAILED (old)"; exit 1; }
    sass_mix old | tee "$logdir/sass-old.txt"
fi
sd=()
if [ "$sdpa" -eq 1 ]; then
    sargs=()
    for ((i = 0; i < ${#bench_args[@]}; i++)); do
        case "${bench_args[$i]}" in --head-dim|--hq|--hkv|--only|--reps) sargs+=("${bench_args[$i]}" "${bench_args[$((i + 1))]}") ;; esac
    done
    python3 tests/gpu/bench-sdpa.py --csv "$logdir/sdpa.csv" "${sargs[@]}" > "$logdir/sdpa.log" 2>&1 && sd=(--sdpa "$logdir/sdpa.csv")
    tail -14 "$logdir/sdpa.log"
fi
for v in new old; do
    [ -x build/decode-check/$v/bench-decode ] && { [ $v = new ] || [ -n "$against" ]; } || continue
    echo "decode-check: bench ($v)"
    ./build/decode-check/$v/bench-decode --no-write "${sd[@]}" "${bench_args[@]}" 2>&1 | tee "$logdir/bench-$v.md"
done
if [ "$ncu" -eq 1 ]; then
    for v in new old; do
        [ -x build/decode-check/$v/bench-decode ] && { [ $v = new ] || [ -n "$against" ]; } || continue
        echo "decode-check: ncu ($v)"
        ncu --kernel-name regex:decode_ --launch-skip 9 --launch-count 3 --section SpeedOfLight \
            --section SchedulerStats --section WarpStateStats --section Occupancy --section InstructionStats \
            ./build/decode-check/$v/bench-decode --no-write --reps 1 "${bench_args[@]}" > "$logdir/ncu-$v.txt" 2>&1
        grep -E 'decode_|Duration|Executed Instructions  |Issue Slots Busy|Achieved Active Warps|Memory Throughput|Registers|No Eligible|Stall' \
            "$logdir/ncu-$v.txt" | head -60
    done
fi
echo "decode-check: done (logs in $logdir)"
