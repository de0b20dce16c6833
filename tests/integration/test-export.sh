#!/usr/bin/env bash
# test-export.sh - oscar-zoo export (pt and gguf) on synthetic artifacts:
#  - .pt pair: restricted unpickler (+ torch.load when torch is importable), bit-exact vs the artifact,
#    format_version 1 (per layer) and 2 (per KV head);
#  - GGUF standalone (--target oscar: no engine loads it): llama arch -> K rows in ggml order (method.md §1.1),
#    qwen3 -> HF order, --qk-order; engine targets are test-targets.sh's;
#  - GGUF bake into the SmolLM2 GGUF (when present): base tensors byte-identical, oscar's reader opens it;
#  - per KV head: k/v_rotation_perhead.pt; a k_mean: k_mean_decode.pt, read as the OptR engine's loaders
#    read it, imported back bit for bit; the OSCAR fork's recipe notes it serves uncentred keys;
#  - bad input: missing/corrupt artifact, unwritable --out, --base not a GGUF, per-head or k_mean to GGUF:
#    clear error, nothing (half-)written;
#  - integrity (the loader oscar-verify uses): a flipped rotation bit, a missing oscar.json: exit 1,
#    nothing written; --force exports with a warning;
#  - Hub ids: export from owner/name:path through the Hub emulator, then offline from the cache;
#    oscar-calibrate --model resolves a Hub id to the cached snapshot file.
source "$(dirname "$0")/hub-lib.sh"
MK="$BUILD/bin/oscar-make-artifact"
DUMP="$BUILD/bin/oscar-gguf-dump"
CAL="$BUILD/bin/oscar-calibrate"
[ -x "$MK" ] || { echo "skip: $MK not built"; exit 77; }
[ -x "$VENV_PY" ] && "$VENV_PY" -c 'import gguf, numpy' 2>/dev/null || { echo "skip: no venv with gguf"; exit 77; }
ORA="$ROOT/tests/oracle"
SMOL="${OSCAR_CACHE:-$HOME/.cache/oscar}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }

"$MK" "$T/art" 4 6 2 16 0 11 llama 2>/dev/null || fail "make artifact"
"$MK" "$T/arth" 3 8 2 16 1 12 llama 2>/dev/null || fail "make per-head artifact"
"$MK" "$T/artq" 2 4 2 16 0 13 qwen3 2>/dev/null || fail "make qwen3 artifact"

# ---- pt ----
$ZOO export "$T/art" --format pt --out "$T/pt" > "$T/env.txt" 2>/dev/null || fail "export pt"
for l in "export SGLANG_OSCAR_K_ROTATION_PATH=$T/pt/k_rotation_qqt_r_h_pbr.pt" \
         "export SGLANG_OSCAR_V_ROTATION_PATH=$T/pt/v_rotation_sst_r_h_pbr.pt" \
         "export SGLANG_OSCAR_K_CLIP_RATIO=0.96" "export SGLANG_OSCAR_V_CLIP_RATIO=0.92"; do
    grep -qxF "$l" "$T/env.txt" || fail "no line '$l' in: $(cat "$T/env.txt")"
done
cmp -s "$T/env.txt" "$T/pt/serve.env" || fail "stdout and serve.env differ"
ok "export pt (target sglang by default) prints the engine's recipe and writes it to serve.env"
"$VENV_PY" "$ORA/check_pt_export.py" "$T/art" "$T/pt" || fail "pt check (per layer)"
ok "pt pair (format_version 1) loads with the restricted unpickler, bit-exact"
$ZOO export "$T/arth" --format pt --target oscar --out "$T/pth" >/dev/null 2>&1 || fail "export pt per head"
"$VENV_PY" "$ORA/check_pt_export.py" "$T/arth" "$T/pth" || fail "pt check (per head)"
[ ! -e "$T/pth/serve.env" ] || fail "target oscar wrote a serve recipe"
ok "per-head pt pair is format_version 2 with [Hkv,D,D] (--target oscar; no serve.env)"
[ "$(ls "$T/pth")" = "$(printf 'k_rotation_perhead.pt\nv_rotation_perhead.pt')" ] || fail "per-head names: $(ls "$T/pth")"
ok "per-head pair is named k/v_rotation_perhead.pt (the zoo's per-head names), no k_mean file without a k_mean"

