#!/usr/bin/env bash
# gpu-optr-pass.sh - on the GPU machine: --refine optr inside the CUDA layer-major pass (the
# training rows copied to the host by the capture hook, then each layer's OptR on the GPU:
# kernels/optr-device.cu; its agreement with the CPU in test-optr-device, its time in gpu-optr-bench.sh):
#   1. SmolLM2 (MODEL.gguf, CALIB.txt): in the pass == from the store the same pass wrote, byte for byte;
#   2. the Qwen3-8B shape, random weights on the device, 8192 tokens: the host rows line, the
#      refine time (timing line) and peak RSS, with one training sequence.
#
#   bash tests/gpu/gpu-optr-pass.sh MODEL.gguf CALIB.txt      (OUT: logs go there)
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
logdir=${OUT:-$root/build/gpu-optr-pass}
mkdir -p "$logdir"
. "$here/gpu-deps.sh"
make CUDA=1 WERROR=1 -j"${JOBS:-$(nproc)}" >"$logdir/build.log" 2>&1 || { tail -40 "$logdir/build.log"; exit 1; }
MODEL=${1:?MODEL.gguf}; CORPUS=${2:?CALIB.txt}
CAL=build/bin/oscar-calibrate
work=$(mktemp -d)
rc=0
fail() { echo "FAIL: $*"; rc=1; }

echo "== 1. SmolLM2 on cuda: in the pass vs the store"
A=(-m "$MODEL" --device cuda --sink 32 --recent 128 --tokens 4096 -c 512 --heldout 2 --refine optr --optr-train-seq 2)
$CAL "${A[@]}" -f "$CORPUS" --save-activations "$work/s.h5" -o "$work/a" 2>"$logdir/pass.log" || fail "pass: $(tail -3 "$logdir/pass.log")"
$CAL "${A[@]}" --from-activations "$work/s.h5" -o "$work/b" 2>"$logdir/store.log" || fail "store: $(tail -3 "$logdir/store.log")"
for f in oscar.safetensors oscar.json README.md; do
    cmp -s "$work/a/$f" "$work/b/$f" || fail "$f differs between the pass and the store on cuda"
done
grep -h "^timing\|keeps one layer" "$logdir/pass.log"

echo "== 2. Qwen3-8B shape, random weights on the device, 8192 tokens, one training sequence"
/usr/bin/time -v $CAL --device cuda --random-init qwen3-8b --tokens 8192 -c 2048 -b 2 --heldout 1 --clip 0.96,0.92 \
    --refine optr --optr-train-seq 1 -o "$work/q" 2>"$logdir/qwen3.log" || fail "qwen3-8b shape: $(tail -3 "$logdir/qwen3.log")"
grep -h "^timing\|keeps one layer\|Maximum resident\|peak device" "$logdir/qwen3.log"
rm -rf "$work"
[ $rc = 0 ] && echo "gpu-optr-pass: ok"
exit $rc
