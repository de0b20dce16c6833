#!/usr/bin/env bash
# test-calibrate-optr.sh - oscar-calibrate --refine optr (lib/calibrate/refine.c):
#  1. an unknown --refine is refused (in the pass: test-calibrate-optr-pass.sh);
#  2. from a store: per-KV-head rotations [3,64,64] and layers.{i}.k_mean in the artifact,
#     oscar.refine metadata, the OptR table and timing on stderr; --no-optr-center: no k_mean;
#  3. -t 1 and -t 2 write byte-identical artifacts (fixed-order sums);
#  4. that artifact exported (--format pt --target oscar): k/v_rotation_perhead.pt and k_mean_decode.pt
#     as the OptR engine's loaders read them (tests/oracle/check_pt_export.py), imported back bit for
#     bit; GGUF refuses it, naming what the llama.cpp fork lacks.
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
ARGS=(-m "$MODEL" --sink 8 --recent 16 --clip 0.96,0.92 -q)

# 1. refusals
"$CAL" "${ARGS[@]}" -f "$CORPUS" --refine bogus -o "$T/x" 2> "$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "known: optr" "$T/err" || fail "--refine bogus: rc=$rc"

# 2. from a store
"$CAL" "${ARGS[@]}" -f "$CORPUS" --tokens 256 -c 64 --heldout 1 --save-activations "$T/act.h5" -o "$T/base" \
    || fail "store run failed"
"$CAL" -m "$MODEL" --sink 8 --recent 16 --clip 0.96,0.92 --from-activations "$T/act.h5" --refine optr \
    --optr-steps 3 -t 2 -o "$T/a" 2> "$T/a.err" || fail "--refine optr failed: $(tail -3 "$T/a.err")"
grep -q "^optr: held-out loss" "$T/a.err" || fail "no OptR table on stderr"
grep -q "refine [0-9]" "$T/a.err" || fail "no refine time in the timing line"
hdr() { head -c 65536 "$1/oscar.safetensors" | tr -d '\0' | tr ',' '\n'; }
hdr "$T/a" | grep -q '"layers.29.k_mean"' || fail "no layers.29.k_mean in the artifact"
rot=$(head -c 65536 "$T/a/oscar.safetensors" | tr -d '\0' | grep -ao '"layers.0.k_rotation":{[^}]*}')
echo "$rot" | grep -q '"shape":\[3,64,64\]' || fail "k_rotation is not per KV head: $rot"
hdr "$T/a" | grep -q 'oscar.refine":"optr steps=3' || fail "no oscar.refine metadata"
"$CAL" -m "$MODEL" --sink 8 --recent 16 --clip 0.96,0.92 --from-activations "$T/act.h5" --refine optr \
    --optr-steps 3 --no-optr-center -q -o "$T/n" || fail "--no-optr-center failed"
hdr "$T/n" | grep -q 'k_mean' && fail "--no-optr-center wrote a k_mean"

# 3. thread count
"$CAL" -m "$MODEL" --sink 8 --recent 16 --clip 0.96,0.92 --from-activations "$T/act.h5" --refine optr \
    --optr-steps 3 -t 1 -q -o "$T/b" || fail "-t 1 failed"
cmp -s "$T/a/oscar.safetensors" "$T/b/oscar.safetensors" || fail "-t 1 and -t 2 artifacts differ"

# 4. export for the OptR engine, and back
ZOO=$B/bin/oscar-zoo
"$ZOO" export "$T/a" --format pt --target oscar --out "$T/pt" -q >/dev/null 2>"$T/err" || fail "export pt: $(cat "$T/err")"
[ "$(ls "$T/pt" | tr '\n' ' ')" = "k_mean_decode.pt k_rotation_perhead.pt v_rotation_perhead.pt " ] \
    || fail "exported files: $(ls "$T/pt")"
if [ -x "$PY" ] && "$PY" -c 'import numpy' 2>/dev/null; then
    "$PY" tests/oracle/check_pt_export.py "$T/a" "$T/pt" >/dev/null || fail "the export does not read back as the OptR loaders read it"
fi
"$ZOO" import "$T/pt" --model "$MODEL" --out "$T/imp" -q >/dev/null 2>"$T/err" || fail "import the export: $(cat "$T/err")"
for t in k_rotation v_rotation k_mean; do
    for l in 0 29; do
        [ "$(hdr "$T/imp" | grep -c "\"layers.$l.$t\"")" = 1 ] || fail "import lacks layers.$l.$t"
    done
done
if [ -x "$PY" ] && "$PY" -c 'import numpy' 2>/dev/null; then
    "$PY" - tests/oracle "$T/a" "$T/imp" <<'PY' || fail "export -> import changed a tensor"
import sys
sys.path.insert(0, sys.argv[1])
from check_pt_export import read_artifact
a, _ = read_artifact(sys.argv[2])
b, _ = read_artifact(sys.argv[3])
names = [k for k in a if k.endswith(("_rotation", "_eigenvalues", ".k_mean"))]
assert len(names) == 30 * 5, len(names)
for k in names:
    assert a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes(), k
PY
fi
"$ZOO" export "$T/a" --format gguf --target oscar --out "$T/x.gguf" 2>"$T/err" >/dev/null; rc=$?
[ $rc = 1 ] && grep -q "per-KV-head rotations \[3,64,64\]; the llama.cpp fork creates" "$T/err" && [ ! -e "$T/x.gguf" ] \
    || fail "GGUF of a per-head artifact: rc $rc $(cat "$T/err")"
echo "ok"