# ---- k_mean (OptR centring): k_mean_decode.pt, read back bit for bit ----
"$MK" "$T/artm" 3 8 2 16 1m 14 llama 2>/dev/null || fail "make per-head + k_mean artifact"
$ZOO export "$T/artm" --format pt --target oscar --out "$T/ptm" --json > "$T/jm.json" 2>/dev/null || fail "export pt with k_mean"
"$VENV_PY" "$ORA/check_pt_export.py" "$T/artm" "$T/ptm" || fail "pt check (per head + k_mean)"
"$VENV_PY" - "$T/jm.json" "$T/ptm/k_mean_decode.pt" <<'PY' || fail "--json k_mean: $(cat "$T/jm.json")"
import json, os, sys
d = json.load(open(sys.argv[1]))
assert d["k_mean"] == os.path.realpath(sys.argv[2]) and d["format_version"] == 2, d
PY
"$MK" "$T/artm2" 3 8 2 16 1m 15 llama 2>/dev/null || fail "make a second k_mean artifact"
"$VENV_PY" "$ORA/check_pt_export.py" "$T/artm2" "$T/ptm" >/dev/null && fail "the check accepted another artifact's files"
ok "per head + k_mean: k_mean_decode.pt as the OptR loaders read it (layers{i}{mu} [Hkv,D] f32), bit-exact; --json names it"
$ZOO import "$T/ptm" --out "$T/ptm-imp" -q >/dev/null 2>"$T/err" || fail "import the export: $(cat "$T/err")"
"$VENV_PY" - "$ORA" "$T/artm" "$T/ptm-imp" <<'PY' || fail "export -> import is not the identity"
import sys
sys.path.insert(0, sys.argv[1])
from check_pt_export import read_artifact
a, ma = read_artifact(sys.argv[2])
b, mb = read_artifact(sys.argv[3])
L = int(ma["oscar.num_layers"])
names = [f"layers.{i}.{t}" for i in range(L) for t in ("k_rotation", "v_rotation", "k_eigenvalues", "v_eigenvalues", "k_mean")]
for k in names:
    assert k in b and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes(), k
assert mb["oscar.source_grouping"] == "kv_head" and mb["oscar.imported_k_mean"].split()[0].endswith("k_mean_decode.pt"), mb
PY
ok "export -> oscar-zoo import: per-head R, eigenvalues and k_mean identical bit for bit"
"$MK" "$T/artlm" 2 4 2 16 0m 16 qwen3 2>/dev/null || fail "make per-layer + k_mean artifact"
$ZOO export "$T/artlm" --format pt --out "$T/ptlm" > "$T/envlm.txt" 2>/dev/null || fail "export pt sglang with k_mean"
"$VENV_PY" "$ORA/check_pt_export.py" "$T/artlm" "$T/ptlm" >/dev/null || fail "pt check (per layer + k_mean)"
grep -q "^# note: .*k_mean_decode.pt, which only the OptR SGLang engine reads (SGLANG_OSCAR_K_MEAN_PATH with SGLANG_OSCAR_K_MEAN_IN_POOL=1); the SGLang OSCAR fork does not, and serves uncentred keys" "$T/ptlm/serve.env" \
    || fail "serve.env lacks the k_mean note: $(cat "$T/ptlm/serve.env")"
grep -q "K_MEAN" <(grep -v '^#' "$T/ptlm/serve.env") && fail "the OSCAR fork's recipe sets a k_mean variable it does not read"
ok "per layer + k_mean, target sglang: k_mean_decode.pt written, the recipe says the OSCAR fork serves uncentred keys"
cmp -s "$T/pt/k_rotation_qqt_r_h_pbr.pt" <($ZOO export "$T/art" --format pt --out "$T/pt2" >/dev/null 2>&1; cat "$T/pt2/k_rotation_qqt_r_h_pbr.pt") \
    || fail "pt export is not deterministic"
