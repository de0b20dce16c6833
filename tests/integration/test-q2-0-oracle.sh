#!/usr/bin/env bash
# test-q2-0-oracle.sh - lib/quant's Q2_0 (GGML_TYPE_Q2_0 of the OSCAR llama.cpp fork)
# against the independent numpy oracle tests/oracle/q2_0_oracle.py: identical block bytes
# and identical dequantized floats on random rows (several seeds; row lengths 32..384,
# short last groups, Hadamard on/off, clip ratios 0 / 0.5 / 0.92 / 0.96 / 1) and on zero,
# constant, sub-1e-8, +-1 (clip-sort ties), huge-outlier, fp32-overflowing rows and a
# block built so that v/sigma hits the +-0.6745 threshold exactly.
# Both follow FutureMLS-Lab/OSCAR branch zhongzhu/llamacpp @ 4570ea609:
#   ggml/src/ggml-quants.c (quantize_row_q2_0_ref, dequantize_row_q2_0, ortho_hadamard_f32),
#   ggml/src/ggml-common.h (block_q2_0), ggml/src/ggml-impl.h (GGML_FP32_TO_FP16).
# Skips (77) without the oracle venv's numpy. OSCAR_SEED replays one seed.
set -u
cd "$(dirname "$0")/../.."
build=${OSCAR_BUILD:-build}
tool=$build/bin/oscar-q2-0-tool
[ -x "$tool" ] || { echo "missing $tool"; exit 1; }
py=${OSCAR_CACHE:-$HOME/.cache/oscar}/venv/bin/python
if ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "no numpy venv at $py: skipped"
    exit 77
fi
tmp=$(mktemp -d /tmp/oscar-q2-0-oracle-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
seeds=${OSCAR_SEED:-"20260601 7 $(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"}
for seed in $seeds; do
    echo "seed $seed"
    rm -rf "$tmp/c" && "$py" tests/oracle/q2_0_oracle.py --seed "$seed" --rows 6 --out "$tmp/c" || exit 1
    "$tool" check "$tmp/c" || { echo "mismatch with seed $seed"; exit 1; }
done
# The raw quant mode writes what check compares.
read -r _ had k ratio rows < "$tmp/c/cases.txt"
"$tool" quant "$had" "$k" "$ratio" "$rows" "$tmp/c/case0.in" "$tmp/y.q2" "$tmp/y.deq" || exit 1
cmp "$tmp/y.q2" "$tmp/c/case0.q2" && cmp "$tmp/y.deq" "$tmp/c/case0.deq" || exit 1
# Bad input: a clear error and a non-zero exit, no crash.
printf 'x' > "$tmp/bad.in"
if "$tool" quant 0 32 0 1 "$tmp/bad.in" "$tmp/b.q2" "$tmp/b.deq" 2>"$tmp/err"; then echo "short input accepted"; exit 1; fi
grep -q "cannot read" "$tmp/err" || { cat "$tmp/err"; exit 1; }
"$py" -c 'import numpy as np; np.full(40, 1.0, np.float32).tofile("'"$tmp"'/k40.in")'
if "$tool" quant 0 40 0 1 "$tmp/k40.in" "$tmp/b.q2" "$tmp/b.deq" 2>"$tmp/err"; then echo "k 40 accepted"; exit 1; fi
grep -q "multiple of 32" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "ok"
