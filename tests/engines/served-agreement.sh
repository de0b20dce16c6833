#!/usr/bin/env bash
# served-agreement.sh - does oscar-verify --target llamacpp predict what the OSCAR llama.cpp fork serves?
#
# Runs the fork's llama-perplexity (built by tests/engines/llamacpp-fork.sh) with q2_0 K and V caches and
# the rotations of an oscar artifact, and oscar-verify --target llamacpp on the same text, window and
# scored positions, and prints the two perplexities and their gap. A measurement, not a CI test (CI has
# no fork build). Recorded in BENCHMARKS.md ("Served-engine agreement").
#
# usage: tests/engines/served-agreement.sh            (after tests/engines/llamacpp-fork.sh)
# environment (defaults in brackets):
#   PPL        the fork's llama-perplexity [.engines/llamacpp-fork/build/bin/llama-perplexity]
#   BASE       the SmolLM2-135M GGUF the test model is made from [$OSCAR_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf]
#   WORK       where the model, artifact and logs go [.engines/work]
#   TEXT       evaluation text [first 300000 bytes of austen/persuasion.txt]
#   CALIB      calibration text [first 200000 bytes of austen/emma.txt]
#   CTX        window [512]   CHUNKS  windows [4]   SINK/RECENT  LLAMA_KV_HP_SINK/RECENT [0/0]
#   THREADS    [2]   CALIB_TOKENS [8192]
#              (upstream llama.cpp's attn_rot for quantized caches), 0: LLAMA_ATTN_ROT_DISABLE=1 [1]
# The test model: tests/engines/bake-qwen3-smollm2.py (SmolLM2's weights in a qwen3 graph with
# head_dim 128, since the fork rotates only qwen3 and its Q2_0 groups are 128 wide).
# With SINK/RECENT > 0 llama-perplexity runs with -b 1 -ub 1 (token by token) so that its HP ring is the per-token ring
# oscar simulates (a multi-token ubatch counts "recent" from the ubatch's end), and scores the second
# half of each window, which is oscar-verify's --score-from CTX/2+1.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${OSCAR_CACHE:-$HOME/.cache/oscar}
py=${VENV_PY:-$cache/venv/bin/python}
build=${OSCAR_BUILD:-$root/build}
PPL=${PPL:-$root/.engines/llamacpp-fork/build/bin/llama-perplexity}
BASE=${BASE:-$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
WORK=${WORK:-$root/.engines/work}
CTX=${CTX:-512} CHUNKS=${CHUNKS:-4} SINK=${SINK:-0} RECENT=${RECENT:-0} THREADS=${THREADS:-2}
CALIB_TOKENS=${CALIB_TOKENS:-8192}
[ -x "$PPL" ] || { echo "served-agreement.sh: $PPL: not built (run tests/engines/llamacpp-fork.sh)" >&2; exit 2; }
mkdir -p "$WORK"
TEXT=${TEXT:-$WORK/text.txt} CALIB=${CALIB:-$WORK/calib.txt}
[ -f "$TEXT" ] || head -c 300000 "$cache/corpora/austen/persuasion.txt" > "$TEXT"
[ -f "$CALIB" ] || head -c 200000 "$cache/corpora/austen/emma.txt" > "$CALIB"
M=$WORK/smollm2-qwen3.gguf A=$WORK/art ROT=$WORK/serve/smollm2-qwen3-rot-kv.gguf
if [ ! -f "$M" ]; then
    echo "served-agreement: baking $M from $BASE" >&2
    "$py" "$root/tests/engines/bake-qwen3-smollm2.py" "$BASE" "$M"
fi
if [ ! -f "$A/oscar.safetensors" ]; then
    echo "served-agreement: calibrating $A (--target llamacpp, $CALIB_TOKENS tokens)" >&2
    "$build/bin/oscar-calibrate" --model "$M" --corpus "$CALIB" --out "$A" --tokens "$CALIB_TOKENS" --seq-len 512 \
        --target llamacpp --threads "$THREADS" -q
fi
mkdir -p "$(dirname "$ROT")"
"$build/bin/oscar-zoo" export "$A" --target llamacpp --base "$M" --out "$ROT" -q > /dev/null
# the recipe's variables (LLAMA_KV_NO_HADAMARD, LLAMA_ATTN_ROT_DISABLE, LLAMA_KV_CLIP_RATIO, LLAMA_KV_HP_*;
# not its llama-cli line), then this run's windows
eval "$(grep '^export ' "$WORK/serve/serve.env")"
export LLAMA_KV_HP_SINK=$SINK LLAMA_KV_HP_RECENT=$RECENT
tag="ctx$CTX-x$CHUNKS-s$SINK-r$RECENT"
# token by token only where the HP ring matters (without an HP buffer the batching does not change
# what the cache holds, and is far faster)
batch=(); [ $((SINK + RECENT)) -gt 0 ] && batch=(-b 1 -ub 1)
run_ppl() { # run_ppl LOG args...: the final estimate "PPL +/-"
    local log=$1; shift
    "$PPL" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" "${batch[@]}" -t "$THREADS" "$@" > "$log" 2>&1 ||
        { tail -20 "$log" >&2; echo "served-agreement: llama-perplexity failed ($log)" >&2; exit 1; }
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 \2/p' "$log"
}
Q=(-m "$ROT" --cache-type-k q2_0 --cache-type-v q2_0 -fa on)
echo "served-agreement: llama-perplexity q2_0 as the recipe serves it ($tag; LLAMA_KV_CLIP_RATIO=$LLAMA_KV_CLIP_RATIO, LLAMA_ATTN_ROT_DISABLE=${LLAMA_ATTN_ROT_DISABLE:-})" >&2
read -r e_q e_qse < <(run_ppl "$WORK/ppl-q2_0-$tag.log" "${Q[@]}")
echo "served-agreement: llama-perplexity q2_0 with the fork's default attention rotation" >&2
read -r e_r e_rse < <(unset LLAMA_ATTN_ROT_DISABLE; run_ppl "$WORK/ppl-q2_0-attn-rot-$tag.log" "${Q[@]}")
echo "served-agreement: llama-perplexity f16 cache, no rotations" >&2
read -r e_f e_fse < <(unset LLAMA_KV_HP_SINK LLAMA_KV_HP_RECENT; batch=(); run_ppl "$WORK/ppl-f16-$tag.log" -m "$M" -fa on)
echo "served-agreement: oscar-verify --target llamacpp --methods bf16,q2_0,q2_0-attn-rot" >&2
"$build/bin/oscar-verify" --model "$M" --rotations "$A" --corpus "$TEXT" --target llamacpp --ctx "$CTX" \
    --tokens $((CTX * CHUNKS)) --score-from $((CTX / 2 + 1)) --sink "$SINK" --recent "$RECENT" \
    --methods bf16,q2_0,q2_0-attn-rot --metric-tokens 64 --threads "$THREADS" --json \
    > "$WORK/verify-$tag.json" 2> "$WORK/verify-$tag.log"
"$py" - "$WORK/verify-$tag.json" "$tag" "$e_f" "$e_fse" "$e_q" "$e_qse" "$e_r" "$e_rse" <<'PY'
import json, sys
m = {x["name"]: x for x in json.load(open(sys.argv[1]))["methods"]}
tag, v = sys.argv[2], list(map(float, sys.argv[3:]))
for (name, fork), (e, se) in zip((("bf16", "f16 cache"), ("q2_0", "q2_0 recipe"), ("q2_0-attn-rot", "q2_0 default")),
                                 zip(v[0::2], v[1::2])):
    o = m[name]["ppl"]
    print(f"{tag}  {fork:13s} fork {e:10.4f} +/- {se:8.4f}   oscar {name:13s} {o:10.4f}   gap {100 * (o / e - 1):+6.2f} %")
PY