ok "pt export is byte-deterministic"

# ---- gguf standalone ----
$ZOO export "$T/art" --format gguf --target oscar --out "$T/rot.gguf" >/dev/null 2>&1 || fail "export gguf"
"$VENV_PY" "$ORA/check_gguf_export.py" "$T/art" "$T/rot.gguf" ggml || fail "gguf check (llama -> ggml)"
"$VENV_PY" "$ORA/check_gguf_export.py" "$T/art" "$T/rot.gguf" hf >/dev/null && fail "hf expectation accepted a permuted file"
ok "standalone GGUF for a llama artifact: K rows permuted to ggml order, Mᵀ, metadata"
$ZOO export "$T/artq" --format gguf --target oscar --out "$T/rotq.gguf" >/dev/null 2>&1 || fail "export gguf qwen3"
"$VENV_PY" "$ORA/check_gguf_export.py" "$T/artq" "$T/rotq.gguf" hf || fail "gguf check (qwen3 -> hf)"
$ZOO export "$T/art" --format gguf --target oscar --qk-order hf --out "$T/roth.gguf" >/dev/null 2>&1 || fail "export --qk-order hf"
"$VENV_PY" "$ORA/check_gguf_export.py" "$T/art" "$T/roth.gguf" hf || fail "gguf check (--qk-order hf)"
ok "qwen3 artifact and --qk-order hf keep HF order"
"$DUMP" "$T/rot.gguf" | grep -q "blk.3.attn_v_rot.weight" || fail "oscar's reader on the standalone file"
ok "oscar's GGUF reader opens the standalone file"

# ---- gguf bake ----
if [ -f "$SMOL" ]; then
    "$MK" "$T/art30" 30 9 3 64 0 5 llama 2>/dev/null || fail "make 30-layer artifact"
    $ZOO export "$T/art30" --format gguf --target oscar --base "$SMOL" --out "$T/baked.gguf" >/dev/null 2>&1 || fail "bake"
    "$VENV_PY" "$ORA/check_gguf_export.py" "$T/art30" "$T/baked.gguf" ggml "$SMOL" || fail "baked check"
    "$DUMP" "$T/baked.gguf" | grep -q "blk.29.attn_k_rot.weight" || fail "oscar's reader on the baked file"
    ok "bake into SmolLM2: base tensors byte-identical, rotation tensors appended, oscar reader opens it"
    $ZOO export "$T/art30" --format gguf --target oscar --base "$T/baked.gguf" --out "$T/twice.gguf" 2>"$T/err" >/dev/null && fail "baked twice"
    grep -q "already has" "$T/err" && [ ! -e "$T/twice.gguf" ] || fail "bake twice error: $(cat "$T/err")"
    $ZOO export "$T/art" --format gguf --target oscar --base "$SMOL" --out "$T/mismatch.gguf" 2>"$T/err" >/dev/null && fail "shape mismatch"
    grep -q "30 layers of head_dim 64" "$T/err" && [ ! -e "$T/mismatch.gguf" ] || fail "mismatch error: $(cat "$T/err")"
    ok "bake refuses an already-baked base and a shape mismatch, writes nothing"
else
    echo "# $SMOL missing: bake checks skipped"
fi

