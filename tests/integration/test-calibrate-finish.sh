#!/usr/bin/env bash
# test-calibrate-finish.sh - layers finished inside the layer-major pass (finish.c):
#  1. --sign-search with bf16 capture: the forward run (each layer fitted, sign-searched,
#     clip-searched and gated as its sums end, one held-out layer slot) and the store
#     replay (the same finisher over every stored layer at once) write identical bytes.
#  2. --target sglang (the gate waits for the model-wide clips: every layer's rows kept,
#     and in the checkpoint): SIGKILL after a checkpoint, --resume: identical bytes.
#  3. the checkpoint (version 7, the finished layers' results in it): a resume with other
#     finishing settings, a version 4, 5 or 6 file, and a flipped byte in the header (a padding
#     byte), the hidden states or the results (each under a CRC) are refused (exit 1) naming
#     what is wrong, and nothing is written.
#  4. -v lists the held-out rows as one layer's (default target) or every layer's (sglang).
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
ARGS=(-m "$MODEL" --tokens 256 -c 64 --heldout 1 --sink 8 --recent 16 --clip-search 1.0:0.8:0.05 -t 2 -q)

# 1. sign search inside the pass == over the store (short sequences: the search evaluates each layer ~D times)
SMALL=(-m "$MODEL" --tokens 128 -c 32 --heldout 1 --sink 4 --recent 8 --clip-search 1.0:0.8:0.1 -t 2 -q)
"$CAL" "${SMALL[@]}" -f "$CORPUS" --capture-dtype bf16 --sign-search --sign-passes 1 --save-activations "$T/act.h5" \
    -o "$T/a" || fail "forward run with --sign-search failed"
"$CAL" "${SMALL[@]}" --from-activations "$T/act.h5" --sign-search --sign-passes 1 -o "$T/b" || fail "store replay failed"
for f in oscar.safetensors oscar.json README.md; do
    cmp -s "$T/a/$f" "$T/b/$f" || fail "$f differs between finishing in the pass and over the store"
done
rm -f "$T/act.h5"

# 2. sglang: kill + resume == straight
"$CAL" "${ARGS[@]}" -f "$CORPUS" --target sglang -o "$T/s" || fail "sglang run failed"
kill_after_checkpoint() { # OUT EXTRA...: starts a checkpointing run and kills it after its first checkpoint
    local out=$1; shift
    "$CAL" "${ARGS[@]}" -f "$CORPUS" "$@" -o "$out" --checkpoint-every 64 & local pid=$!
    for _ in $(seq 1 600); do [ -f "$out.ckpt" ] && break; sleep 0.05; done
    [ -f "$out.ckpt" ] || { kill -9 $pid; fail "no checkpoint appeared"; }
    sleep 0.5; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
}
kill_after_checkpoint "$T/r" --target sglang
cp "$T/r.ckpt" "$T/keep.ckpt"
"$CAL" "${ARGS[@]}" -f "$CORPUS" --target sglang -o "$T/r" --checkpoint-every 64 --resume || fail "sglang resume failed"
for f in oscar.safetensors oscar.json README.md; do
    cmp -s "$T/s/$f" "$T/r/$f" || fail "$f differs after kill + resume (sglang)"
done

# 3. refusals (the kept checkpoint of 2)
refused() { # WHAT PATTERN EXTRA...: resume from keep.ckpt must fail naming PATTERN and write nothing
    local what=$1 pat=$2; shift 2
    cp "$T/bad.ckpt" "$T/e.ckpt"
    "$CAL" "${ARGS[@]}" -f "$CORPUS" "$@" -o "$T/e" --checkpoint-every 64 --resume 2> "$T/err"; local rc=$?
    [ $rc -eq 1 ] && grep -q "$pat" "$T/err" && [ ! -e "$T/e" ] || fail "$what: rc=$rc $(cat "$T/err")"
}
cp "$T/keep.ckpt" "$T/bad.ckpt"
refused "other clip grid" "finished layers were made with settings" --target sglang --clip-search 1.0:0.9:0.05
refused "other target" "finished layers were made with settings"
printf '\004' | dd of="$T/bad.ckpt" bs=1 seek=8 conv=notrunc status=none
refused "version 4" "checkpoint version 4" --target sglang
printf '\005' | dd of="$T/bad.ckpt" bs=1 seek=8 conv=notrunc status=none
refused "version 5" "checkpoint version 5" --target sglang
printf '\006' | dd of="$T/bad.ckpt" bs=1 seek=8 conv=notrunc status=none
refused "version 6" "checkpoint version 6" --target sglang
flip() { # OFFSET: keep.ckpt with the byte at OFFSET changed, as bad.ckpt
    cp "$T/keep.ckpt" "$T/bad.ckpt"
    local b; b=$(od -An -tu1 -j "$1" -N1 "$T/bad.ckpt" | tr -d ' ')
    printf "\\$(printf %03o $(( (b ^ 16) & 255 )))" | dd of="$T/bad.ckpt" bs=1 seek="$1" conv=notrunc status=none
    cmp -s "$T/bad.ckpt" "$T/keep.ckpt" && fail "flip at $1 changed nothing"
}
flip 100   # inside the NUL-padded device field
refused "padding byte" "header fails its CRC" --target sglang
# the layout (formats/README.md): a 1584-byte header, the lib/stats bytes (96 + their payload size at 48), the states
stats=$(( $(od -An -tu8 -j $((1584 + 48)) -N8 "$T/keep.ckpt" | tr -d ' ') + 96 ))
flip $((1584 + stats + 5))
refused "hidden state byte" "hidden states fail their CRC" --target sglang
flip $(( $(stat -c %s "$T/keep.ckpt") - 1 ))
refused "results byte" "results fail their CRC" --target sglang

# 4. the memory report
"$CAL" "${ARGS[@]/-q/-v}" -f "$CORPUS" -o "$T/m1" 2> "$T/m1.err" || fail "-v run failed"
grep -q "held-out rows + W_O copies .*one layer" "$T/m1.err" || fail "no one-layer held-out line: $(grep held-out "$T/m1.err")"
"$CAL" "${ARGS[@]/-q/-v}" -f "$CORPUS" --target sglang -o "$T/m2" 2> "$T/m2.err" || fail "-v sglang run failed"
grep -q "held-out rows + W_O copies .*every layer" "$T/m2.err" || fail "no every-layer line: $(grep held-out "$T/m2.err")"
echo "ok"
