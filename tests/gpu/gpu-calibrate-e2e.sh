#!/usr/bin/env bash
# gpu-calibrate-e2e.sh - on the GPU machine: the whole oscar-calibrate pipeline on the
# device (both capture passes, fit, clips, gate, artifact written) for the Qwen3-8B
# shape with random weights and synthetic tokens, timed stage by stage, with the clip
# search (default) and with fixed clips; then the .pt
# export loaded by real torch with weights_only=True (issue 6's engine check). The
# artifact must record the bf16 capture (oscar.capture_dtype).
#
#   bash tests/gpu/gpu-calibrate-e2e.sh      (OUT: logs and the --json summaries go there)
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
logdir=${OUT:-$root/build/gpu-calibrate-e2e}
mkdir -p "$logdir"
. "$here/gpu-deps.sh"
make CUDA=1 WERROR=1 -j"${JOBS:-$(nproc)}" >"$logdir/build.log" 2>&1 || { tail -40 "$logdir/build.log"; exit 1; }
rc=0
work=$(mktemp -d)

for mode in search fixed; do
    clip=(); [ "$mode" = fixed ] && clip=(--clip 0.96,0.92)
    echo "== oscar-calibrate --device cuda --random-init qwen3-8b, 30720 tokens, clips: $mode"
    /usr/bin/time -v timeout 300 build/bin/oscar-calibrate --device cuda --random-init qwen3-8b --tokens 30720 \
        -c 2048 -b 15 --heldout 1 "${clip[@]}" -o "$work/q8b-$mode" --json -v \
        >"$logdir/e2e-$mode.json" 2>"$logdir/e2e-$mode.err" || rc=1
    grep -E "timing:|peak|wrote|mean|Elapsed|Maximum resident|held-out:|layer eval|GiB" "$logdir/e2e-$mode.err"
    cut -c1-400 "$logdir/e2e-$mode.json"
    grep -q '"oscar.capture_dtype": "bfloat16"' "$work/q8b-$mode/oscar.json" \
        || { echo "FAIL: the bf16 device capture is not recorded as oscar.capture_dtype bfloat16"; rc=1; }
done

echo "== .pt export of that artifact, loaded by torch (weights_only=True)"
if [ -f "$work/q8b-search/oscar.safetensors" ]; then
    build/bin/oscar-zoo export "$work/q8b-search" --format pt --out "$work/pt" || rc=1
    python3 tests/oracle/check_pt_export.py "$work/q8b-search" "$work/pt" 2>&1 | tee "$logdir/pt-check.log" || rc=1
else
    echo "no artifact to export"; rc=1
fi
rm -rf "$work"
[ "$rc" -eq 0 ] && echo "gpu-calibrate-e2e: PASS" || echo "gpu-calibrate-e2e: FAIL"
exit $rc
