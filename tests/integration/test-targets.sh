#!/usr/bin/env bash
# test-targets.sh - target profiles end to end (util/target.h, formats/oscar-serve.h):
#  - oscar-calibrate --target sglang on SmolLM2: one K and one V clip for every layer, recorded as
#    oscar.target / oscar.clip_granularity, and the card's Serving section sets those clips;
#    --target llamacpp refuses the Llama model before any compute; bad windows / grouping are usage errors;
#  - oscar-zoo export --target sglang: serve.env = stdout, lines a shell runs (sourced with a stand-in
#    python that records its argv and environment), --json carries the same env, command and notes;
#  - --target llamacpp: a Llama artifact, a standalone file and a non-qwen3 base (the README's SmolLM2
#    case, "wrong number of tensors" in the fork) are refused saying why, nothing written; baked into a
#    qwen3 GGUF it writes serve.env whose command runs a stand-in llama-cli with the fork's flags;
#  - per-KV-head rotations: refused for sglang, written as format_version 2 with --target oscar (no recipe);
#    --target/--format mismatches are usage errors.
source "$(dirname "$0")/hub-lib.sh"
MK="$BUILD/bin/oscar-make-artifact"
CAL="$BUILD/bin/oscar-calibrate"
[ -x "$MK" ] || { echo "skip: $MK not built"; exit 77; }
[ -x "$VENV_PY" ] && "$VENV_PY" -c 'import gguf, numpy, safetensors' 2>/dev/null || { echo "skip: no venv with gguf"; exit 77; }
CACHE=${OSCAR_CACHE:-$HOME/.cache/oscar}
SMOL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
CORPUS=$CACHE/corpora/austen/prideprejudice.txt
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
jget() { "$VENV_PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); [d := d[k] for k in sys.argv[2:]]; print(d)' "$@"; }

# stand-ins for the engines: record argv and the variables the recipe sets
mkdir -p "$T/bin"
cat > "$T/bin/python" <<'EOF'
#!/bin/sh
echo "argv: $*"; env | grep -E '^(SGLANG_|MODEL=)' | sort
EOF
cp "$T/bin/python" "$T/bin/llama-cli" && sed -i 's/SGLANG_|MODEL=/LLAMA_KV_|LLAMA_ATTN_/' "$T/bin/llama-cli"
chmod +x "$T/bin/python" "$T/bin/llama-cli"

# ---- calibrate --target ----
if [ -f "$SMOL" ] && [ -f "$CORPUS" ]; then
    ARGS=(-m "$SMOL" -f "$CORPUS" --tokens 256 -c 128 --heldout 1 --sink 16 --recent 32 --clip-search 1.0:0.8:0.04 -q)
    nice -n 5 "$CAL" "${ARGS[@]}" --target sglang -o "$T/sgl" || fail "calibrate --target sglang"
    "$VENV_PY" - "$T/sgl/oscar.safetensors" <<'PY' || fail "sglang artifact clips"
import sys
from safetensors.numpy import load_file
from safetensors import safe_open
t = load_file(sys.argv[1]); md = safe_open(sys.argv[1], "np").metadata()
L = int(md["oscar.num_layers"])
k = {float(t[f"layers.{i}.k_clip"]) for i in range(L)}; v = {float(t[f"layers.{i}.v_clip"]) for i in range(L)}
assert len(k) == 1 and len(v) == 1, (k, v)
assert md["oscar.target"] == "sglang" and md["oscar.clip_granularity"] == "model_kv", md
assert abs(k.pop() - float(md["oscar.k_clip_ratio"])) < 5e-3 and abs(v.pop() - float(md["oscar.v_clip_ratio"])) < 5e-3
PY
    kc=$(jget "$T/sgl/oscar.json" metadata oscar.k_clip_ratio)
    grep -qxF "export SGLANG_OSCAR_K_CLIP_RATIO=$kc" "$T/sgl/README.md" || fail "card lacks the K clip line"
    grep -q "^Clips chosen for target \`sglang\`" "$T/sgl/README.md" || fail "card does not name the target"
    grep -q "^- the OSCAR llama.cpp fork: not servable: .*only in qwen3 graphs" "$T/sgl/README.md" \
        || fail "card does not say why llama.cpp cannot serve a Llama model"
    ok "calibrate --target sglang: one K and one V clip for all layers, recorded and shown in the card"
    "$CAL" "${ARGS[@]}" --target llamacpp -o "$T/ll" 2>"$T/err"; rc=$?
    [ $rc = 1 ] && grep -q "only in qwen3 graphs, and the model is llama; use --target sglang or oscar" "$T/err" \
        && [ ! -e "$T/ll" ] || fail "calibrate --target llamacpp on Llama: rc $rc $(cat "$T/err")"
    ok "calibrate --target llamacpp refuses a Llama model, naming what works, writing nothing"
else
    echo "# SmolLM2 or corpus missing: calibrate checks skipped"
fi
"$CAL" -m x -f y -o "$T/w" --target sglang --sink 30 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "multiples of 8" "$T/err" || fail "--sink 30 for sglang: rc $rc $(cat "$T/err")"
"$CAL" -m x -f y -o "$T/w" --target llamacpp --rotation-grouping head 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "rotation-grouping layer" "$T/err" || fail "per-head for llamacpp: rc $rc $(cat "$T/err")"
"$CAL" -m x -f y -o "$T/w" --target vllm 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "'vllm' is not a target (oscar, sglang, llamacpp)" "$T/err" || fail "--target vllm: rc $rc"
ok "calibrate: windows off sglang's page, per-head rotations for an engine, unknown targets are usage errors"

# ---- export --target sglang ----
"$MK" "$T/art" 4 6 2 16 0 11 llama 2>/dev/null || fail "make artifact"
"$MK" "$T/arth" 3 8 2 16 1 12 llama 2>/dev/null || fail "make per-head artifact"
"$MK" "$T/artq" 2 4 2 16 0 13 qwen3 2>/dev/null || fail "make qwen3 artifact"
$ZOO export "$T/art" --target sglang --out "$T/rot dir" > "$T/out.txt" 2>/dev/null || fail "export sglang"
cmp -s "$T/out.txt" "$T/rot dir/serve.env" || fail "stdout differs from serve.env"
bash -n "$T/rot dir/serve.env" || fail "serve.env is not shell"
(PATH="$T/bin:$PATH" MODEL=me/model bash "$T/rot dir/serve.env") > "$T/ran.txt" || fail "running serve.env"
for l in "argv: -m sglang.launch_server --model-path me/model --attention-backend triton --kv-cache-dtype int2 --kv-cache-quant-group-size 16" \
         "SGLANG_ENABLE_MIXED_KV_WINDOWS=1" "SGLANG_MIXED_KV_PREFIX_TOKENS=64" "SGLANG_MIXED_KV_RECENT_TOKENS=256" \
         "SGLANG_MIXED_KV_HP_DTYPE=bfloat16" "SGLANG_MIXED_KV_SCALE_DTYPE=float32" \
         "SGLANG_OSCAR_K_ROTATION_PATH=$T/rot dir/k_rotation_qqt_r_h_pbr.pt" \
         "SGLANG_OSCAR_V_ROTATION_PATH=$T/rot dir/v_rotation_sst_r_h_pbr.pt" \
         "SGLANG_OSCAR_K_CLIP_RATIO=0.96" "SGLANG_OSCAR_V_CLIP_RATIO=0.92" "SGLANG_OSCAR_ABSORB_V_ROTATION=0"; do
    grep -qxF "$l" "$T/ran.txt" || fail "the engine did not see '$l': $(cat "$T/ran.txt")"
done
(PATH="$T/bin:$PATH" MODEL= bash "$T/rot dir/serve.env") >/dev/null 2>"$T/err" && fail "serve.env ran without MODEL"
grep -q "set MODEL to" "$T/err" || fail "no MODEL message: $(cat "$T/err")"
ok "export --target sglang: serve.env = stdout; sourced, the engine gets the fork's variables and flags"
$ZOO export "$T/art" --target sglang --out "$T/rotj" --json > "$T/j.json" 2>/dev/null || fail "export --json"
"$VENV_PY" - "$T/j.json" "$T/rotj" <<'PY' || fail "--json fields"
import json, sys
d = json.load(open(sys.argv[1])); out = sys.argv[2]
assert d["target"] == "sglang" and d["format"] == "pt" and d["format_version"] == 1, d
assert d["serve_env"] == out + "/serve.env", d["serve_env"]
e = d["env"]
assert e["SGLANG_OSCAR_K_ROTATION_PATH"] == d["k_rotation"] and e["SGLANG_MIXED_KV_PREFIX_TOKENS"] == "64", e
assert "--kv-cache-dtype int2" in d["command"] and d["notes"] == [], d
text = open(d["serve_env"]).read()
for k, v in e.items():
    assert f"export {k}={v}\n" in text, (k, v)
assert d["command"] + "\n" in text
PY
ok "export --json: target, env (the serve.env values), command, notes, serve_env"
$ZOO export "$T/arth" --target sglang --out "$T/ph" 2>"$T/err" >/dev/null; rc=$?
[ $rc = 1 ] && grep -q "per-KV-head rotations \[2,16,16\].*load_oscar_rotations raises ValueError" "$T/err" && [ ! -e "$T/ph" ] \
    || fail "per-head to sglang: rc $rc $(cat "$T/err")"
$ZOO export "$T/arth" --target oscar --format pt --out "$T/ph" --json > "$T/jh.json" 2>/dev/null || fail "per-head --target oscar"
[ "$(jget "$T/jh.json" format_version)" = 2 ] && [ "$(jget "$T/jh.json" serve_env)" = None ] && [ ! -e "$T/ph/serve.env" ] \
    || fail "per-head oscar export: $(cat "$T/jh.json")"
ok "per-KV-head rotations: refused for sglang (nothing written); --target oscar writes format_version 2, no recipe"

# ---- export --target llamacpp ----
expect_refused() { # expect_refused PATTERN OUT cmd...
    local pat=$1 out=$2; shift 2
    "$@" >/dev/null 2>"$T/err"; local rc=$?
    [ $rc = 1 ] && grep -q -- "$pat" "$T/err" && [ ! -e "$out" ] || fail "$*: rc $rc, $(cat "$T/err")"
}
expect_refused "artifact is for a llama model.*only in qwen3 graphs.*wrong number of tensors.*with SGLang" "$T/l.gguf" \
    $ZOO export "$T/art" --target llamacpp --out "$T/l.gguf"
expect_refused "standalone rotation file cannot be served; pass --base MODEL.gguf" "$T/s.gguf" \
    $ZOO export "$T/artq" --target llamacpp --out "$T/s.gguf"
if [ -f "$SMOL" ]; then
    "$MK" "$T/art30q" 30 9 3 64 0 5 qwen3 2>/dev/null || fail "make 30-layer qwen3 artifact"
    expect_refused "base is a llama GGUF.*wrong number of tensors" "$T/smol.gguf" \
        $ZOO export "$T/art30q" --format gguf --base "$SMOL" --out "$T/smol.gguf"
fi
ok "llama.cpp: Llama artifacts, standalone files and non-qwen3 bases (SmolLM2) refused with the reason"
"$VENV_PY" - "$T/qwen3.gguf" <<'PY' || fail "write a qwen3 GGUF"
import sys, numpy as np, gguf
w = gguf.GGUFWriter(sys.argv[1], "qwen3")
w.add_block_count(2); w.add_key_length(16); w.add_value_length(16); w.add_head_count(4); w.add_head_count_kv(2)
w.add_embedding_length(64)
w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
mkdir -p "$T/ll"
$ZOO export "$T/artq" --format gguf --base "$T/qwen3.gguf" --out "$T/ll/m-oscar.gguf" > "$T/llout.txt" 2>/dev/null \
    || fail "bake into qwen3"
cmp -s "$T/llout.txt" "$T/ll/serve.env" || fail "llama.cpp stdout differs from serve.env"
(LLAMA_CPP_BIN="$T/bin" bash "$T/ll/serve.env") > "$T/llran.txt" || fail "running the llama.cpp serve.env"
for l in "argv: -m $T/ll/m-oscar.gguf --cache-type-k q2_0 --cache-type-v q2_0 -fa on" "LLAMA_KV_NO_HADAMARD=1" "LLAMA_ATTN_ROT_DISABLE=1" \
         "LLAMA_KV_CLIP_RATIO=0.96" "LLAMA_KV_HP_SINK=64" "LLAMA_KV_HP_RECENT=256"; do
    grep -qxF "$l" "$T/llran.txt" || fail "llama-cli did not see '$l': $(cat "$T/llran.txt")"
done
grep -q "^# note: the fork takes one clip ratio for K and V: K's 0.96 is used, V's 0.92 is not" "$T/ll/serve.env" \
    || fail "no note on the dropped V clip: $(cat "$T/ll/serve.env")"
ok "export --format gguf (target llamacpp) into a qwen3 base: serve.env runs llama-cli with q2_0, -fa on, LLAMA_KV_*"

# ---- usage ----
$ZOO export "$T/art" --target sglang --format gguf --out "$T/u" 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "target sglang reads --format pt, not gguf" "$T/err" || fail "sglang + gguf: rc $rc"
$ZOO export "$T/art" --target oscar --out "$T/u" 2>/dev/null; [ $? = 2 ] || fail "--target oscar without --format"
$ZOO export "$T/art" --target tensorrt --out "$T/u" 2>/dev/null; [ $? = 2 ] || fail "unknown target"
[ ! -e "$T/u" ] || fail "a usage error wrote $T/u"
ok "export: target/format mismatches and unknown targets are usage errors"
echo "test-targets: $n checks passed"
