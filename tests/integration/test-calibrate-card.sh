#!/usr/bin/env bash
# test-calibrate-card.sh - the model card oscar-calibrate writes, on SmolLM2-135M
# with a small budget (one forward run, the rest replayed from its activation store):
#  1. --base-model and --dataset: base_model and datasets in the YAML, licence from the GGUF;
#  2. the default GGUF (no source keys): no base_model, "no Hub id known", the display name kept;
#  3. --model in the HF cache layout, and as a Hub id served offline from that cache: the id;
#  4. a failed gate: written and marked FAILED without --strict; --strict exits 1, writes nothing;
#  5. bad --base-model / --dataset ids: usage errors, nothing written.
# Every card passes the libyaml check (oscar-card-check) and the huggingface_hub
# ModelCard parser (an independent oracle), and its YAML agrees with oscar.json.
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
[ -x "$PY" ] && "$PY" -c 'import huggingface_hub' 2>/dev/null || skip "venv with huggingface_hub missing"
CAL=$B/bin/oscar-calibrate
CHECK=$B/bin/oscar-card-check
# grouping layer: the card's SGLang and llama.cpp recipes below are for one rotation per layer
ARGS=(--tokens 512 -c 128 --heldout 1 --sink 16 --recent 32 --clip-search 1.0:0.8:0.04 -q --rotation-grouping layer)
ID=HuggingFaceTB/SmolLM2-135M-Instruct

# card DIR BASE_MODEL_ID|- DATASETS(comma list)|- : the YAML, the text and oscar.json agree
card() {
    "$CHECK" "$1/README.md" || fail "$1: card check: see above"
    "$PY" - "$@" <<'PY' || fail "$1/README.md: $(head -c 1200 "$1/README.md")"
import json, sys
from huggingface_hub import ModelCard
d, want_id, want_ds = sys.argv[1], sys.argv[2], sys.argv[3]
c = ModelCard.load(d + "/README.md")
meta = json.load(open(d + "/oscar.json"))["metadata"]
text = c.text
assert c.data.library_name == "oscar", c.data.library_name
if want_id == "-":
    assert c.data.base_model is None and "oscar.base_model_id" not in meta, (c.data.base_model, meta)
    assert "(no Hub id known; pass --base-model)" in text
else:
    assert c.data.base_model == [want_id] and meta["oscar.base_model_id"] == want_id, (c.data.base_model, meta)
assert c.data.datasets == (None if want_ds == "-" else want_ds.split(",")), c.data.datasets
# the licence: the default GGUF's general.license
assert c.data.license == "apache-2.0" and meta["oscar.base_model_license"] == "apache-2.0", c.data.license
assert meta["oscar.base_model"] == "Smollm2 135M 8k Lc100K Mix1 Ep2", meta["oscar.base_model"]
# the gate: front matter, oscar.json and the text say the same
gate = c.data.to_dict()["oscar_gate"]
assert gate == meta["oscar.gate"] in ("pass", "fail"), (gate, meta["oscar.gate"])
verdict, other = ("**PASS**", "**FAILED**") if gate == "pass" else ("**FAILED**", "**PASS**")
assert verdict in text and other not in text, gate
for s in ("## Calibration data", "`prideprejudice.txt`, sha256 `" + meta["oscar.calib_sha256"] + "`",
          meta["oscar.calib_tokens"] + " calibration tokens", "## Usage\n", "```sh\noscar-zoo pull <repo> --path <path>",
          "--target sglang --out rot/", "--target llamacpp --base", "## Serving\n",
          "export SGLANG_OSCAR_K_CLIP_RATIO=" + meta["oscar.k_clip_ratio"] + "\n", "With `--strict`, a failed gate exits 1 and writes nothing",
          "```bibtex\n@misc{", "eprint        = {2605.17757}", "primaryClass  = {cs.LG}"):
    assert s in text, s
PY
}

