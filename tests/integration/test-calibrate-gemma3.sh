#!/usr/bin/env bash
# test-calibrate-gemma3.sh - oscar-calibrate and oscar-verify end to end on Gemma 3.
# 1. --random-init tiny-gemma3 (the shape of tests/fixtures/models/tiny-gemma3-hub with a window of 64: 5
#    sliding layers with the local RoPE base and a global one with linear scaling, (1 + w) and sandwich norms,
#    GELU-tanh, query_pre_attn_scalar 24 != head_dim 32; random weights and synthetic tokens): the artifact is
#    written and names the architecture, --threads 1 and 2 give identical bytes, and sequences of 160 tokens
#    (longer than the window: VATT, the clip search and the gate take each sliding layer's window) calibrate,
#    pass the gate and write an artifact.
# 2. The tests/fixtures/models/tiny-gemma3 weights (query_pre_attn_scalar 24) with a byte-level tokenizer
#    (ids 0..255 = bytes, no merges; the fixtures have none) and its config at sliding_window 64 (the
#    fixture's 8 is shorter than the shortest calibration sequence, 16): the gate runs and passes, the
#    artifact is identical across threads, and oscar-verify runs bf16 and the INT2 methods with it; the
#    fixture itself (window 8, shorter than every sequence) calibrates at -c 32 and verifies at ctx 32 with
#    its artifact.
set -euo pipefail
B=${OSCAR_BUILD:-build}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CAL="$B/bin/oscar-calibrate"
common=(--random-init tiny-gemma3 --tokens 512 --heldout 1 --sink 4 --recent 8 -q)

"$CAL" "${common[@]}" -c 64 -t 2 -o "$T/a"
for f in oscar.safetensors oscar.json README.md; do [ -s "$T/a/$f" ] || { echo "FAIL: missing $f"; exit 1; }; done
grep -q '"oscar.architecture": "gemma3"' "$T/a/oscar.json" || { echo "FAIL: architecture not recorded"; exit 1; }
grep -q '"oscar.num_layers": "6"' "$T/a/oscar.json" || { echo "FAIL: layer count"; exit 1; }
"$CAL" "${common[@]}" -c 64 -t 1 -o "$T/b"
cmp "$T/a/oscar.safetensors" "$T/b/oscar.safetensors" || { echo "FAIL: --threads 1 and 2 differ"; exit 1; }
"$CAL" --random-init tiny-gemma3 --tokens 1024 --heldout 1 --sink 4 --recent 8 -c 160 -t 2 -o "$T/c" 2> "$T/c.err" \
    || { echo "FAIL: seq_len 160 > window 64: $(tail -3 "$T/c.err")"; exit 1; }
grep -q "mean .* PASS" "$T/c.err" || { echo "FAIL: no passing gate at seq_len 160: $(tail -5 "$T/c.err")"; exit 1; }
[ -s "$T/c/oscar.safetensors" ] || { echo "FAIL: no artifact at seq_len 160"; exit 1; }

