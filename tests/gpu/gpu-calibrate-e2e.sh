#!/usr/bin/env bash
# gpu-calibrate-e2e.sh - on the GPU machine: oscar-calibrate's one engine (the layer-major
# pass) on CUDA, end to end (capture, fit, clips, gate, artifact written):
#   1. the Qwen3-8B shape with random weights made on the device and synthetic tokens,
#      30,720 tokens, with the clip search and with fixed clips (batch 15), and with batch 4
#      (less workspace): stage times, peak device memory and host RSS;
#   2. kill -9 during a checkpointed CUDA run, then --resume: byte-identical to an
#      uninterrupted run;
#   3. a model larger than the device: the Llama-3-70B shape (141 GB in bf16) on one H200;
#   4. a real checkpoint directory (random-init Qwen3-8B saved by transformers, bf16 shards,
#      the Qwen3 tokenizer): the time to read its files once, then the calibration, peak RSS;
#      then what streaming its layers costs over the model held resident (bench-layer-pass:
#      the same pass on the loaded model and on the file, accumulators identical);
#   5. CPU vs CUDA (fp32 precision) on a small random-init Qwen3 checkpoint: eigenvalues agree;
#   6. the .pt export of run 1 loaded by real torch (weights_only=True). The bf16 device
#      capture is recorded (oscar.capture_dtype).
#
#   bash tests/gpu/gpu-calibrate-e2e.sh      (OUT: logs and the --json summaries go there)
# Env: CORPUS (a text file for runs 4-5; default the carried Austen corpus), OSCAR_DEBS.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
logdir=${OUT:-$root/build/gpu-calibrate-e2e}
mkdir -p "$logdir"
. "$here/gpu-deps.sh"
make CUDA=1 WERROR=1 -j"${JOBS:-$(nproc)}" >"$logdir/build.log" 2>&1 || { tail -40 "$logdir/build.log"; exit 1; }
corpus=${CORPUS:-$root/.devcarry/corpora/austen/emma.txt}
rc=0
work=$(mktemp -d)
CAL=build/bin/oscar-calibrate
fail() { echo "FAIL: $*"; rc=1; }
show() { grep -E "timing:|peak|wrote|  mean|Elapsed|Maximum resident|layer-major pass on|resuming" "$1" | cut -c1-330; }

echo "== 1. Qwen3-8B shape, random weights on the device, 30720 tokens"
for mode in search fixed b4; do
    args=(-b 15); [ "$mode" = fixed ] && args=(-b 15 --clip 0.96,0.92); [ "$mode" = b4 ] && args=(-b 4 --clip 0.96,0.92)
    echo "-- clips/batch: $mode"
    /usr/bin/time -v timeout 300 $CAL --device cuda --random-init qwen3-8b --tokens 30720 -c 2048 --heldout 1 \
        "${args[@]}" -o "$work/q8b-$mode" --json -v >"$logdir/e2e-$mode.json" 2>"$logdir/e2e-$mode.err" \
        || fail "qwen3-8b $mode"
    show "$logdir/e2e-$mode.err"
    cut -c1-300 "$logdir/e2e-$mode.json"
    grep -q '"oscar.capture_dtype": "bfloat16"' "$work/q8b-$mode/oscar.json" \
        || fail "the bf16 device capture is not recorded as oscar.capture_dtype bfloat16"
done

echo "== 2. kill -9 during a checkpointed CUDA run, then --resume"
ck=(--device cuda --random-init qwen3-8b --tokens 8192 -c 2048 -b 2 --heldout 1 --clip 0.96,0.92 -q)
timeout 300 $CAL "${ck[@]}" -o "$work/whole" || fail "uninterrupted run"
$CAL "${ck[@]}" --checkpoint-every 20000 -o "$work/killed" 2>"$logdir/killed.err" &
pid=$!
for _ in $(seq 600); do [ -f "$work/killed.ckpt" ] && break; sleep 0.05; done
sleep 0.3; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
[ -f "$work/killed.ckpt" ] || fail "no checkpoint was written before the kill"
[ ! -e "$work/killed/oscar.safetensors" ] || fail "the run finished before the kill: nothing was resumed"
timeout 300 $CAL "${ck[@]}" --checkpoint-every 20000 --resume -o "$work/killed" -v 2>"$logdir/resume.err" || fail "--resume"
grep -E "resuming" "$logdir/resume.err" || fail "--resume did not resume from the checkpoint"
cmp "$work/whole/oscar.safetensors" "$work/killed/oscar.safetensors" && echo "ok: kill -9 + --resume is byte-identical" \
    || fail "the resumed artifact differs"

