#!/usr/bin/env bash
# test-calibrate-glm4.sh - oscar-calibrate end to end on GLM-4.x MoE (glm4_moe: sigmoid-routed experts in
# groups with a choice bias and routed_scaling_factor, one ungated shared expert, layer 0 dense, q/k/v bias,
# q/k norms, partial rotary: 16 of head_dim 32 rotated, the fitted rotations act on all 32 dims of K).
# 1. --random-init tiny-glm4-moe (the fixture's shape, random weights, synthetic tokens): the artifact is
#    written and names the architecture, --threads 1 and 2 give identical bytes, a checkpointed run too.
# 2. The tests/fixtures/models/tiny-glm4-moe weights with an ASCII byte-level tokenizer (ids 0..127 =
#    bytes, no merges; the fixture has none and a vocabulary of 160): the gate runs and passes and the
#    artifact is identical across threads; the fixture's GGUF (no tokenizer metadata: --tokenizer gives
#    it the same one) calibrates to the same rotations and clips, bit for bit.
set -euo pipefail
B=${OSCAR_BUILD:-build}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CAL="$B/bin/oscar-calibrate"
common=(--random-init tiny-glm4-moe --tokens 512 -c 64 --heldout 1 --sink 4 --recent 8 -q)

"$CAL" "${common[@]}" -t 2 -o "$T/a"
for f in oscar.safetensors oscar.json README.md; do [ -s "$T/a/$f" ] || { echo "FAIL: missing $f"; exit 1; }; done
grep -q '"oscar.architecture": "glm4moe"' "$T/a/oscar.json" || { echo "FAIL: architecture not recorded"; exit 1; }
grep -q '"oscar.num_layers": "4"' "$T/a/oscar.json" || { echo "FAIL: layer count"; exit 1; }
"$CAL" "${common[@]}" -t 1 -o "$T/b"
cmp "$T/a/oscar.safetensors" "$T/b/oscar.safetensors" || { echo "FAIL: --threads 1 and 2 differ"; exit 1; }
"$CAL" "${common[@]}" -t 2 -o "$T/c" --checkpoint-every 64
cmp "$T/a/oscar.safetensors" "$T/c/oscar.safetensors" || { echo "FAIL: a checkpointed run differs"; exit 1; }

# 2. the fixture's weights and an ASCII byte tokenizer (ids < 128: its vocabulary)
FX=tests/fixtures/models/tiny-glm4-moe
mkdir -p "$T/m"
cp "$FX/config.json" "$FX/model.safetensors" "$T/m/"
python3 tests/tools/make-byte-tokenizer.py "$T/m/tokenizer.json" --below 128
for i in $(seq 1 60); do echo "It is a truth universally acknowledged, line $i, that experts must be routed."; done > "$T/c.txt"
fx=(-m "$T/m" -f "$T/c.txt" --tokens 1024 -c 32 --heldout 2 --sink 4 --recent 8)
"$CAL" "${fx[@]}" -t 2 -o "$T/fa" 2> "$T/fa.err" || { echo "FAIL: calibrate on the fixture: $(tail -3 "$T/fa.err")"; exit 1; }
grep -q "mean .* PASS" "$T/fa.err" || { echo "FAIL: no passing gate: $(cat "$T/fa.err")"; exit 1; }
grep -q '"oscar.architecture": "glm4moe"' "$T/fa/oscar.json" || { echo "FAIL: fixture architecture"; exit 1; }
"$CAL" "${fx[@]}" -t 1 -q -o "$T/fb"
cmp "$T/fa/oscar.safetensors" "$T/fb/oscar.safetensors" || { echo "FAIL: fixture --threads 1 and 2 differ"; exit 1; }
"$CAL" -m "$FX.gguf" "${fx[@]:2}" --tokenizer "$T/m/tokenizer.json" -t 2 -q -o "$T/fg" 2> "$T/fg.err" \
    || { echo "FAIL: calibrate on the GGUF: $(tail -3 "$T/fg.err")"; exit 1; }
python3 - "$T/fa/oscar.safetensors" "$T/fg/oscar.safetensors" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__", None)
    return h, b[8 + n:]
(ha, da), (hb, db) = load(sys.argv[1]), load(sys.argv[2])
assert ha == hb and da == db, "the GGUF's artifact tensors differ from the safetensors'"
PY
set +e
"$CAL" --random-init tiny-glm4-moe --tokenizer "$T/m/tokenizer.json" -o "$T/x" 2> "$T/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "replaces" "$T/err" || { echo "FAIL: --random-init with --tokenizer: rc $rc"; exit 1; }
# a tokenizer whose ids pass the model's vocabulary (all 256 bytes; the model has 160 rows): refused
# after reading the corpus, before any forward pass, naming the tokenizer; nothing written
python3 tests/tools/make-byte-tokenizer.py "$T/wide.json"
{ echo "Café au lait, naïve façade."; cat "$T/c.txt"; } > "$T/c8.txt" # UTF-8: bytes >= 160
set +e
"$CAL" -m "$FX.gguf" -f "$T/c8.txt" "${fx[@]:4}" --tokenizer "$T/wide.json" -q -o "$T/w" 2> "$T/err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "wide.json: token id .* outside .* vocabulary of 160" "$T/err" \
    || { echo "FAIL: a tokenizer wider than the model: rc $rc: $(cat "$T/err")"; exit 1; }
[ ! -e "$T/w" ] || { echo "FAIL: the refused run left $T/w"; exit 1; }
echo "ok: oscar-calibrate on GLM-4 MoE (tiny-glm4-moe shape and fixture): artifacts written, identical across threads and checkpoints, gate passes, GGUF = safetensors"
