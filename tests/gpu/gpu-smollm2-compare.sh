#!/usr/bin/env bash
# gpu-smollm2-compare.sh - on the GPU machine, the real SmolLM2-135M through both
# devices (issue 8's agreement check):
#  1. capture covariances of the CUDA forward vs the CPU forward on the same 3 x 512
#     corpus tokens (test-forward-gpu check --model: the fp32 mode on the model's own
#     weights, the bf16 mode against the CPU pass on bf16-rounded weights);
#  2. oscar-calibrate --device cpu, --device cuda and --device cuda --gpu-precision fp32
#     on the same corpus (both passes, fit, clip search, gate; gate table and timings);
#  3. oscar-verify of both artifacts on held-out text: perplexity per method, and the
#     relative difference between the two artifacts (target <= 1 %);
#  4. oscar-verify --device cuda (GPU forward pass, bf16 and fp32) of the unquantized model vs the CPU pass.
#
#   bash tests/gpu/gpu-smollm2-compare.sh MODEL.gguf CALIB.txt HELDOUT.txt [TOKENS]
# Env: OSCAR_DEBS, OUT (logs), JOBS. Exit 0 only if every step ran and the perplexities
# of the fp32-GPU and CPU artifacts agree within 1 % (the bf16 GPU path is reported).
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
model=$(realpath "$1"); calib=$(realpath "$2"); held=$(realpath "$3"); tokens=${4:-8192}
cd "$root"
logdir=${OUT:-$root/build/gpu-smollm2-compare}
mkdir -p "$logdir"
. "$here/gpu-deps.sh"
make CUDA=1 WERROR=1 -j"${JOBS:-$(nproc)}" >"$logdir/build.log" 2>&1 || { tail -40 "$logdir/build.log"; exit 1; }
libs="$(pkg-config --libs hdf5 openblas lapacke libpcre2-8 jansson libutf8proc libcurl libzstd zlib libcrypto 2>/dev/null) -lm -lpthread"
cflags="$(pkg-config --cflags hdf5 openblas 2>/dev/null)"
cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
cc -std=c11 -D_GNU_SOURCE -O2 -g -I. -Ilib $cflags -Wall -Wextra -Werror -fopenmp tests/gpu/test-forward-gpu.c \
    build/liboscar.a -o build/test-forward-gpu $libs -L"$cuda_home/lib64" -lcudart -lcublas -lstdc++ \
    >>"$logdir/build.log" 2>&1 || { tail -20 "$logdir/build.log"; exit 1; }
rc=0
work=$(mktemp -d)
echo "== 1. covariances: CUDA forward vs CPU forward, SmolLM2-135M, 3 x 512 tokens of $(basename "$calib")"
timeout 300 ./build/test-forward-gpu check --small --seed 1 --model "$model" --corpus "$calib" 2>&1 | tee "$logdir/cov.md"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
runs="cpu cuda cuda-fp32"
for run in $runs; do
    case $run in
        cpu) args=(--device cpu) ;;
        cuda) args=(--device cuda) ;;
        cuda-fp32) args=(--device cuda --gpu-precision fp32) ;;
    esac
    echo "== 2. oscar-calibrate ${args[*]} ($tokens tokens, seq 512, 2 held-out sequences)"
    /usr/bin/time -f "wall %e s, max RSS %M KiB" timeout 600 build/bin/oscar-calibrate --model "$model" \
        --corpus "$calib" --tokens "$tokens" -c 512 -b 8 --heldout 2 "${args[@]}" -o "$work/$run" --json -v \
        >"$logdir/calib-$run.json" 2>"$logdir/calib-$run.err" || rc=1
    grep -E "^ +mean|timing:|wall " "$logdir/calib-$run.err"
done
for dev in $runs; do
    echo "== 3. oscar-verify with the $dev artifact on $(basename "$held")"
    timeout 600 build/bin/oscar-verify --model "$model" --rotations "$work/$dev" --corpus "$held" -c 512 \
        --tokens 2048 --methods bf16,hadamard,oscar,oscar-fixed --json >"$logdir/verify-$dev.json" \
        2>"$logdir/verify-$dev.err" || { tail -3 "$logdir/verify-$dev.err"; rc=1; }
done
echo "== 4. oscar-verify bf16 perplexity: GPU forward pass (--device cuda, bf16 and fp32) vs CPU"
for prec in bf16 fp32; do
    timeout 300 build/bin/oscar-verify --model "$model" --corpus "$held" -c 512 --tokens 2048 --methods bf16 \
        --device cuda --gpu-precision $prec --json >"$logdir/verify-model-gpu-$prec.json" \
        2>"$logdir/verify-model-gpu-$prec.err" || { tail -3 "$logdir/verify-model-gpu-$prec.err"; rc=1; }
done
python3 - "$logdir" <<'PY' || rc=1
import json, sys
d = sys.argv[1]
runs = ("cpu", "cuda", "cuda-fp32")
v = {r: {m["name"]: m["ppl"] for m in json.load(open(f"{d}/verify-{r}.json"))["methods"]} for r in runs}
worst = {"cuda": 0.0, "cuda-fp32": 0.0}
print("| method | PPL, cpu artifact | PPL, cuda (bf16) artifact | rel. diff | PPL, cuda fp32 artifact | rel. diff |")
print("|---|---|---|---|---|---|")
for name, p in v["cpu"].items():
    row = f"| {name} | {p:.4f} |"
    for r in ("cuda", "cuda-fp32"):
        q = v[r][name]
        worst[r] = max(worst[r], abs(q - p) / p)
        row += f" {q:.4f} | {abs(q - p) / p:.2e} |"
    print(row)
print(f"max relative PPL difference vs the cpu artifact: bf16 GPU path {worst['cuda']:.2e}, "
      f"fp32 GPU path {worst['cuda-fp32']:.2e} (target <= 1e-2, checked on the fp32 path)")
c = v["cpu"]["bf16"]
for prec in ("bf16", "fp32"):
    g = {m["name"]: m["ppl"] for m in json.load(open(f"{d}/verify-model-gpu-{prec}.json"))["methods"]}["bf16"]
    print(f"unquantized model PPL: CPU forward {c:.4f}, GPU forward ({prec}) {g:.4f} (rel. diff {abs(g - c) / c:.2e})")
sys.exit(0 if worst["cuda-fp32"] <= 1e-2 else 1)
PY
rm -rf "$work"
[ "$rc" -eq 0 ] && echo "gpu-smollm2-compare: PASS" || echo "gpu-smollm2-compare: FAIL"
exit $rc