# ---- bad input ----
expect_fail() { # expect_fail PATTERN NOT_CREATED cmd...
    local pat=$1 path=$2; shift 2
    "$@" >/dev/null 2>"$T/err" && fail "succeeded: $*"
    grep -q -- "$pat" "$T/err" || fail "error for '$*' lacks '$pat': $(cat "$T/err")"
    [ ! -e "$path" ] || fail "'$*' left $path behind"
    ls -a "$(dirname "$path")" 2>/dev/null | grep -q '\.tmp\.' && fail "'$*' left a temp file"
    return 0
}
expect_fail "not a Hub repo id" "$T/o1" $ZOO export "$T/nope" --format pt --out "$T/o1"
cp -r "$T/art" "$T/corrupt" && head -c 100 "$T/art/oscar.safetensors" > "$T/corrupt/oscar.safetensors"
expect_fail "oscar.safetensors" "$T/o2" $ZOO export "$T/corrupt" --format pt --out "$T/o2"
expect_fail "oscar.safetensors" "$T/o3.gguf" $ZOO export "$T/corrupt" --format gguf --target oscar --out "$T/o3.gguf"
mkdir -p "$T/ro" && chmod 555 "$T/ro"
if [ ! -w "$T/ro" ]; then
    expect_fail "$T/ro" "$T/ro/x.gguf" $ZOO export "$T/art" --format gguf --target oscar --out "$T/ro/x.gguf"
    expect_fail "$T/ro" "$T/ro/k_rotation_qqt_r_h_pbr.pt" $ZOO export "$T/art" --format pt --out "$T/ro"
else
    echo "# running as a user that ignores permissions: unwritable --out not checked"
fi
printf 'not a gguf at all' > "$T/notgguf.gguf"
# a path below a regular file cannot be created, even by root
expect_fail "notgguf.gguf" "$T/notgguf.gguf/pt/k_rotation_qqt_r_h_pbr.pt" $ZOO export "$T/art" --format pt --out "$T/notgguf.gguf/pt"
expect_fail "notgguf.gguf" "$T/notgguf.gguf/x.gguf" $ZOO export "$T/art" --format gguf --target oscar --out "$T/notgguf.gguf/x.gguf"
expect_fail "base" "$T/o4.gguf" $ZOO export "$T/art" --format gguf --target oscar --base "$T/notgguf.gguf" --out "$T/o4.gguf"
expect_fail "per-KV-head rotations \[2,16,16\]; the llama.cpp fork creates blk.N.attn_k_rot/attn_v_rot as one \[D,D\] tensor per layer" \
    "$T/o5.gguf" $ZOO export "$T/arth" --format gguf --out "$T/o5.gguf"
expect_fail "centres keys on k_mean \[2,2,16\]; the llama.cpp fork reads no key-mean tensor" \
    "$T/o7.gguf" $ZOO export "$T/artlm" --format gguf --target oscar --out "$T/o7.gguf"
expect_fail "centres keys on k_mean" "$T/o8.gguf" $ZOO export "$T/artlm" --format gguf --out "$T/o8.gguf"
mkdir -p "$T/o9/k_mean_decode.pt" # the third file cannot be written: the first two must not stay
expect_fail "o9/k_mean_decode.pt: rename failed" "$T/o9/k_rotation_perhead.pt" $ZOO export "$T/artm" --format pt --target oscar --out "$T/o9"
[ "$(ls -A "$T/o9")" = k_mean_decode.pt ] || fail "a failed k_mean write left: $(ls -A "$T/o9")"
$ZOO export "$T/art" --format pt 2>/dev/null; [ $? = 2 ] || fail "export without --out: want 2"
$ZOO export "$T/art" --format onnx --out x 2>/dev/null; [ $? = 2 ] || fail "bad --format: want 2"
$ZOO export "$T/art" --format pt --base x --out x 2>/dev/null; [ $? = 2 ] || fail "--base with pt: want 2"
ok "bad input: clear errors, usage errors exit 2, nothing half-written"

# ---- integrity: the same checks as oscar-verify, the same --force ----
cp -r "$T/art" "$T/flipped"
"$VENV_PY" - "$T/flipped/oscar.safetensors" <<'PY' || fail "flip a bit"
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
off = 8 + n + json.loads(b[8:8 + n])["layers.2.k_rotation"]["data_offsets"][0] + 4 * 7
b[off] ^= 1   # lowest mantissa bit of R[0][7]: invisible to orthogonality, not to the sha256
open(sys.argv[1], "wb").write(b)
PY
for fmt in pt gguf; do
    out="$T/flipped-$fmt"; [ $fmt = gguf ] && out="$T/flipped.gguf"
    $ZOO export "$T/flipped" --format $fmt --target oscar --out "$out" >/dev/null 2>"$T/err"; rc=$?
    [ $rc = 1 ] && grep -q "flipped/oscar.safetensors: sha256 .*modified or corrupted" "$T/err" && [ ! -e "$out" ] \
        || fail "export $fmt of a tampered artifact: exit $rc, $(cat "$T/err")"
    $ZOO export "$T/flipped" --format $fmt --target oscar --out "$out" --force >/dev/null 2>"$T/err" || fail "--force $fmt: $(cat "$T/err")"
    grep -q "warning: .*modified or corrupted.*forced" "$T/err" && [ -e "$out" ] || fail "--force $fmt: $(cat "$T/err")"