# 2. the fixture's weights, a byte tokenizer, text
FX=tests/fixtures/models/tiny-gemma3
mkdir -p "$T/m8" "$T/m64"
python3 tests/tools/make-byte-tokenizer.py "$T/m8/tokenizer.json"
cp "$FX/config.json" "$FX/model.safetensors" "$T/m8/"
cp "$T/m8/tokenizer.json" "$FX/model.safetensors" "$T/m64/"
sed 's/"sliding_window": 8,/"sliding_window": 64,/' "$FX/config.json" > "$T/m64/config.json"
grep -q '"sliding_window": 64' "$T/m64/config.json" || { echo "FAIL: window not rewritten"; exit 1; }
grep -q '"query_pre_attn_scalar": 24' "$T/m64/config.json" || { echo "FAIL: fixture scale changed"; exit 1; }
for i in $(seq 1 60); do echo "It is a truth universally acknowledged, line $i, that a model must be verified."; done > "$T/c.txt"
for i in $(seq 1 20); do echo "Held-out text number $i says something else entirely about the weather."; done > "$T/h.txt"
fx=(-m "$T/m64" -f "$T/c.txt" --tokens 1024 -c 32 --heldout 2 --sink 4 --recent 8)
"$CAL" "${fx[@]}" -t 2 -o "$T/fa" 2> "$T/fa.err" || { echo "FAIL: calibrate on the fixture: $(tail -3 "$T/fa.err")"; exit 1; }
grep -q "mean .* PASS" "$T/fa.err" || { echo "FAIL: no passing gate: $(cat "$T/fa.err")"; exit 1; }
"$CAL" "${fx[@]}" -t 1 -q -o "$T/fb"
cmp "$T/fa/oscar.safetensors" "$T/fb/oscar.safetensors" || { echo "FAIL: fixture --threads 1 and 2 differ"; exit 1; }
V="$B/bin/oscar-verify"
"$V" -m "$T/m64" -r "$T/fa" -f "$T/h.txt" --ctx 32 --tokens 64 --metric-tokens 32 --sink 4 --recent 8 -t 2 \
    --methods bf16,naive,hadamard,oscar --json > "$T/v64.json" 2> "$T/v64.err" \
    || { echo "FAIL: verify with the artifact: $(tail -3 "$T/v64.err")"; exit 1; }
"$V" -m "$T/m8" -f "$T/h.txt" --ctx 8 --tokens 64 --metric-tokens 8 --sink 2 --recent 2 -t 2 \
    --methods bf16,naive,hadamard --json > "$T/v8.json" 2> "$T/v8.err" \
    || { echo "FAIL: verify on the fixture: $(tail -3 "$T/v8.err")"; exit 1; }
# the fixture's window 8 is shorter than every sequence: calibrate at -c 32 and verify at ctx 32 with it
"$CAL" -m "$T/m8" -f "$T/c.txt" --tokens 1024 -c 32 --heldout 2 --sink 4 --recent 8 -t 2 -o "$T/f8" 2> "$T/f8.err" \
    || { echo "FAIL: calibrate the window-8 fixture at -c 32: $(tail -3 "$T/f8.err")"; exit 1; }
grep -q "mean .* PASS" "$T/f8.err" || { echo "FAIL: no passing gate at window 8: $(tail -5 "$T/f8.err")"; exit 1; }
"$V" -m "$T/m8" -r "$T/f8" -f "$T/h.txt" --ctx 32 --tokens 64 --metric-tokens 32 --sink 4 --recent 8 -t 2 \
    --methods bf16,naive,hadamard,oscar --json > "$T/v8w.json" 2> "$T/v8w.err" \
    || { echo "FAIL: verify at ctx 32 > window 8: $(tail -3 "$T/v8w.err")"; exit 1; }
python3 - "$T/v64.json" "$T/v8.json" "$T/v8w.json" <<'PY'
import json, math, sys
for path, want in ((sys.argv[1], ["bf16", "naive", "hadamard", "oscar"]), (sys.argv[2], ["bf16", "naive", "hadamard"]),
                   (sys.argv[3], ["bf16", "naive", "hadamard", "oscar"])):
    ms = {m["name"]: m for m in json.load(open(path))["methods"]}
    assert sorted(ms) == sorted(want), (path, sorted(ms))
    assert ms["bf16"]["mean"]["k_rel_mse"] == 0 and ms["bf16"]["next_token"]["kl_mean"] == 0, path
    for n in want[1:]:   # INT2: a finite perplexity, a real error, next-token distributions that move
        m = ms[n]
        assert math.isfinite(m["ppl"]) and m["mean"]["k_rel_mse"] > 0 and m["mean"]["out_rel"] > 0, (path, n)
        assert m["next_token"]["kl_mean"] > 0 and m["ppl"] != ms["bf16"]["ppl"], (path, n)
PY
echo "ok: oscar-calibrate on Gemma 3 (tiny-gemma3 shape and fixture, query_pre_attn_scalar 24): artifacts written, identical across threads, sequences longer than the window calibrated; oscar-verify runs bf16 and INT2 with the artifact"
