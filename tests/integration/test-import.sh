#!/usr/bin/env bash
# test-import.sh - oscar-zoo import and oscar-verify --rotations on reference .pt rotations:
#  - round trip: an artifact exported with `export --format pt` imports back, and re-exports to
#    byte-identical .pt files (so rotations and eigenvalues are bit-identical);
#  - an independent writer (tests/oracle/torch_pt_oracle.py: Python's pickler + zipfile, torch's
#    layout, no torch): per-layer zoo files (40 layers, strided eigenvalue views), a Hadamard file
#    sharing one tensor across layers, deflated records, OptR per-KV-head files with k_mean and extra
#    metadata: oscar's import equals the oracle's numbers bitwise;
#  - refusals: a layer gap, a pickle that calls os.system (nothing runs), a truncated file, --model
#    shapes that disagree; each exits non-zero, names the file and writes nothing;
#  - --model records the model's identity and heads; zoo folder names give seq/prompt/group;
#  - SRC as a Hub spec owner/name:Model/seqT_promptN_groupG through the Hub emulator;
#  - oscar-verify --rotations with a zoo folder and with one .pt file gives the same numbers as the
#    imported artifact (SmolLM2, tiny windows); --update-card refuses .pt rotations before computing.
source "$(dirname "$0")/hub-lib.sh"
MK="$BUILD/bin/oscar-make-artifact"
V="$BUILD/bin/oscar-verify"
ORA="$ROOT/tests/oracle/torch_pt_oracle.py"
[ -x "$MK" ] || { echo "skip: $MK not built"; exit 77; }
[ -x "$VENV_PY" ] && "$VENV_PY" -c 'import numpy' 2>/dev/null || { echo "skip: no venv with numpy"; exit 77; }
C=${OSCAR_CACHE:-$HOME/.cache/oscar}
M=$C/models/SmolLM2-135M-Instruct.Q4_1.gguf
P=$C/corpora/austen/persuasion.txt
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
meta() { "$VENV_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]+"/oscar.json"))["metadata"].get(sys.argv[2], "<absent>"))' "$1" "$2"; }

# ---- round trip through export ----
"$MK" "$T/art" 4 6 2 16 0 11 llama 2>/dev/null || fail "make artifact"
"$MK" "$T/arth" 3 8 2 16 1 12 llama 2>/dev/null || fail "make per-head artifact"
for a in art arth; do
    $ZOO export "$T/$a" --format pt --target oscar --out "$T/$a-pt" -q >/dev/null || fail "export $a"
    $ZOO import "$T/$a-pt" --out "$T/$a-imp" -q >/dev/null || fail "import $a"
    $ZOO export "$T/$a-imp" --format pt --target oscar --out "$T/$a-pt2" -q >/dev/null || fail "re-export $a"
    for f in "$T/$a-pt"/*.pt; do cmp -s "$f" "$T/$a-pt2/$(basename "$f")" || fail "$a: $(basename "$f") differs after import"; done
done
[ "$(meta "$T/arth-imp" oscar.source_grouping)" = kv_head ] || fail "per-head import grouping"
ok "export -> import -> export gives byte-identical .pt files (per layer and per KV head)"
$ZOO import "$T/art-pt/k_rotation_qqt_r_h_pbr.pt" "$T/art-pt/v_rotation_sst_r_h_pbr.pt" --out "$T/two" -q >/dev/null \
    || fail "import of two files"
grep -q "k_rotation_qqt_r_h_pbr.pt sha256:$(sha256sum "$T/art-pt/k_rotation_qqt_r_h_pbr.pt" | cut -d' ' -f1)" "$T/two/oscar.json" \
    || fail "imported_from lacks the K file's sha256"
ok "two files, K first; oscar.imported_from records each file's sha256"

# ---- the independent writer ----
for v in zoo hadamard deflate optr; do
    "$VENV_PY" "$ORA" write $v "$T/o-$v" || fail "oracle write $v"
    $ZOO import "$T/o-$v" --out "$T/o-$v-art" -q >/dev/null || fail "import oracle $v"
    "$VENV_PY" "$ORA" check "$T/o-$v" "$T/o-$v-art" >/dev/null || fail "oracle check $v"
done
[ "$(meta "$T/o-optr-art" oscar.eigenvalues)" = "unknown (none of the rotations' shape in the .pt files; zeros)" ] \
    || fail "optr eigenvalues: $(meta "$T/o-optr-art" oscar.eigenvalues)"
[ "$(meta "$T/o-optr-art" oscar.imported_k_mean)" != "<absent>" ] || fail "optr k_mean not recorded"
ok "torch-layout files from Python's pickler (zoo, shared Hadamard, deflated, OptR per head + k_mean): bit-identical"

# ---- refusals ----
expect_fail() { # expect_fail RC PATTERN NOT_CREATED cmd...
    local rc=$1 pat=$2 path=$3; shift 3
    "$@" >/dev/null 2>"$T/err"; local got=$?
    [ "$got" = "$rc" ] || fail "'$*' -> exit $got, want $rc: $(cat "$T/err")"
    grep -q -- "$pat" "$T/err" || fail "error for '$*' lacks '$pat': $(cat "$T/err")"
    [ ! -e "$path" ] || fail "'$*' left $path behind"
}
"$VENV_PY" "$ORA" write gap "$T/o-gap" || fail "oracle gap"
expect_fail 1 "o-gap/k_rotation_qqt_r_h_pbr.pt: 'layers' has 39 entries but no layer 3" "$T/x1" $ZOO import "$T/o-gap" --out "$T/x1"
mkdir -p "$T/evil"
"$VENV_PY" "$ORA" hostile "$T/evil/k_rotation_evil.pt" "$T/pwned" || fail "hostile write"
cp "$T/art-pt/v_rotation_sst_r_h_pbr.pt" "$T/evil/"
expect_fail 1 "k_rotation_evil.pt: data.pkl offset [0-9]*: global 'posix.system' is not allowed" "$T/x2" $ZOO import "$T/evil" --out "$T/x2"
[ ! -e "$T/pwned" ] || fail "the hostile pickle ran"
mkdir -p "$T/trunc" && head -c 3000 "$T/art-pt/k_rotation_qqt_r_h_pbr.pt" > "$T/trunc/k_rotation_t.pt"
cp "$T/art-pt/v_rotation_sst_r_h_pbr.pt" "$T/trunc/"
expect_fail 1 "trunc/k_rotation_t.pt: not a torch.save archive" "$T/x3" $ZOO import "$T/trunc" --out "$T/x3"
expect_fail 2 "--out DIR is required" "$T/x4" $ZOO import "$T/art-pt"
expect_fail 2 "expected one or two" "$T/x4" $ZOO import a b c --out "$T/x4"
expect_fail 2 "clip ratio in \[0, 1\]" "$T/x4" $ZOO import "$T/art-pt" --out "$T/x4" --k-clip 1.5
ok "refused: layer gap, os.system pickle (not run), truncated file, usage errors; nothing written"

# ---- --model, zoo folder names ----
if [ -f "$M" ]; then
    mkdir -p "$T/zoo/SmolLM2/seq8192_prompt4_group64"
    "$MK" "$T/art30" 30 9 3 64 0 7 llama 2>/dev/null || fail "make 30-layer artifact"
    $ZOO export "$T/art30" --format pt --out "$T/zoo/SmolLM2/seq8192_prompt4_group64" -q >/dev/null || fail "export 30"
    $ZOO import "$T/zoo/SmolLM2/seq8192_prompt4_group64" --model "$M" --base-model HuggingFaceTB/SmolLM2-135M-Instruct \
        --out "$T/smol-imp" -q >/dev/null || fail "import with --model"
    [ "$(meta "$T/smol-imp" oscar.base_model_sha256)" = "$(sha256sum "$M" | cut -d' ' -f1)" ] || fail "identity not recorded"
    [ "$(meta "$T/smol-imp" oscar.num_heads)/$(meta "$T/smol-imp" oscar.num_kv_heads)" = 9/3 ] || fail "heads from --model"
    [ "$(meta "$T/smol-imp" oscar.calib_tag)/$(meta "$T/smol-imp" oscar.calib_tokens)" = seq8192_prompt4_group64/8192 ] || fail "tag"
    [ "$(meta "$T/smol-imp" oscar.base_model_id)" = HuggingFaceTB/SmolLM2-135M-Instruct ] || fail "base_model_id"
    expect_fail 2 "but the model .* has 30 layers of head_dim 64" "$T/x5" $ZOO import "$T/art-pt" --model "$M" --out "$T/x5"
    ok "--model: identity, heads and base model id recorded; shapes that disagree refused"
else
    echo "# $M missing: --model and oscar-verify checks skipped"
fi

# ---- Hub source ----
start_emulator
$ZOO push "$T/o-zoo" --repo me/zoo --path-in-repo Tiny/seq512_prompt2_group16 --no-card-check -q >/dev/null || fail "push zoo"
$ZOO import me/zoo:Tiny/seq512_prompt2_group16 --out "$T/hub-imp" -q >/dev/null 2>"$T/err" || fail "import from hub: $(cat "$T/err")"
"$VENV_PY" "$ORA" check "$T/o-zoo" "$T/hub-imp" >/dev/null || fail "hub import content"
[ "$(meta "$T/hub-imp" oscar.base_model)/$(meta "$T/hub-imp" oscar.calib_tokens)" = Tiny/512 ] || fail "hub tag: $(meta "$T/hub-imp" oscar.base_model)"
ok "SRC as a Hub spec owner/name:Model/seqT_promptN_groupG"

# ---- oscar-verify --rotations with .pt sources ----
if [ -f "$M" ] && [ -f "$P" ]; then
    head -c 20000 "$P" > "$T/c.txt"
    S=(--ctx 64 --tokens 64 --sink 8 --recent 16 --metric-tokens 32 --threads 2 --methods oscar --json)
    Z="$T/zoo/SmolLM2/seq8192_prompt4_group64"
    "$V" --model "$M" --corpus "$T/c.txt" --rotations "$T/smol-imp" "${S[@]}" > "$T/v-art.json" 2>"$T/err" || fail "verify artifact: $(cat "$T/err")"
    "$V" --model "$M" --corpus "$T/c.txt" --rotations "$Z" "${S[@]}" > "$T/v-dir.json" 2>"$T/err" || fail "verify zoo dir: $(cat "$T/err")"
    "$V" --model "$M" --corpus "$T/c.txt" --rotations "$Z/v_rotation_sst_r_h_pbr.pt" "${S[@]}" > "$T/v-file.json" 2>"$T/err" \
        || fail "verify one .pt: $(cat "$T/err")"
    "$VENV_PY" - "$T/v-art.json" "$T/v-dir.json" "$T/v-file.json" <<'PY' || fail "verify numbers differ"
import json, sys
runs = [json.load(open(p))["methods"] for p in sys.argv[1:]]
for r in runs:
    for m in r:
        m.pop("seconds", None)
assert runs[0] == runs[1] == runs[2], "reports differ"
PY
    expect_fail 1 "update-card needs an oscar artifact" "$Z/README.md" "$V" --model "$M" --corpus "$T/c.txt" --rotations "$Z" --update-card
    ok "oscar-verify --rotations: zoo folder and one .pt file give the imported artifact's numbers; --update-card refused"
fi
echo "test-import: $n checks passed"
