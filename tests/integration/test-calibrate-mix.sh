#!/usr/bin/env bash
# test-calibrate-mix.sh - oscar-calibrate with several --corpus PATH@SHARE
# (lib/calibrate/corpus-mix.c; test-corpus-mix checks which tokens land where):
#  1. one source with a share lays its stream out as a plain --corpus does: the
#     same tensors (oscar.safetensors past its metadata header), other provenance;
#  2. a mix: the same artifact bytes with 1 and 2 threads; every source, its
#     normalised share, token counts and sha256 (= sha256sum of the file) in
#     oscar.json, the card and --json; other shares give other rotations;
#  3. --save-activations then --from-activations on a mix: identical artifact
#     (the source list survives the store);
#  4. --resume of a killed mix run: refused on other shares (the corpus sha256 covers
#     them), completes on the same mix with the same source list;
#  5. refusals: missing file, bad share, repeated source, shares on some only,
#     a source too short for its share, --allow-short with a mix, each naming it.
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
P=$AUSTEN/persuasion.txt
[ -f "$P" ] || skip "persuasion.txt missing"
ARGS=(-m "$MODEL" --tokens 320 -c 64 --heldout 2 --sink 8 --recent 16 --clip-search 1.0:0.9:0.1 -q)
tensors() { python3 -c 'import struct,sys; f=open(sys.argv[1],"rb"); n=struct.unpack("<Q",f.read(8))[0]; f.seek(8+n); sys.stdout.buffer.write(f.read())' "$1"; }
meta() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"][sys.argv[2]])' "$1/oscar.json" "$2"; }

# 1. X@1 == X for the tensors
"$CAL" "${ARGS[@]}" -t 2 -f "$CORPUS" -o "$T/plain" || fail "plain run failed"
"$CAL" "${ARGS[@]}" -t 2 -f "$CORPUS@1" -o "$T/one" || fail "one-source mix failed"
cmp -s <(tensors "$T/plain/oscar.safetensors") <(tensors "$T/one/oscar.safetensors") \
    || fail "-f X@1 gave other tensors than -f X"
[ "$(meta "$T/one" oscar.calib_corpus)" = "prideprejudice.txt@1" ] || fail "one-source name: $(meta "$T/one" oscar.calib_corpus)"
grep -q calib_corpus_sources "$T/plain/oscar.json" && fail "a plain --corpus grew a source list"

# 2. a mix: threads, provenance, shares matter
MIX=(-f "$CORPUS@2" -f "$P@1" -f "$AUSTEN/emma.txt@1")   # normalised 0.5 / 0.25 / 0.25
"$CAL" "${ARGS[@]}" -t 1 "${MIX[@]}" -o "$T/m1" --json > "$T/m1.json" || fail "mix -t 1 failed"
"$CAL" "${ARGS[@]}" -t 2 "${MIX[@]}" -o "$T/m2" || fail "mix -t 2 failed"
for f in oscar.safetensors oscar.json README.md; do
    cmp -s "$T/m1/$f" "$T/m2/$f" || fail "$f differs between 1 and 2 threads"
done
cmp -s <(tensors "$T/plain/oscar.safetensors") <(tensors "$T/m1/oscar.safetensors") && fail "the mix gave Austen-only tensors"
python3 - "$T/m1" "$T/m1.json" "$CORPUS" "$P" "$AUSTEN/emma.txt" <<'PY' || fail "mix provenance"
import hashlib, json, sys
art, js, files = sys.argv[1], sys.argv[2], sys.argv[3:]
meta = json.load(open(art + "/oscar.json"))["metadata"]
src = json.loads(meta["oscar.calib_corpus_sources"])
# 5 sequences of 64 (320 tokens) by 0.5/0.25/0.25: 2.5/1.25/1.25 -> 3/1/1; held-out 2: 1/0.5/0.5 -> 1/1/0
want = [("prideprejudice.txt", 0.5, 192, 64), ("persuasion.txt", 0.25, 64, 64), ("emma.txt", 0.25, 64, 0)]
assert [(s["name"], s["share"], s["tokens"], s["heldout_tokens"]) for s in src] == want, src
for s, f in zip(src, files):
    assert s["sha256"] == hashlib.sha256(open(f, "rb").read()).hexdigest(), (s, f)
