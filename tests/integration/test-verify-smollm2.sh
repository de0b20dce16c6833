#!/usr/bin/env bash
# test-verify-smollm2.sh - calibrate -> verify end to end on SmolLM2-135M: the real oscar-calibrate on
# Pride and Prejudice (4096 tokens, 512-token sequences, clip search over 1.00/0.96/0.92/0.88), then
# oscar-verify with EVERY method in one run on held-out Persuasion (1 window of 2048 tokens, sink 32,
# recent 128, metrics on 256 tokens > sink + recent). About 8 CPU-minutes (2 cores: ~4 minutes).
# Checks the perplexity ordering bf16 <= oscar < hadamard < naive (and the same for oscar-fixed, the
# artifact's rotations with clips 0.96/0.92), BPE per method (INT2 methods < INT4 < 16), the report.json
# schema keys (lib/verify/README.md), hidden drift per layer, and that layers.svg parses as XML with one
# series per method in each of its 4 panels. Skips (77) without the model.
set -euo pipefail
B=${OSCAR_BUILD:-build}
C=${OSCAR_CACHE:-$HOME/.cache/oscar}
M=$C/models/SmolLM2-135M-Instruct.Q4_1.gguf
PY=$C/venv/bin/python
[ -f "$M" ] && [ -x "$PY" ] || { echo "skip: model or venv missing"; exit 77; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"$B/bin/oscar-calibrate" -m "$M" -f "$C/corpora/austen/prideprejudice.txt" --tokens 4096 -c 512 \
    --clip-search 1.00,0.96,0.92,0.88 -o "$T/art" -q
"$B/bin/oscar-verify" --model "$M" --rotations "$T/art" --corpus "$C/corpora/austen/persuasion.txt" \
    --ctx 2048 --tokens 2048 --sink 32 --recent 128 --metric-tokens 256 --report "$T/rep" --update-card
grep -q "oscar-verify:begin" "$T/art/README.md"
"$PY" - "$T/rep" <<'PYEOF'
import json, math, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
r = json.load(open(d + "/report.json"))
assert r["version"] == 1
assert set(r) >= {"model", "model_name", "rotations", "corpus", "corpus_sha256", "config", "corpus_tokens",
                  "wall_seconds", "methods"}, set(r)
cfg = r["config"]
assert (cfg["ctx"], cfg["sink"], cfg["recent"], cfg["windows"]) == (2048, 32, 128, 1), cfg
names = [m["name"] for m in r["methods"]]
assert names == ["bf16", "naive", "hadamard", "oscar", "oscar-fixed", "oscar-lm", "int4-bdh", "kivi"], names
p = {m["name"]: m["ppl"] for m in r["methods"]}
bpe = {m["name"]: m["bpe"] for m in r["methods"]}
print("ppl", p)
print("bpe", bpe)
assert all(math.isfinite(v) and v > 1 for v in p.values()), p
assert p["bf16"] <= p["oscar"] < p["hadamard"] < p["naive"], p
assert p["bf16"] <= p["oscar-fixed"] < p["hadamard"], p
assert bpe["bf16"] == 16 and bpe["naive"] == bpe["hadamard"] == bpe["oscar"] < bpe["int4-bdh"] < 16, bpe
for m in r["methods"]:
    assert len(m["layers"]) == 30
    for L in m["layers"]:
        assert {"k_rel_mse", "v_rel_mse", "logit_err", "kl", "out_rel", "hidden_drift", "n_rows", "n_rows_int2",
                "n_pairs", "n_pairs_int2"} <= set(L)
    drift = [L["hidden_drift"] for L in m["layers"]]
    if m["name"] == "bf16":
        assert max(drift) == 0 and m["mean"]["k_rel_mse"] == 0, m["mean"]
    else:
        assert drift[-1] > 0 and m["mean"]["k_rel_mse"] > 0 and m["layers"][0]["n_rows_int2"] > 0, m["name"]
svg = ET.parse(d + "/layers.svg").getroot()
series = [e for e in svg.iter() if e.get("data-method")]
assert len(series) == 4 * len(r["methods"]), len(series)   # every method in each of the 4 panels
assert {e.get("data-method") for e in series} == set(p)
assert "| oscar |" in open(d + "/summary.md").read()
PYEOF