echo "== 3. larger than the device: Llama-3-70B shape (80 layers, 8192, ff 28672), 8192 tokens"
/usr/bin/time -v timeout 400 $CAL --device cuda --random-init llama3-70b --tokens 8192 -c 2048 -b 4 --heldout 1 \
    --clip 0.96,0.92 -o "$work/l70b" --json -v >"$logdir/l70b.json" 2>"$logdir/l70b.err" || fail "llama3-70b"
show "$logdir/l70b.err"

echo "== 4. a checkpoint directory: random-init Qwen3-8B saved by transformers"
python3 tests/gpu/make-hf-checkpoint.py "$work/q8b-hf" --shape qwen3-8b 2>&1 | tail -2 || fail "make-hf-checkpoint"
t0=$(date +%s.%N); cat "$work"/q8b-hf/*.safetensors >/dev/null; t1=$(date +%s.%N)
echo "reading the shards once (page cache warm from the save): $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s"
/usr/bin/time -v timeout 400 $CAL --device cuda -m "$work/q8b-hf" -f "$corpus" --tokens 30720 -c 2048 -b 15 \
    --heldout 1 -o "$work/q8b-dir" --json -v >"$logdir/dir.json" 2>"$logdir/dir.err" || fail "checkpoint directory run"
show "$logdir/dir.err"
timeout 500 build/bin/bench-layer-pass "$work/q8b-hf" "$corpus" --device cuda --tokens 30720 -c 2048 -b 15 \
    2>&1 | tee "$logdir/stream-vs-resident.txt" || fail "bench-layer-pass: streamed vs resident"
rm -rf "$work/q8b-hf"

echo "== 5. CPU vs CUDA fp32 on a small random-init Qwen3 checkpoint"
python3 tests/gpu/make-hf-checkpoint.py "$work/small" --shape small 2>&1 | tail -1 || fail "make-hf-checkpoint small"
sm=(-m "$work/small" -f "$corpus" --tokens 8192 -c 512 -b 4 --heldout 1 --sink 16 --recent 64 -q)
timeout 300 $CAL "${sm[@]}" -o "$work/small-cpu" || fail "small on the cpu"
timeout 300 $CAL "${sm[@]}" --device cuda --gpu-precision fp32 -o "$work/small-cuda" || fail "small on cuda fp32"
python3 tests/gpu/compare-artifacts.py "$work/small-cpu" "$work/small-cuda" --eig-rtol 1e-4 | tee "$logdir/cpu-cuda.txt" \
    || fail "CPU and CUDA fp32 eigenvalues differ"

echo "== 6. .pt export of run 1, loaded by torch (weights_only=True)"
if [ -f "$work/q8b-search/oscar.safetensors" ]; then
    # --target oscar: run 1 chooses its grouping per layer (auto, the default), so per-KV-head files when any
    # layer kept them (the SGLang fork's [D,D]-only loader would refuse those; test-calibrate-grouping checks it)
    build/bin/oscar-zoo export "$work/q8b-search" --format pt --target oscar --out "$work/pt" || rc=1
    python3 tests/oracle/check_pt_export.py "$work/q8b-search" "$work/pt" 2>&1 | tee "$logdir/pt-check.log" || rc=1
else
    fail "no artifact to export"
fi
rm -rf "$work"
[ "$rc" -eq 0 ] && echo "gpu-calibrate-e2e: PASS" || echo "gpu-calibrate-e2e: FAIL"
exit $rc
