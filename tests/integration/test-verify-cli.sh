#!/usr/bin/env bash
# test-verify-cli.sh - oscar-verify's command line on SmolLM2-135M with a synthetic artifact
# (oscar-make-artifact: random orthogonal rotations) and tiny windows (ctx 128), so it runs in seconds:
#  - usage errors exit 2, unreadable model / artifact / corpus exit 1 with a message naming the file;
#  - --corpus as a text file, a JSONL file (--jsonl-field) and a directory give the token counts of
#    lib/tokenizer's corpus reader (checked against each other), --json prints the report;
#  - --rotations and --model as Hub ids through the Hub emulator (online, then offline from the cache);
#  - --update-card twice leaves one block and a byte-identical README.md;
#  - integrity: an artifact of another model, a tampered rotation (low bit: the sha256 in oscar.json;
#    exponent bit with a matching sha256: orthogonality), a missing sha256 or oscar.json exit 1 naming
#    the problem; --force runs them with a warning.
# Skips (77) without the model, the venv, or the emulator prerequisites.
source "$(dirname "$0")/hub-lib.sh"
V="$BUILD/bin/oscar-verify"
MK="$BUILD/bin/oscar-make-artifact"
C=${OSCAR_CACHE:-$HOME/.cache/oscar}
M=$C/models/SmolLM2-135M-Instruct.Q4_1.gguf
P=$C/corpora/austen/persuasion.txt
[ -f "$M" ] && [ -f "$P" ] && [ -x "$VENV_PY" ] || { echo "skip: model, corpus or venv missing"; exit 77; }
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
SMALL=(--ctx 128 --tokens 128 --sink 8 --recent 16 --metric-tokens 64 --threads 2)

MSHA=$(sha256sum "$M" | cut -d' ' -f1)   # the model's identity (lib/model: sha256 of the GGUF)
"$MK" "$T/art" 30 9 3 64 0 7 llama "$MSHA" >/dev/null 2>&1 || fail "make artifact"
head -c 20000 "$P" > "$T/c.txt"

# ---- usage errors: 2 ----
want() { # want RC GREP cmd...
    local rc=$1 pat=$2; shift 2
    "$@" >"$T/out" 2>"$T/err"; local got=$?
    [ "$got" = "$rc" ] || fail "$* -> exit $got, want $rc: $(head -3 "$T/err")"
    grep -q -- "$pat" "$T/err" || fail "$*: stderr lacks '$pat': $(head -3 "$T/err")"
}
want 2 "required" "$V"
want 2 "required" "$V" --model "$M"
want 2 "unknown method 'bogus'" "$V" --model "$M" --corpus "$T/c.txt" --methods bf16,bogus
want 2 "'oscar' needs --rotations" "$V" --model "$M" --corpus "$T/c.txt" --methods bf16,oscar
want 2 "'q2_0' needs --rotations" "$V" --model "$M" --corpus "$T/c.txt" --methods bf16,q2_0
want 2 "given twice" "$V" --model "$M" --corpus "$T/c.txt" --methods bf16,bf16
want 2 "update-card" "$V" --model "$M" --corpus "$T/c.txt" --update-card
want 2 "scale-dtype" "$V" --model "$M" --corpus "$T/c.txt" --scale-dtype int8
want 2 "out of range" "$V" --model "$M" --corpus "$T/c.txt" --ctx 1
ok "usage errors exit 2 with a reason"

# ---- bad files: 1, naming the file ----
want 1 "$T/none.gguf" "$V" --model "$T/none.gguf" --corpus "$T/c.txt" --methods bf16
mkdir -p "$T/badart" && printf 'garbage' > "$T/badart/oscar.safetensors"
want 1 "badart" "$V" --model "$M" --rotations "$T/badart" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}"
want 1 "$T/none.txt" "$V" --model "$M" --corpus "$T/none.txt" --methods bf16 "${SMALL[@]}"
head -c 200 "$P" > "$T/short.txt"
want 1 "at least one window" "$V" --model "$M" --corpus "$T/short.txt" --methods bf16 "${SMALL[@]}"
"$MK" "$T/art8" 8 9 3 64 0 7 llama "$MSHA" >/dev/null 2>&1 || fail "make 8-layer artifact"
want 1 "art8: artifact has 8 layers" "$V" --model "$M" --rotations "$T/art8" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}"
# the llama.cpp fork's Q2_0 groups 128 elements of a token row: SmolLM2 (D 64, 3 KV heads) crosses heads
want 1 "groups cross heads" "$V" --model "$M" --rotations "$T/art" --corpus "$T/c.txt" --methods bf16,q2_0 "${SMALL[@]}"
ok "unreadable model / artifact / corpus and a mismatched artifact exit 1 naming the input"

