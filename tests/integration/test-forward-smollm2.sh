#!/usr/bin/env bash
# test-forward-smollm2.sh - SmolLM2-135M (Q4_1 GGUF) forward pass and perplexity against transformers.
#
# Fixture: tests/fixtures/forward/smollm2 (tests/oracle/make_model_fixtures.py --smollm): logits at 9
# positions, final hidden states and q/k/v at layers 0, 15, 29 for 80 tokens of Austen text (rel-L2
# <= 1e-4), and the perplexity at n_ctx 1024, stride 512 over the first 4096 tokens of persuasion.txt
# (within 0.5 %). Skips (77) when the model file is absent. Takes ~1 minute on 2 cores.
set -eu
cd "$(dirname "$0")/../.."
build=${OSCAR_BUILD:-build}
model=${OSCAR_CACHE:-$HOME/.cache/oscar}/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$model" ]; then
    echo "skip: $model not found"
    exit 77
fi
"$build/bin/forward-oracle" "$model" tests/fixtures/forward/smollm2 --ppl
