#!/usr/bin/env bash
# test-calibrate-gemma3.sh - oscar-calibrate end to end on Gemma 3's layer (the shape of
# tests/fixtures/models/tiny-gemma3-hub with a window of 64: 5 sliding layers with the local RoPE base and a
# global one with linear scaling, (1 + w) and sandwich norms, GELU-tanh; random weights and synthetic tokens:
# the fixtures have no tokenizer): the artifact is written and names the architecture, --threads 1 and 2
# give identical bytes, and a sequence longer than the window is refused (the statistics assume full
# causal attention).
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
set +e
"$CAL" "${common[@]}" -c 80 -t 2 -o "$T/c" 2> "$T/err"
rc=$?
set -e
[ "$rc" -ne 0 ] || { echo "FAIL: seq_len 80 > window 64 was accepted"; exit 1; }
grep -q "sliding-window attention (sliding_window = 64)" "$T/err" || { echo "FAIL: message: $(cat "$T/err")"; exit 1; }
[ ! -e "$T/c/oscar.safetensors" ] || { echo "FAIL: a refused run wrote an artifact"; exit 1; }
echo "ok: oscar-calibrate on Gemma 3's layer (tiny-gemma3 shape): artifact written, identical across threads, long sequences refused"
