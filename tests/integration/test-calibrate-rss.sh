#!/usr/bin/env bash
# test-calibrate-rss.sh - streaming: oscar-calibrate's peak RSS (getrusage,
# reported as peak_rss_mb in --json) at N and 4N calibration tokens differs by
# under 5 %. The forward buffers and stats chunks are O(batch·seq_len), the
# held-out rows and accumulators fixed; what grows with the token budget T is
# the layer-major pass's resident state: the hidden states [T, n_embd] and one
# layer's K/V [T, 2·n_head_kv·head_dim] in f32 (3.8 KiB per SmolLM2 token,
# 5.6 MiB more at 2048 tokens than at 512) and the int32 corpus tokens.
# Also: a JSONL corpus (--jsonl-field) and a directory corpus calibrate.
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
ARGS=(-m "$MODEL" -c 128 --heldout 1 --sink 16 --recent 32 --clip 0.96,0.92 -t 2 -q)
rss() { sed -n 's/.*"peak_rss_mb": \([0-9.]*\).*/\1/p' "$1"; }

"$CAL" "${ARGS[@]}" -f "$CORPUS" --tokens 512 -o "$T/n" --json > "$T/n.json" 2>/dev/null || fail "N run"
"$CAL" "${ARGS[@]}" -f "$CORPUS" --tokens 2048 -o "$T/4n" --json > "$T/4n.json" 2>/dev/null || fail "4N run"
R1=$(rss "$T/n.json"); R4=$(rss "$T/4n.json")
[ -n "$R1" ] && [ -n "$R4" ] || fail "peak_rss_mb missing from --json"
grep -q '"load": [0-9]' "$T/n.json" || fail "timing_s.load (layers read on demand) missing from --json"
echo "peak RSS: 512 tokens $R1 MiB, 2048 tokens $R4 MiB"
awk -v a="$R1" -v b="$R4" 'BEGIN { d = (b > a ? b - a : a - b) / a; printf "relative difference %.4f\n", d; exit !(d < 0.05) }' \
    || fail "peak RSS grows with the token budget ($R1 -> $R4 MiB)"

# JSONL corpus: the "question" field of GSM8K
J=${OSCAR_CACHE:-$HOME/.cache/oscar}/corpora/gsm8k/test.jsonl
if [ -f "$J" ]; then
    "$CAL" "${ARGS[@]}" -f "$J" --jsonl-field question --tokens 256 -o "$T/j" --json > "$T/j.json" 2>/dev/null \
        || fail "JSONL corpus run"
    grep -q '"tokens": 256' "$T/j.json" || fail "JSONL: wrong token count: $(head -c 200 "$T/j.json")"
    sha=$(sha256sum "$J" | cut -c1-64)
    grep -q "$sha" "$T/j/oscar.json" || fail "JSONL: corpus sha256 not recorded"
    "$CAL" "${ARGS[@]}" -f "$J" --jsonl-field no_such_field --tokens 256 -o "$T/j2" 2> "$T/err"; rc=$?
    [ $rc -eq 1 ] && [ ! -e "$T/j2" ] || fail "JSONL with a missing field: rc=$rc $(cat "$T/err")"
else
    echo "note: $J missing, JSONL check skipped"
fi

# directory corpus: two files, read in sorted order; differs from one file alone
mkdir -p "$T/dir"
head -c 4000 "$AUSTEN/prideprejudice.txt" > "$T/dir/b.txt"
head -c 4000 "$AUSTEN/emma.txt" > "$T/dir/a.txt"
"$CAL" "${ARGS[@]}" -f "$T/dir" --tokens 1024 --allow-short -o "$T/d" --json > "$T/d.json" 2>/dev/null || fail "directory corpus run"
grep -q '"pass": true' "$T/d.json" || echo "note: gate did not pass on the tiny directory corpus"
"$CAL" "${ARGS[@]}" -f "$T/dir/a.txt" --tokens 1024 --allow-short -o "$T/d1" 2>/dev/null || fail "single-file run"
cmp -s "$T/d/oscar.safetensors" "$T/d1/oscar.safetensors" && fail "directory corpus ignored its second file"
echo "ok"
