#!/usr/bin/env bash
# test-zoo-layout.sh - oscar-zoo push --layout zoo against the Hub emulator:
#  - an artifact lands in <Model>/seq<T>_prompt<N>_group<G>/ (the published OSCAR rotation zoo's
#    layout) with k_rotation_qqt_r_h_pbr.pt and v_rotation_sst_r_h_pbr.pt (per KV head:
#    k/v_rotation_perhead.pt; with a k_mean also k_mean_decode.pt) beside oscar.safetensors,
#    oscar.json and README.md; --path-in-repo is the prefix above <Model>, --zoo-model names it;
#  - pull of that folder gives the artifact's files byte for byte, and the .pt pair imports to the
#    artifact's rotations and eigenvalues bitwise (per layer and per KV head);
#  - refusals: an artifact whose calib_tag is not seqT_promptN_groupG, --layout/--zoo-model misuse;
#  - oscar-verify --rotations owner/name:Model/seqT_promptN_groupG gives the local artifact's numbers.
source "$(dirname "$0")/hub-lib.sh"
MK="$BUILD/bin/oscar-make-artifact"
V="$BUILD/bin/oscar-verify"
[ -x "$MK" ] || { echo "skip: $MK not built"; exit 77; }
[ -x "$VENV_PY" ] && "$VENV_PY" -c 'import numpy' 2>/dev/null || { echo "skip: no venv with numpy"; exit 77; }
C=${OSCAR_CACHE:-$HOME/.cache/oscar}
M=$C/models/SmolLM2-135M-Instruct.Q4_1.gguf
P=$C/corpora/austen/persuasion.txt
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
start_emulator

# same_tensors A B: rotations, eigenvalues (and k_mean when A has one) of two artifacts are bitwise equal
same_tensors() {
    "$VENV_PY" - "$ROOT/tests/oracle" "$1" "$2" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from torch_pt_oracle import read_artifact
a, ma = read_artifact(sys.argv[2])
b, mb = read_artifact(sys.argv[3])
names = [k for k in a if k.endswith(("_rotation", "_eigenvalues", "k_mean"))]
assert names and len(names) == int(ma["oscar.num_layers"]) * (5 if "layers.0.k_mean" in a else 4), names
for k in names:
    assert a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes(), k
PY
}

Z=synthetic/seq0_prompt0_group64
for ph in 0 1 1m; do
    # per layer: the reference names; per KV head: the zoo's per-head names (+ the OptR key mean)
    case $ph in
        0) PT="k_rotation_qqt_r_h_pbr.pt v_rotation_sst_r_h_pbr.pt" ;;
        1) PT="k_rotation_perhead.pt v_rotation_perhead.pt" ;;
        1m) PT="k_rotation_perhead.pt v_rotation_perhead.pt k_mean_decode.pt" ;;
    esac
    "$MK" "$T/art$ph" 4 8 2 64 $ph 11 llama 2>/dev/null || fail "make artifact (per head $ph)"
    $ZOO push "$T/art$ph" --repo me/zoo$ph --layout zoo --json > "$T/push.json" 2>"$T/err" || fail "push --layout zoo: $(cat "$T/err")"
    grep -q "\"path_in_repo\": \"$Z\"" "$T/push.json" || fail "push --json: $(cat "$T/push.json")"
    $ZOO ls me/zoo$ph --path "$Z" > "$T/ls" || fail "ls"
    for f in README.md oscar.json oscar.safetensors $PT; do
        grep -q " $Z/$f\$" "$T/ls" || fail "$Z/$f not in the repo: $(cat "$T/ls")"
    done
    $ZOO pull me/zoo$ph --path "$Z" --local-dir "$T/pulled$ph" -q >/dev/null || fail "pull"
    for f in README.md oscar.json oscar.safetensors; do
        cmp -s "$T/art$ph/$f" "$T/pulled$ph/$Z/$f" || fail "$f differs after push/pull"
    done
    [ "$(grep -c '\.pt$' "$T/ls")" = "$(echo $PT | wc -w)" ] || fail "other .pt files in $Z: $(cat "$T/ls")"
    $ZOO import "$T/pulled$ph/$Z" --out "$T/imp$ph" -q >/dev/null 2>"$T/err" || fail "import the pulled folder: $(cat "$T/err")"
    same_tensors "$T/art$ph" "$T/imp$ph" || fail "the pulled .pt pair does not hold the artifact's tensors (per head $ph)"