# ---- outputs checked before any compute, written whole; --tokens beyond the corpus ----
# --model names no file: an error about the model would mean --report was checked too late
mkdir -p "$T/rep-foreign" && echo notes > "$T/rep-foreign/notes.txt"
want 1 "notes.txt" "$V" --model "$T/none.gguf" --corpus "$T/c.txt" --methods bf16 --report "$T/rep-foreign"
echo x > "$T/rep-file"
want 1 "not a directory" "$V" --model "$T/none.gguf" --corpus "$T/c.txt" --methods bf16 --report "$T/rep-file"
# a report that could be written only in part (layers.svg cannot be a file here) is refused up front
mkdir -p "$T/rep-part/layers.svg"
want 1 "layers.svg" "$V" --model "$M" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}" --report "$T/rep-part"
[ "$(ls -A "$T/rep-part")" = layers.svg ] || fail "partial report written: $(ls -A "$T/rep-part")"
for i in 1 2; do
    "$V" --model "$M" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}" --report "$T/rep" --quiet 2>"$T/err" \
        || fail "report run $i: $(cat "$T/err")"
done
[ "$(ls "$T/rep" | tr '\n' ' ')" = "layers.svg report.json summary.md " ] || fail "report files: $(ls -A "$T/rep")"
ls -A "$T" | grep -q '^\.rep\.' && fail "report temporaries left: $(ls -A "$T")"
want 1 "c.txt" "$V" --model "$M" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}" --tokens 1000000
grep -q "1000000" "$T/err" && grep -Eq "[0-9]+ tokens" "$T/err" || fail "--tokens beyond the corpus: $(cat "$T/err")"
want 1 "fewer than the 1000000 of --metric-tokens" "$V" --model "$M" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}" \
    --metric-tokens 1000000
ok "--report checked before compute and replaced whole; --tokens / --metric-tokens beyond the corpus are errors naming it"

# ---- integrity: the recorded sha256, orthogonality, the model's identity; --force ----
flip() { # flip DIR BIT [rehash]: flips BIT of layers.3.v_rotation[5], optionally re-records the sha256
    "$VENV_PY" - "$@" <<'PY' || fail "flip $*"
import hashlib, json, struct, sys
d, bit = sys.argv[1], int(sys.argv[2])
f = d + "/oscar.safetensors"
b = bytearray(open(f, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
off = 8 + n + json.loads(b[8:8 + n])["layers.3.v_rotation"]["data_offsets"][0] + 5 * 4
b[off:off + 4] = struct.pack("<I", struct.unpack("<I", b[off:off + 4])[0] ^ (1 << bit))
open(f, "wb").write(b)
if len(sys.argv) > 3:
    j = json.load(open(d + "/oscar.json"))
    j["files"]["oscar.safetensors"]["sha256"] = hashlib.sha256(b).hexdigest()
    json.dump(j, open(d + "/oscar.json", "w"))
PY
}
forced() { # forced GREP DIR: --force runs DIR with a warning matching GREP (not --json/-q: they silence warnings)
    "$V" --model "$M" --rotations "$2" --corpus "$T/c.txt" --methods bf16,oscar "${SMALL[@]}" --force \
        >"$T/out" 2>"$T/err" || fail "--force $2: $(head -3 "$T/err")"
    grep -q "^oscar " "$T/out" || fail "--force $2: no oscar row in the table"
    grep -q "warning: .*$1.*forced" "$T/err" || fail "--force $2: no warning '$1': $(head -3 "$T/err")"
}
"$MK" "$T/other" 30 9 3 64 0 7 llama >/dev/null 2>&1 || fail "make artifact of another model"
want 1 "other: artifact was calibrated on synthetic (oscar.base_model_sha256 0), but $M has sha256 $MSHA" \
    "$V" --model "$M" --rotations "$T/other" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}"
forced "calibrated on synthetic" "$T/other"
cp -r "$T/art" "$T/lowbit" && flip "$T/lowbit" 0
want 1 "lowbit/oscar.safetensors: sha256 .* records .*: the file was modified or corrupted" \
    "$V" --model "$M" --rotations "$T/lowbit" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}"
