#!/usr/bin/env bash
# test-gguf-oracle.sh - regenerates the GGUF fixtures with the gguf Python
# package (random seed) and runs test-gguf against them; then checks every
# tensor of the SmolLM2 GGUF against gguf.quants.dequantize (skipped when the
# model is absent). Exit 77 when the venv is missing.
set -eu
. "$(dirname "$0")/common.sh"
build=$B py=$PY tmp=$T
[ -x "$py" ] || skip "no venv at $CACHE/venv"
seed=${OSCAR_SEED:-$(( $(date +%s) % 100000 ))}
"$py" tests/oracle/gguf_oracle.py "$tmp" "$seed"
OSCAR_GGUF_FIXTURES=$tmp CMOCKA_MESSAGE_OUTPUT=stdout "$build/tests/test-gguf"
model=$MODEL
if [ -f "$model" ]; then
    "$py" tests/oracle/gguf_model_check.py "$build/bin/oscar-gguf-dump" "$model"
else
    echo "SmolLM2 GGUF absent: model check skipped"
fi