done
mkdir -p "$T/tmp"
TMPDIR="$T/tmp" $ZOO push "$T/art0" --repo me/zoo0 --layout zoo --revision other -q >/dev/null || fail "push with TMPDIR"
[ -z "$(ls -A "$T/tmp")" ] || fail "the staging folder was left behind: $(ls -A "$T/tmp")"
ok "push --layout zoo -> pull: artifact files byte-identical, the .pt files import to identical tensors (per layer, per KV head, per KV head + k_mean_decode.pt); no staging folder left"

$ZOO push "$T/art0" --repo me/zoo0 --layout zoo --path-in-repo rotations --zoo-model "Qwen3 0.6B" -q >/dev/null \
    || fail "push with prefix and --zoo-model"
$ZOO ls me/zoo0 --path rotations/Qwen3-0.6B/seq0_prompt0_group64 | grep -q "k_rotation_qqt_r_h_pbr.pt$" \
    || fail "--path-in-repo / --zoo-model layout"
ok "--path-in-repo is the prefix above <Model>; --zoo-model names <Model> (spaces as '-')"

expect_fail() { # expect_fail RC PATTERN cmd...
    local rc=$1 pat=$2; shift 2
    "$@" >/dev/null 2>"$T/err"; local got=$?
    [ "$got" = "$rc" ] || fail "'$*' -> exit $got, want $rc: $(cat "$T/err")"
    grep -q -- "$pat" "$T/err" || fail "error for '$*' lacks '$pat': $(cat "$T/err")"
}
$ZOO export "$T/art0" --format pt --target oscar --out "$T/flatpt" -q >/dev/null || fail "export"
$ZOO import "$T/flatpt" --out "$T/untagged" -q >/dev/null || fail "import untagged"
expect_fail 2 "records no base model name" $ZOO push "$T/untagged" --repo me/zoo0 --layout zoo
expect_fail 2 "oscar.calib_tag is 'imported', not seq<T>_prompt<N>_group<G>" $ZOO push "$T/untagged" --repo me/zoo0 --layout zoo --zoo-model M
expect_fail 2 "--layout wants flat or zoo" $ZOO push "$T/art0" --repo me/zoo0 --layout tree
expect_fail 2 "--zoo-model is for --layout zoo" $ZOO push "$T/art0" --repo me/zoo0 --zoo-model X
expect_fail 2 "flatpt: not an oscar artifact (no oscar.safetensors)" $ZOO push "$T/flatpt" --repo me/zoo0 --layout zoo --no-card-check
ok "refused: no model name, a calib_tag outside the zoo's form, --layout tree, --zoo-model without --layout zoo, DIR not an artifact"

if [ -f "$M" ] && [ -f "$P" ]; then
    "$MK" "$T/smol" 30 9 3 64 0 7 llama "$(sha256sum "$M" | cut -d' ' -f1)" 2>/dev/null || fail "make SmolLM2-shaped artifact"
    $ZOO push "$T/smol" --repo me/smolzoo --layout zoo --zoo-model SmolLM2-135M-Instruct -q >/dev/null || fail "push smol"
    head -c 20000 "$P" > "$T/c.txt"
    S=(--ctx 64 --tokens 64 --sink 8 --recent 16 --metric-tokens 32 --threads 2 --methods oscar --json)
    "$V" --model "$M" --corpus "$T/c.txt" --rotations "$T/smol" "${S[@]}" > "$T/v-local.json" 2>"$T/err" || fail "verify local: $(cat "$T/err")"
    "$V" --model "$M" --corpus "$T/c.txt" --rotations me/smolzoo:SmolLM2-135M-Instruct/seq0_prompt0_group64 "${S[@]}" \
        > "$T/v-hub.json" 2>"$T/err" || fail "verify hub zoo path: $(cat "$T/err")"
    "$VENV_PY" - "$T/v-local.json" "$T/v-hub.json" <<'PY' || fail "verify numbers differ"
import json, sys
runs = [json.load(open(p))["methods"] for p in sys.argv[1:]]
for r in runs:
    for m in r:
        m.pop("seconds", None)
assert runs[0] == runs[1], "reports differ"
PY
    ok "oscar-verify --rotations owner/name:Model/seqT_promptN_groupG gives the local artifact's numbers"
else
    echo "# $M or $P missing: the oscar-verify check skipped"
fi
echo "test-zoo-layout: $n checks passed"