assert meta["oscar.calib_corpus"] == "prideprejudice.txt@0.5+persuasion.txt@0.25+emma.txt@0.25", meta["oscar.calib_corpus"]
assert meta["oscar.calib_sha256"] == hashlib.sha256(meta["oscar.calib_corpus_sources"].encode()).hexdigest()
assert meta["oscar.calib_tokens"] == "320" and meta["oscar.calib_heldout_tokens"] == "128", meta
card = open(art + "/README.md").read()
for s in src:
    assert "`%s`: share %g, %d calibration + %d held-out tokens, sha256 `%s`" % (
        s["name"], s["share"], s["tokens"], s["heldout_tokens"], s["sha256"]) in card, s["name"]
j = json.load(open(js))
assert j["corpus"]["sources"] == src and j["corpus"]["sha256"] == meta["oscar.calib_sha256"], j["corpus"]
PY
"$CAL" "${ARGS[@]}" -t 2 -f "$CORPUS@1" -f "$P@1" -f "$AUSTEN/emma.txt@2" -o "$T/m3" || fail "other shares failed"
cmp -s <(tensors "$T/m1/oscar.safetensors") <(tensors "$T/m3/oscar.safetensors") && fail "other shares, same tensors"
[ "$(meta "$T/m1" oscar.calib_sha256)" = "$(meta "$T/m3" oscar.calib_sha256)" ] && fail "other shares, same corpus sha256"

# 3. store round trip keeps the sources
"$CAL" "${ARGS[@]}" -t 2 "${MIX[@]}" --capture-dtype bf16 --save-activations "$T/act.h5" -o "$T/s1" || fail "mix --save-activations"
"$CAL" "${ARGS[@]}" -t 2 --from-activations "$T/act.h5" -o "$T/s2" || fail "mix --from-activations"
for f in oscar.safetensors oscar.json README.md; do
    cmp -s "$T/s1/$f" "$T/s2/$f" || fail "$f differs between the mix and its store replay"
done

# 4. resume: a run killed after its first checkpoint
"$CAL" "${ARGS[@]}" -t 2 "${MIX[@]}" -b 1 --checkpoint-every 64 -o "$T/r" & pid=$!
for _ in $(seq 1 600); do [ -f "$T/r.ckpt" ] && break; sleep 0.1; done
kill -9 $pid 2> /dev/null; wait $pid 2> /dev/null
[ -f "$T/r.ckpt" ] || fail "no checkpoint appeared"
"$CAL" "${ARGS[@]}" -t 2 -f "$CORPUS@1" -f "$P@1" -f "$AUSTEN/emma.txt@1" -b 1 -o "$T/r" --resume 2> "$T/err"
[ $? -eq 1 ] && grep -q "corpus" "$T/err" && [ ! -e "$T/r" ] || fail "resume on other shares: $(cat "$T/err")"
"$CAL" "${ARGS[@]}" -t 2 "${MIX[@]}" -b 1 -o "$T/r" --resume 2> "$T/err" || fail "resume on the same mix: $(cat "$T/err")"
[ "$(meta "$T/r" oscar.calib_corpus_sources)" = "$(meta "$T/m1" oscar.calib_corpus_sources)" ] || fail "resume: other sources"

# 5. refusals: exit status, the message names the culprit, nothing written
refuse() { # want_rc needle args...
    local want=$1 needle=$2; shift 2
    "$CAL" "${ARGS[@]}" -t 2 "$@" -o "$T/bad" 2> "$T/err"; local rc=$?
    [ $rc -eq "$want" ] && grep -qF -- "$needle" "$T/err" && [ ! -e "$T/bad" ] \
        || fail "$* : rc=$rc (want $want), stderr: $(cat "$T/err")"
}
refuse 1 "nope.txt" -f "$CORPUS@1" -f "$AUSTEN/nope.txt@1"
refuse 2 "share '0'" -f "$CORPUS@0" -f "$P@1"
refuse 2 "share '-1'" -f "$CORPUS@-1"
refuse 1 "given twice" -f "$CORPUS" -f "$CORPUS"
refuse 1 "every source or to none" -f "$CORPUS@0.5" -f "$P"
printf 'Too short.\n' > "$T/short.txt"
refuse 1 "short.txt has" -f "$CORPUS@1" -f "$T/short.txt@1"
refuse 1 "--allow-short" --allow-short -f "$CORPUS" -f "$P"
echo "ok"
