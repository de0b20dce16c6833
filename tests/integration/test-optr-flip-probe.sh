#!/usr/bin/env bash
# test-optr-flip-probe.sh - the CPU side of test-optr-device's bounds (tests/tools/oscar-optr-flip-probe.c):
# on its centred head_dim-128 layer, 1-ulp nudges of the key rotation move OptR's CPU loss by
# <= 1e-6 and its gradient by <= 1e-5 relative at every evaluation where no code and no
# half-precision scale / zero flipped (test-optr-device allows the GPU 1e-5 and 1e-4 there), for
# fp32, fp16 and bf16 metadata (most trials flip nothing). A bad option is refused.
set -u
. "$(dirname "$0")/common.sh"
P=$B/bin/oscar-optr-flip-probe
for m in f32 f16 bf16; do
    "$P" --meta $m --trials 24 > "$T/$m.out" || fail "--meta $m: $(tail -2 "$T/$m.out")"
    line=$(tail -1 "$T/$m.out")
    read -r loss grad <<< "$(echo "$line" | sed -E 's/.*without a flip \(loss rel <= ([^,]+), gradient rel <= ([^)]+)\).*/\1 \2/')"
    clean=$(echo "$line" | sed -E 's/.*trials: ([0-9]+) without.*/\1/')
    [ "$clean" -ge 12 ] || fail "--meta $m: only $clean of 24 trials without a flip: $line"
    awk -v l="$loss" -v g="$grad" 'BEGIN { exit !(l + 0 <= 1e-6 && g + 0 <= 1e-5) }' \
        || fail "--meta $m: the CPU moves by more than the GPU test's margin: $line"
    echo "$line"
done
"$P" --meta f8 > /dev/null 2> "$T/err"; rc=$?
[ $rc = 2 ] && grep -q "expected f32, f16 or bf16" "$T/err" || fail "--meta f8: rc $rc"
echo "ok"
