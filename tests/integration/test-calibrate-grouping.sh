#!/usr/bin/env bash
# test-calibrate-grouping.sh - --rotation-grouping auto (lib/calibrate/grouping.c), the default:
#  1. on the tiny Qwen3-MoE fixture (its weights, a byte tokenizer): runs with layer, head and
#     auto; auto keeps per layer the candidate with the lower held-out post-W_O error (each
#     candidate's error is what the forced run's gate reports; ties keep layer), so its gate
#     mean is below both; the fixture has layers of both kinds; the choice is in oscar.json,
#     the safetensors __metadata__, the summary (--json), the card and the stderr table; a
#     layer kept per layer holds its one rotation in every head;
#  2. the mixed artifact through the reader: oscar-verify runs with it, export --format pt
#     --target oscar writes the per-head files, export --target sglang refuses it;
#  3. --target sglang resolves auto to layer (recorded with the reason, [D,D] tensors);
#     an explicit --rotation-grouping head for sglang stays a usage error;
#  4. SmolLM2: SIGKILL after a checkpoint, --resume: the same bytes as a straight run.
set -u
. "$(dirname "$0")/common.sh"
CAL=$B/bin/oscar-calibrate
FX=tests/fixtures/models/tiny-qwen3-moe
mkdir -p "$T/m"
cp "$FX/config.json" "$FX/model.safetensors" "$T/m/"
python3 tests/tools/make-byte-tokenizer.py "$T/m/tokenizer.json" --below 128
for i in $(seq 1 60); do echo "It is a truth universally acknowledged, line $i, that experts must be routed."; done > "$T/c.txt"
for i in $(seq 1 20); do echo "Held-out text number $i says something else entirely about the weather."; done > "$T/h.txt"
fx=(-m "$T/m" -f "$T/c.txt" --tokens 1024 -c 32 --heldout 2 --sink 4 --recent 8 -t 2)

# 1. layer, head, auto
for g in layer head; do
    "$CAL" "${fx[@]}" --rotation-grouping $g --json -o "$T/$g" > "$T/$g.json" 2> "$T/$g.err" || fail "$g: $(tail -3 "$T/$g.err")"
done
"$CAL" "${fx[@]}" -o "$T/auto" 2> "$T/auto.err" || fail "auto (the default): $(tail -3 "$T/auto.err")"
grep -q "auto: per-layer  per-head  kept" "$T/auto.err" && grep -q "^grouping auto: [0-9]* of 3 layers per KV head" "$T/auto.err" \
    || fail "stderr table without the choice: $(cat "$T/auto.err")"
"$CAL" "${fx[@]}" --rotation-grouping auto -q --json -o "$T/auto2" > "$T/auto.json" || fail "auto --json"
cmp -s "$T/auto/oscar.safetensors" "$T/auto2/oscar.safetensors" || fail "auto is not the default"
python3 - "$T" <<'PY' || fail "auto's choice"
import json, struct, sys
T = sys.argv[1]
def summ(g): return json.load(open(f"{T}/{g}.json"))["summary"]
lay, head, auto = (summ(g) for g in ("layer", "head", "auto"))
gl = lambda s: [x[2] for x in s["gate"]["layers"]]
g = auto["grouping"]
assert g["mode"] == "auto", g
L = len(gl(auto))
for l in range(L):
    el, eh = g["err_layer"][l], g["err_head"][l]
    assert abs(el - gl(lay)[l]) <= 1e-5 * el and abs(eh - gl(head)[l]) <= 1e-5 * eh, (l, el, eh, gl(lay), gl(head))
    assert g["layers"][l] == ("kv_head" if eh < el else "layer"), (l, g)
    assert abs(gl(auto)[l] - min(el, eh)) <= 1e-6 * min(el, eh), (l, gl(auto), el, eh)