done
cp -r "$T/art" "$T/nojson" && rm "$T/nojson/oscar.json"
$ZOO export "$T/nojson" --format pt --out "$T/nojson-pt" >/dev/null 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q "nojson/oscar.json: missing" "$T/err" && [ ! -e "$T/nojson-pt" ] || fail "no oscar.json: exit $rc, $(cat "$T/err")"
$ZOO export "$T/nojson" --format pt --out "$T/nojson-pt" --force >/dev/null 2>"$T/err" || fail "--force no oscar.json: $(cat "$T/err")"
$ZOO pull me/x --force 2>/dev/null; [ $? = 2 ] || fail "--force outside export: want 2"
ok "export checks integrity like oscar-verify: tampered / unhashed artifacts exit 1, --force warns"

# ---- Hub ids ----
start_emulator
$ZOO push "$T/art" --repo me/rot --path-in-repo m/t --quiet >/dev/null || fail "push artifact"
$ZOO export me/rot:m/t --format pt --out "$T/hubpt" --quiet >/dev/null 2>"$T/err" || fail "export from hub: $(cat "$T/err")"
"$VENV_PY" "$ORA/check_pt_export.py" "$T/art" "$T/hubpt" >/dev/null || fail "hub export content"
HF_HUB_OFFLINE=1 $ZOO export me/rot@main:m/t --format gguf --target oscar --out "$T/hub.gguf" >/dev/null 2>"$T/err" || fail "offline export from cache: $(cat "$T/err")"
HF_HUB_OFFLINE=1 $ZOO export me/other:m/t --format pt --out "$T/o6" 2>"$T/err" >/dev/null && fail "offline unknown repo"
grep -q "not in the cache" "$T/err" || fail "offline miss error: $(cat "$T/err")"
ok "export ARTIFACT as a Hub id (online, then offline from the cache)"
mkdir -p "$T/model" && cp "$ROOT/tests/fixtures/model/tiny-llama.gguf" "$T/model/"
printf -- '---\nlicense: apache-2.0\n---\n# tiny\n' > "$T/model/README.md"
$ZOO push "$T/model" --repo me/tiny --quiet >/dev/null || fail "push model"
printf 'one two three four five six seven eight nine ten\n' > "$T/c.txt"
HF_HUB_OFFLINE=1 "$CAL" --model me/tiny:tiny-llama.gguf --corpus "$T/c.txt" --out "$T/cal" 2>"$T/err" >/dev/null && fail "offline before pull"
grep -q "me/tiny" "$T/err" || fail "calibrate offline miss: $(cat "$T/err")"
"$CAL" --model me/tiny:tiny-llama.gguf --corpus "$T/c.txt" --out "$T/cal" 2>"$T/err" >/dev/null
grep -q "$HF_HUB_CACHE/models--me--tiny/snapshots/[0-9a-f]*/tiny-llama.gguf" "$T/err" || fail "calibrate did not resolve the Hub id: $(cat "$T/err")"
HF_HUB_OFFLINE=1 "$CAL" --model me/tiny:tiny-llama.gguf --corpus "$T/c.txt" --out "$T/cal" 2>"$T/err" >/dev/null
grep -q -- "-> .*snapshots/[0-9a-f]*/tiny-llama.gguf" "$T/err" || fail "calibrate offline from cache: $(cat "$T/err")"
ok "oscar-calibrate --model owner/name:file resolves through the Hub, then offline from the cache"
echo "test-export: $n checks passed"