forced "modified or corrupted" "$T/lowbit"
cp -r "$T/art" "$T/expbit" && flip "$T/expbit" 23 rehash
want 1 "expbit/oscar.safetensors: artifact: layers.3.v_rotation is not orthogonal" \
    "$V" --model "$M" --rotations "$T/expbit" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}"
forced "not orthogonal" "$T/expbit"
cp -r "$T/art" "$T/nohash"
"$VENV_PY" -c "import json,sys; f=sys.argv[1]; j=json.load(open(f)); del j['files']['oscar.safetensors']['sha256']; \
json.dump(j, open(f, 'w'))" "$T/nohash/oscar.json" || fail "drop the sha256"
want 1 "nohash/oscar.json: no sha256 (64 hex digits) recorded for oscar.safetensors" \
    "$V" --model "$M" --rotations "$T/nohash" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}"
forced "no sha256" "$T/nohash"
cp -r "$T/art" "$T/nojson" && rm "$T/nojson/oscar.json"
want 1 "nojson/oscar.json: missing" "$V" --model "$M" --rotations "$T/nojson" --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}"
forced "oscar.json: missing" "$T/nojson"
ok "another model's artifact, a flipped rotation bit, a missing sha256 / oscar.json exit 1; --force warns and runs"

# ---- --device: cpu is the default simulation; cuda refuses what its kernels cannot do ----
want 2 "'tpu' is not a device (cpu, cuda)" "$V" --model "$M" --corpus "$T/c.txt" --device tpu
"$V" --model "$M" --rotations "$T/art" --corpus "$T/c.txt" --methods bf16,oscar "${SMALL[@]}" --json \
    >"$T/dflt.json" 2>/dev/null || fail "default device"
"$V" --model "$M" --rotations "$T/art" --corpus "$T/c.txt" --methods bf16,oscar "${SMALL[@]}" --json --device cpu \
    >"$T/cpu.json" 2>/dev/null || fail "--device cpu"
"$VENV_PY" -c "import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); \
assert [m['ppl'] for m in a['methods']]==[m['ppl'] for m in b['methods']]" "$T/dflt.json" "$T/cpu.json" \
    || fail "--device cpu differs from the default"
# SmolLM2's head_dim 64 has no CUDA kernel instantiation; without a GPU the backend is absent.
want 1 "cuda" "$V" --model "$M" --rotations "$T/art" --corpus "$T/c.txt" --methods bf16,oscar "${SMALL[@]}" --device cuda
ok "--device cpu equals the default; --device cuda fails cleanly where it cannot run"

# ---- corpus forms ----
"$V" --model "$M" --rotations "$T/art" --corpus "$T/c.txt" --methods bf16,naive,oscar "${SMALL[@]}" --json \
    >"$T/txt.json" 2>"$T/err" || fail "text corpus: $(cat "$T/err")"
"$VENV_PY" - "$T/c.txt" "$T/c.jsonl" "$T/dir" <<'PY' || fail "make corpora"
import json, os, sys
text = open(sys.argv[1], encoding="utf-8").read()
half = len(text) // 2
with open(sys.argv[2], "w") as f:
    for part in (text[:half], text[half:]):
        f.write(json.dumps({"id": 1, "text": part}) + "\n")
os.makedirs(sys.argv[3])
open(sys.argv[3] + "/a.txt", "w").write(text[:half]); open(sys.argv[3] + "/b.txt", "w").write(text[half:])
PY
"$V" --model "$M" --corpus "$T/c.jsonl" --jsonl-field text --methods bf16 "${SMALL[@]}" --json >"$T/jsonl.json" \
    2>"$T/err" || fail "jsonl corpus: $(cat "$T/err")"
"$V" --model "$M" --corpus "$T/dir" --methods bf16 "${SMALL[@]}" --json >"$T/dir.json" 2>"$T/err" \
    || fail "directory corpus: $(cat "$T/err")"