assert set(g["layers"]) == {"layer", "kv_head"}, g["layers"]          # the fixture exercises both
assert auto["gate"]["mean"]["oscar"] < min(lay["gate"]["mean"]["oscar"], head["gate"]["mean"]["oscar"])
meta = json.load(open(f"{T}/auto2/oscar.json"))["metadata"]
want = ",".join(g["layers"])
assert meta["oscar.grouping_layers"] == want and meta["oscar.source_grouping"] == "kv_head", meta
assert meta["oscar.grouping_auto"].startswith("per layer by held-out post-W_O error"), meta
b = open(f"{T}/auto2/oscar.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert h["__metadata__"]["oscar.grouping_layers"] == want, h["__metadata__"]
for l, c in enumerate(g["layers"]):
    t = h[f"layers.{l}.k_rotation"]
    assert t["shape"][0] == 2, t
    if c == "layer":   # the one rotation in both heads
        a, e = t["data_offsets"]; r = b[8 + n + a: 8 + n + e]
        assert r[: len(r) // 2] == r[len(r) // 2:], l
for g0 in ("layer", "head"):
    assert "grouping" not in summ(g0), g0   # a forced grouping records nothing new
card = open(f"{T}/auto2/README.md").read()
assert "--rotation-grouping auto" in card and "keep per-KV-head rotations" in card, card[:400]
print("auto:", g["layers"], "gate means layer %.5g head %.5g auto %.5g" % (lay["gate"]["mean"]["oscar"],
      head["gate"]["mean"]["oscar"], auto["gate"]["mean"]["oscar"]))
PY
echo "ok 1 - auto keeps the lower held-out error per layer and records it"

# 2. the mixed artifact through the reader, verify and the exports
"$B/bin/oscar-verify" -m "$T/m" -r "$T/auto" -f "$T/h.txt" --ctx 32 --tokens 64 --metric-tokens 32 --sink 4 --recent 8 \
    -t 2 --methods bf16,oscar --json > "$T/v.json" 2> "$T/v.err" || fail "verify with the auto artifact: $(tail -3 "$T/v.err")"
grep -q '"name": "oscar"' "$T/v.json" || fail "verify ran no oscar method"
"$B/bin/oscar-zoo" export "$T/auto" --format pt --target oscar --out "$T/pt" > /dev/null 2>&1 || fail "export pt per head"
[ -s "$T/pt/k_rotation_perhead.pt" ] || fail "no per-head pt"
"$B/bin/oscar-zoo" export "$T/auto" --format pt --target sglang --out "$T/pts" > /dev/null 2> "$T/err" && fail "sglang export took per-head rotations"
grep -q "per-KV-head rotations" "$T/err" || fail "sglang export refusal: $(cat "$T/err")"
echo "ok 2 - the auto artifact loads in verify, exports per head, and sglang's export refuses it"

# 3. --target sglang: auto resolves to layer, recorded; head stays refused
"$CAL" "${fx[@]}" --target sglang --sink 32 --recent 64 -c 128 -q -o "$T/sgl" || fail "auto with --target sglang"
python3 - "$T/sgl/oscar.json" <<'PY' || fail "sglang resolution"
import json, sys
d = json.load(open(sys.argv[1]))
m, s = d["metadata"], d["summary"]
assert m["oscar.source_grouping"] == "layer" and "oscar.grouping_layers" not in m, m
assert m["oscar.grouping_auto"].startswith("resolved to layer: --target sglang"), m["oscar.grouping_auto"]
assert s["grouping"] == {"mode": "auto", "resolved": "layer", "why": m["oscar.grouping_auto"][len("resolved to layer: "):]}, s["grouping"]
PY
"$CAL" "${fx[@]}" --target sglang --sink 32 --recent 64 -c 128 --rotation-grouping head -q -o "$T/sgh" 2> "$T/err"; rc=$?
[ $rc = 2 ] && grep -q "rotation-grouping layer" "$T/err" || fail "head for sglang: rc $rc $(cat "$T/err")"
echo "ok 3 - --target sglang resolves auto to layer with the reason; head is refused"

# 4. kill + --resume on SmolLM2 (the choice is in the checkpoint's results)
if [ -f "$MODEL" ] && [ -f "$CORPUS" ]; then
    ARGS=(-m "$MODEL" -f "$CORPUS" --tokens 256 -c 64 --heldout 1 --sink 8 --recent 16 --clip-search 1.0:0.8:0.05 -t 2 -q)
    "$CAL" "${ARGS[@]}" -o "$T/s" || fail "SmolLM2 auto run"
    grep -q '"oscar.grouping_layers"' "$T/s/oscar.json" || fail "SmolLM2: no choice recorded"
    "$CAL" "${ARGS[@]}" -o "$T/r" --checkpoint-every 64 & pid=$!
    for _ in $(seq 1 600); do [ -f "$T/r.ckpt" ] && break; sleep 0.05; done
    [ -f "$T/r.ckpt" ] || { kill -9 $pid; fail "no checkpoint appeared"; }
    sleep 0.5; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    [ -e "$T/r/oscar.safetensors" ] && echo "note: run finished before the kill"
    "$CAL" "${ARGS[@]}" -o "$T/r" --checkpoint-every 64 --resume || fail "resume failed"
    for f in oscar.safetensors oscar.json README.md; do
        cmp -s "$T/s/$f" "$T/r/$f" || fail "$f differs after kill + resume (auto)"
    done
    echo "ok 4 - SmolLM2 auto: kill + resume gives the same bytes ($(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metadata']['oscar.grouping_layers'].count('kv_head'))" "$T/s/oscar.json") of 30 layers per head)"
else
    echo "skip 4: SmolLM2 or its corpus missing"
fi