# 1. a forward run that saves its activations: --base-model, two datasets (one repeated)
"$CAL" -m "$MODEL" -f "$CORPUS" "${ARGS[@]}" --save-activations "$T/act.h5" -o "$T/a" \
    --base-model "$ID" --dataset me/austen --dataset nltk/brown --dataset me/austen || fail "calibrate with --base-model"
card "$T/a" "$ID" me/austen,nltk/brown
grep -q '"oscar.base_model_id_source": "--base-model"' "$T/a/oscar.json" || fail "id source not recorded"

# 2. the default GGUF names no repo: no Hub id
"$CAL" -m "$MODEL" --from-activations "$T/act.h5" "${ARGS[@]}" -o "$T/b" || fail "replay without --base-model"
card "$T/b" - -

# 3. the HF cache layout, and a Hub id served offline from it
SNAP=$T/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots/0123456789abcdef0123456789abcdef01234567
mkdir -p "$SNAP" "$T/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/refs"
ln -s "$MODEL" "$SNAP/model.gguf"
printf 0123456789abcdef0123456789abcdef01234567 > "$T/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/refs/main"
"$CAL" -m "$SNAP/model.gguf" --from-activations "$T/act.h5" "${ARGS[@]}" -o "$T/c" || fail "replay from the cache path"
card "$T/c" "$ID" -
grep -q '"oscar.base_model_id_source": "the HF cache path of --model"' "$T/c/oscar.json" || fail "cache path source"
HF_HUB_OFFLINE=1 HF_HUB_CACHE=$T/hub "$CAL" -m "$ID:model.gguf" --from-activations "$T/act.h5" "${ARGS[@]}" \
    -o "$T/d" 2> "$T/err" || fail "replay with --model $ID:model.gguf: $(cat "$T/err")"
card "$T/d" "$ID" -
grep -q '"oscar.base_model_id_source": "--model"' "$T/d/oscar.json" || fail "Hub id source"

# 4. clipping at 2% of the range ruins OSCAR against Hadamard's fixed clips: the gate fails
FAILING=(--tokens 512 -c 128 --heldout 1 --sink 16 --recent 32 --clip 0.02,0.02 -q --rotation-grouping layer)
"$CAL" -m "$MODEL" --from-activations "$T/act.h5" "${FAILING[@]}" -o "$T/f" --base-model "$ID" \
    || fail "a failed gate without --strict must still write (exit 0)"
grep -q '"oscar.gate": "fail"' "$T/f/oscar.json" || fail "the gate did not fail: pick another failing setting"
card "$T/f" "$ID" -
cp -r "$T/f" "$T/f.before"
"$CAL" -m "$MODEL" --from-activations "$T/act.h5" "${FAILING[@]}" -o "$T/s" --strict 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && [ ! -e "$T/s" ] && grep -q "strict" "$T/err" || fail "--strict, new --out: rc=$rc $(cat "$T/err")"
"$CAL" -m "$MODEL" --from-activations "$T/act.h5" "${FAILING[@]}" -o "$T/f" --strict 2> /dev/null; rc=$?
[ $rc -eq 1 ] && diff -r "$T/f" "$T/f.before" > /dev/null || fail "--strict changed an existing artifact (rc=$rc)"

# 5. bad ids are usage errors naming the option and the id
for bad in "--base-model not-an-id" "--base-model a/b/c" "--dataset me/aus--ten" "--dataset x"; do
    read -r opt val <<< "$bad"
    "$CAL" -m "$MODEL" --from-activations "$T/act.h5" "${ARGS[@]}" -o "$T/e" "$opt" "$val" 2> "$T/err"; rc=$?
    [ $rc -eq 2 ] && [ ! -e "$T/e" ] && grep -q -- "$opt '$val': not a Hub repo id" "$T/err" \
        || fail "$bad: rc=$rc $(cat "$T/err")"
done
echo "ok: cards with and without a Hub id, from the cache path and a Hub id, a failed gate with and without --strict"
