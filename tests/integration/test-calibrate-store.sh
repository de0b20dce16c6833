#!/usr/bin/env bash
# test-calibrate-store.sh - the HDF5 activation store of oscar-calibrate:
#  1. --capture-dtype bf16 --save-activations, then --from-activations (no forward
#     pass): byte-identical artifact. The rotations and eigenvalues are computed
#     from the covariances (sst included), so identical bytes mean the store
#     replay gives the two-pass statistics exactly (bf16 rows stored losslessly).
#  2. h5dump -H -p (interop): layout, dtype attributes, shapes, the zstd filter
#     32015 + shuffle + fletcher32 on the row datasets (h5dump cannot decode zstd
#     without the plugin, so only the header is read).
#  3. truncated / corrupted / non-HDF5 store: exit 1, clear error, nothing written;
#     a failed writing run leaves no store and no temporary file.
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
ARGS=(-m "$MODEL" --tokens 256 -c 64 --heldout 1 --sink 8 --recent 16 --clip-search 1.0:0.9:0.1 -t 2 -q)

# 1. store round trip
"$CAL" "${ARGS[@]}" -f "$CORPUS" --capture-dtype bf16 --save-activations "$T/act.h5" -o "$T/a" --json > "$T/a.json" \
    || fail "run with --save-activations failed"
[ -s "$T/act.h5" ] || fail "no store written"
ls "$T" | grep -q 'act.h5.tmp' && fail "temporary store left behind"
"$CAL" "${ARGS[@]}" --from-activations "$T/act.h5" -o "$T/b" --json > "$T/b.json" || fail "--from-activations failed"
grep -q '"source": "activations"' "$T/b.json" || fail "replay did not report its source"
grep -Eq '"forward": 0(\.0+)?[,}]' "$T/b.json" || fail "replay ran a forward pass: $(head -c 300 "$T/b.json")"
for f in oscar.safetensors oscar.json README.md; do
    cmp -s "$T/a/$f" "$T/b/$f" || fail "$f differs between the two-pass run and the store replay"
done
# fp32 capture (default) gives a different artifact than bf16 capture (the option matters)
"$CAL" "${ARGS[@]}" -f "$CORPUS" -o "$T/c" || fail "fp32 run failed"
cmp -s "$T/a/oscar.safetensors" "$T/c/oscar.safetensors" && fail "bf16 and fp32 capture gave identical rotations"

# 2. interop: the header as h5dump sees it
if command -v h5dump > /dev/null; then
    h5dump -H -p "$T/act.h5" > "$T/dump.txt" 2>&1 || fail "h5dump -H failed: $(head -5 "$T/dump.txt")"
    for pat in 'ATTRIBUTE "model_sha256"' 'ATTRIBUTE "tokenizer_hash"' 'ATTRIBUTE "corpus_sha256"' \
               'ATTRIBUTE "rope_theta"' 'ATTRIBUTE "oscar_version"' 'GROUP "layer_029"' 'GROUP "heldout"' \
               'DATASET "seq_lens"' 'H5T_STD_U16LE' 'FILTER_ID 32015' 'SHUFFLE' 'CHECKSUM FLETCHER32' \
               'DATASPACE  SIMPLE { ( 256, 9, 64 ) / ( H5S_UNLIMITED, 9, 64 ) }' \
               'DATASPACE  SIMPLE { ( 256, 3, 64 ) / ( H5S_UNLIMITED, 3, 64 ) }' \
               'DATASPACE  SIMPLE { ( 64, 9, 64 ) / ( H5S_UNLIMITED, 9, 64 ) }'; do
        grep -qF "$pat" "$T/dump.txt" || fail "h5dump: '$pat' not found"
    done
    h5dump -a /dtype "$T/act.h5" | grep -q '"bfloat16"' || fail "root dtype attribute is not bfloat16"
    h5dump -a /layer_000/k/dtype "$T/act.h5" | grep -q '"bfloat16"' || fail "dataset dtype attribute missing"
    h5dump -d /layer_000/seq_lens "$T/act.h5" | grep -q '64, 64, 64, 64' || fail "seq_lens are not 4 x 64"
else
    echo "note: h5dump missing, interop check skipped"
fi

# 3. bad stores
SIZE=$(stat -c %s "$T/act.h5")
head -c $((SIZE / 2)) "$T/act.h5" > "$T/trunc.h5"
"$CAL" "${ARGS[@]}" --from-activations "$T/trunc.h5" -o "$T/e1" 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -qi "act\|hdf5\|store" "$T/err" && [ ! -e "$T/e1" ] || fail "truncated store: rc=$rc $(cat "$T/err")"
cp "$T/act.h5" "$T/bad.h5"
# overwrite 256 KiB in the middle (compressed row chunks): zstd or fletcher32 must notice
head -c 262144 /dev/urandom | dd of="$T/bad.h5" bs=1 seek=$((SIZE / 2)) conv=notrunc status=none
"$CAL" "${ARGS[@]}" --from-activations "$T/bad.h5" -o "$T/e2" 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "bad.h5" "$T/err" && [ ! -e "$T/e2" ] || fail "corrupted store: rc=$rc $(cat "$T/err")"
echo "corrupted store: $(tail -1 "$T/err")"
printf 'not hdf5 at all' > "$T/junk.h5"
"$CAL" "${ARGS[@]}" --from-activations "$T/junk.h5" -o "$T/e3" 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "not a readable HDF5 file" "$T/err" && [ ! -e "$T/e3" ] || fail "junk store: rc=$rc"
"$CAL" "${ARGS[@]}" -f "$CORPUS" --from-activations "$T/act.h5" -o "$T/e4" 2> /dev/null
[ $? -eq 2 ] || fail "--corpus with --from-activations must be a usage error"
# a writing run that fails (empty corpus) leaves neither the store nor its temporary file
: > "$T/empty.txt"
"$CAL" "${ARGS[@]}" -f "$T/empty.txt" --save-activations "$T/new.h5" -o "$T/e5" 2> /dev/null
[ $? -eq 1 ] && [ ! -e "$T/new.h5" ] && ! ls "$T" | grep -q 'new.h5.tmp' || fail "failed run left a store behind"
echo "ok"