want 1 "c.jsonl" "$V" --model "$M" --corpus "$T/c.jsonl" --jsonl-field body --methods bf16 "${SMALL[@]}"
"$VENV_PY" - "$T" <<'PY' || fail "corpus reports"
import json, sys
t = sys.argv[1]
r = {k: json.load(open(f"{t}/{k}.json")) for k in ("txt", "jsonl", "dir")}
# --tokens 128 < --metric-tokens? no: max(128, 64) tokens are read, the stream is cut there
for k, v in r.items():
    assert v["corpus_tokens"] == 128, (k, v["corpus_tokens"])
    assert v["config"]["ctx"] == 128 and v["config"]["windows"] == 1
# the first window is the first 128 tokens of the same text in all three forms
p = {k: v["methods"][0]["ppl"] for k, v in r.items()}
assert abs(p["txt"] - p["jsonl"]) < 1e-9 * p["txt"] and abs(p["txt"] - p["dir"]) < 1e-9 * p["txt"], p
names = [m["name"] for m in r["txt"]["methods"]]
assert names == ["bf16", "naive", "oscar"], names
assert r["txt"]["corpus_sha256"] and len(r["txt"]["corpus_sha256"]) == 64
PY
ok "--corpus text / JSONL (--jsonl-field) / directory through lib/tokenizer's corpus reader"

# ---- --update-card idempotence ----
cp -r "$T/art" "$T/card"
"$V" --model "$M" --rotations "$T/card" --corpus "$T/c.txt" --methods bf16,oscar "${SMALL[@]}" --threads 1 \
    --update-card --quiet 2>"$T/err" || fail "update-card 1: $(cat "$T/err")"
cp "$T/card/README.md" "$T/readme1"
"$V" --model "$M" --rotations "$T/card" --corpus "$T/c.txt" --methods bf16,oscar "${SMALL[@]}" --threads 1 \
    --update-card --quiet 2>"$T/err" || fail "update-card 2: $(cat "$T/err")"
[ "$(grep -c 'oscar-verify:begin' "$T/card/README.md")" = 1 ] || fail "card has more than one block"
cmp -s "$T/readme1" "$T/card/README.md" || fail "second --update-card changed README.md: $(diff "$T/readme1" "$T/card/README.md" | head)"
ok "--update-card twice: one block, byte-identical README.md"

# ---- Hub ids ----
start_emulator
$ZOO push "$T/art" --repo me/rot --path-in-repo smol/t --quiet >/dev/null || fail "push artifact"
"$V" --model "$M" --rotations me/rot:smol/t --corpus "$T/c.txt" --methods bf16,oscar "${SMALL[@]}" --json \
    >"$T/hub.json" 2>"$T/err" || fail "verify with a Hub artifact: $(cat "$T/err")"
HF_HUB_OFFLINE=1 "$V" --model "$M" --rotations me/rot@main:smol/t --corpus "$T/c.txt" --methods bf16,oscar \
    "${SMALL[@]}" --json >"$T/hub2.json" 2>"$T/err" || fail "offline from the cache: $(cat "$T/err")"
"$VENV_PY" - "$T" <<'PY' || fail "hub reports"
import json, sys
t = sys.argv[1]
a, b, l = (json.load(open(f"{t}/{k}.json")) for k in ("hub", "hub2", "txt"))
assert a["rotations"] == "me/rot:smol/t", a["rotations"]
pa = {m["name"]: m["ppl"] for m in a["methods"]}; pb = {m["name"]: m["ppl"] for m in b["methods"]}
pl = {m["name"]: m["ppl"] for m in l["methods"]}
assert pa == pb and pa["oscar"] == pl["oscar"], (pa, pb, pl)   # same artifact bytes, same numbers
PY
HF_HUB_OFFLINE=1 "$V" --model me/none:m.gguf --corpus "$T/c.txt" --methods bf16 "${SMALL[@]}" >/dev/null 2>"$T/err"
[ $? = 1 ] && grep -q "me/none" "$T/err" || fail "offline --model miss: $(cat "$T/err")"
ok "--rotations owner/name:path through the Hub (online, then offline), --model Hub id resolved"
echo "test-verify-cli: $n checks passed"
