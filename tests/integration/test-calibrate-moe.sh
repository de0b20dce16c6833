#!/usr/bin/env bash
# test-calibrate-moe.sh - oscar-calibrate end to end on a mixture-of-experts model (the shape of
# tests/fixtures/models/tiny-qwen3-moe: 8 experts, top-2, every layer sparse, random weights and
# synthetic tokens, layers streamed through the layer-major CPU pass): the artifact is written
# and names the architecture, --threads 1 and 2 give identical bytes (the expert sums run in a
# fixed order), and a run with checkpoints gives the same bytes too.
set -euo pipefail
B=${OSCAR_BUILD:-build}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CAL="$B/bin/oscar-calibrate"
common=(--random-init tiny-qwen3-moe --tokens 512 -c 64 --heldout 1 --sink 4 --recent 8 -q)

"$CAL" "${common[@]}" -t 2 -o "$T/a"
for f in oscar.safetensors oscar.json README.md; do [ -s "$T/a/$f" ] || { echo "FAIL: missing $f"; exit 1; }; done
grep -q '"oscar.architecture": "qwen3moe"' "$T/a/oscar.json" || { echo "FAIL: architecture not recorded"; exit 1; }
grep -q '"oscar.num_layers": "3"' "$T/a/oscar.json" || { echo "FAIL: layer count"; exit 1; }
"$CAL" "${common[@]}" -t 1 -o "$T/b"
cmp "$T/a/oscar.safetensors" "$T/b/oscar.safetensors" || { echo "FAIL: --threads 1 and 2 differ"; exit 1; }
"$CAL" "${common[@]}" -t 2 -o "$T/c" --checkpoint-every 64
cmp "$T/a/oscar.safetensors" "$T/c/oscar.safetensors" || { echo "FAIL: a checkpointed run differs"; exit 1; }
echo "ok: oscar-calibrate on a tiny MoE (qwen3moe): artifact written, identical across threads and checkpoints"
