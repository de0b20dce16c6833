#!/usr/bin/env bash
# test-verify-smollm2.sh - oscar-verify end to end on SmolLM2-135M: calibrate a minimal OSCAR artifact on
# Pride and Prejudice (test tool), evaluate on held-out Persuasion (1 window of 2048 tokens, sink 32,
# recent 128), check the perplexity ordering bf16 <= oscar < hadamard < naive, the report.json schema
# keys, and that layers.svg parses as XML with one polyline per method. Skips (77) without the model.
set -euo pipefail
B=${OSCAR_BUILD:-build}
C=${OSCAR_CACHE:-$HOME/.cache/oscar}
M=$C/models/SmolLM2-135M-Instruct.Q4_1.gguf
PY=$C/venv/bin/python
[ -f "$M" ] && [ -x "$PY" ] || { echo "skip: model or venv missing"; exit 77; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"$B/bin/oscar-verify-mkartifact" "$M" "$C/corpora/austen/prideprejudice.txt" 4096 512 "$T/art" >/dev/null
"$B/bin/oscar-verify" --model "$M" --rotations "$T/art" --corpus "$C/corpora/austen/persuasion.txt" \
    --ctx 2048 --tokens 2048 --sink 32 --recent 128 --metric-tokens 384 \
    --methods bf16,naive,hadamard,oscar --report "$T/rep" --update-card --quiet
grep -q "oscar-verify:begin" "$T/art/README.md"
"$PY" - "$T/rep" <<'PYEOF'
import json, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
r = json.load(open(d + "/report.json"))
assert r["version"] == 1 and r["config"]["ctx"] == 2048
p = {m["name"]: m["ppl"] for m in r["methods"]}
print("ppl", p)
assert p["bf16"] <= p["oscar"] < p["hadamard"] < p["naive"], p
for m in r["methods"]:
    assert len(m["layers"]) == 30 and {"k_rel_mse", "kl", "out_rel", "hidden_drift"} <= set(m["layers"][0])
svg = ET.parse(d + "/layers.svg").getroot()
lines = [e for e in svg.iter() if e.tag.endswith("polyline")]
assert len(lines) == len(r["methods"]), len(lines)
assert {e.get("data-method") for e in lines} == set(p)
PYEOF
