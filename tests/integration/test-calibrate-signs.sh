#!/usr/bin/env bash
# test-calibrate-signs.sh - oscar-calibrate's eigenvector signs (lib/calibrate/signs.c):
#  1. --sign-search with a composition without U is a usage error (exit 2, names it);
#  2. without the search the artifact says oscar.signs canonical;
#  3. from a store, --sign-search: the signs time on stderr, oscar.signs metadata, and in --json
#     summary.signs the searched objective per layer never above the canonical one.
# (1 vs 2 threads and the planted case: tests/unit/test-sign-search.c, on smaller rows.)
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
ARGS=(-m "$MODEL" --sink 8 --recent 16 --clip 0.96,0.92)

# 1. refusal
"$CAL" "${ARGS[@]}" -f "$CORPUS" --tokens 256 -c 64 --composition h_pbr --sign-search -o "$T/x" 2> "$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "h_pbr has no eigenvectors" "$T/err" && [ ! -e "$T/x" ] ||
    fail "--sign-search --composition h_pbr: rc=$rc $(cat "$T/err")"

# 2. canonical signs (and a store for the rest)
"$CAL" "${ARGS[@]}" -q -f "$CORPUS" --tokens 256 -c 64 --heldout 1 --save-activations "$T/act.h5" -o "$T/base" \
    || fail "store run failed"
hdr() { head -c 65536 "$1/oscar.safetensors" | tr -d '\0' | tr ',' '\n'; }
hdr "$T/base" | grep -q 'oscar.signs":"canonical"' || fail "no oscar.signs canonical metadata"

# 3. the search from the store (--json, -v after it: the table and timings stay on stderr)
"$CAL" "${ARGS[@]}" --from-activations "$T/act.h5" --sign-search --sign-passes 1 -t 1 --json -v -o "$T/a" \
    > "$T/a.json" 2> "$T/a.err" || fail "--sign-search failed: $(tail -3 "$T/a.err")"
grep -q "^sign search: held-out INT2 objective" "$T/a.err" || fail "no sign-search table on stderr"
grep -q "signs [0-9.]*s" "$T/a.err" || fail "no signs time in the timing line"
hdr "$T/a" | grep -q 'oscar.signs":"searched passes=1 k_flips=' || fail "no oscar.signs searched metadata"
jq -e '.summary.signs.mode == "searched" and (.summary.signs.k_after | length) == 30 and
       ([range(30) as $i | .summary.signs.k_after[$i] <= .summary.signs.k_before[$i] and
                           .summary.signs.v_after[$i] <= .summary.signs.v_before[$i]] | all) and
       (.timing_s.signs > 0)' "$T/a.json" > /dev/null || fail "--json signs summary wrong: $(jq -c .summary.signs.mean "$T/a.json")"
jq -e '.summary.signs.mean.k_after < .summary.signs.mean.k_before' "$T/a.json" > /dev/null ||
    fail "the search found no K flip that helps on any of 30 layers"
echo "ok: $(jq -c .summary.signs.mean "$T/a.json"), signs $(jq .timing_s.signs "$T/a.json") s"
