#!/usr/bin/env bash
# gpu-verify-e2e.sh - on the GPU machine: oscar-verify --device cuda end to end on a real
# checkpoint directory (a random-init Qwen3-8B saved by transformers, bf16 shards, the Qwen3
# tokenizer) and an artifact calibrated from it: wall time, per-method perplexity time and
# scored tokens/s, peak host RSS, at ctx 2048 (2 windows) and ctx 32768 (1 window).
#
#   bash tests/gpu/gpu-verify-e2e.sh      (OUT: logs and report.json files go there)
# Env: CORPUS (text file; default the carried Austen corpus), OSCAR_DEBS.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
logdir=${OUT:-$root/build/gpu-verify-e2e}
mkdir -p "$logdir"
. "$here/gpu-deps.sh"
make CUDA=1 WERROR=1 -j"${JOBS:-$(nproc)}" >"$logdir/build.log" 2>&1 || { tail -40 "$logdir/build.log"; exit 1; }
corpus=${CORPUS:-$root/.devcarry/corpora/austen/emma.txt}
rc=0
work=$(mktemp -d)
fail() { echo "FAIL: $*"; rc=1; }
show() { grep -E "verify: |perplexity|Elapsed|Maximum resident" "$1" | cut -c1-300; }

python3 tests/gpu/make-hf-checkpoint.py "$work/q8b-hf" --shape qwen3-8b 2>&1 | tail -2 || fail "make-hf-checkpoint"
timeout 300 build/bin/oscar-calibrate --device cuda -m "$work/q8b-hf" -f "$corpus" --tokens 8192 -c 2048 -b 4 \
    --heldout 1 --clip 0.96,0.92 -o "$work/art" -q || fail "calibration"
for ctx in 2048 32768; do
    tokens=$((ctx == 2048 ? 4096 : 32768)); methods=bf16,naive,hadamard,oscar,int4-bdh,kivi,oscar-lm,oscar-omni,q2_0
    echo "== oscar-verify --device cuda --ctx $ctx --tokens $tokens --methods $methods"
    /usr/bin/time -v timeout 500 build/bin/oscar-verify --device cuda -m "$work/q8b-hf" --rotations "$work/art" \
        -f "$corpus" --ctx $ctx --tokens $tokens --metric-tokens 512 --methods $methods -o "$work/v$ctx" \
        >"$logdir/verify-$ctx.out" 2>"$logdir/verify-$ctx.err" || fail "verify ctx $ctx"
    show "$logdir/verify-$ctx.err"
    cp "$work/v$ctx/report.json" "$logdir/report-$ctx.json" 2>/dev/null
    python3 - "$logdir/report-$ctx.json" $ctx <<'PY' || fail "report ctx $ctx"
import json, sys
r = json.load(open(sys.argv[1])); T = int(sys.argv[2])
host = [m["name"] for m in r["methods"] if m["name"] != "bf16" and m["kv_sim"] != "cuda"]
if host:
    sys.exit(f"simulated on the host, not in the device pass: {host}")
for m in r["methods"]:
    n, s = m["n_scored"], m["seconds"]
    kl = m.get("next_token", {}).get("kl_mean")
    print(f"{m['name']:10s} ppl {m['ppl']:.4f}  kv_sim {m['kv_sim']:5s} {s:7.2f} s  {n / s if s else 0:8.0f} scored tok/s"
          f"  kl_mean {kl}")
PY
done
rm -rf "$work"
[ "$rc" -eq 0 ] && echo "gpu-verify-e2e: PASS" || echo "gpu-verify-e2e: FAIL"
exit $rc
