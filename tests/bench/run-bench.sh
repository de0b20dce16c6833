#!/usr/bin/env bash
# run-bench.sh - the CPU benchmarks behind BENCHMARKS.md, in one go.
# Each program prints its own table with the ratios it measured in-process.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${OSCAR_BUILD:-build}
CACHE=${OSCAR_CACHE:-$HOME/.cache/oscar}
MODEL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
echo "# oscar CPU benchmarks, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores"
run() { echo; echo "\$ $*"; "$@"; }
[ -f "$MODEL" ] && run "$B/bin/bench-forward" "$MODEL" --reps 5
run "$B/bin/bench-decode-attention" 32768 10
[ -x "$B/bin/bench-stats" ] && run "$B/bin/bench-stats"
# the ids go to stdout; the throughput line to stderr
[ -f "$MODEL" ] && run "$B/bin/oscar-tokenize" --bench --tokenizer "$MODEL" "$CACHE"/corpora/austen/*.txt >/dev/null
run "$B/bin/oscar-tokenize" --bench --tokenizer "${OSCAR_CACHE:-$HOME/.cache/oscar}/tokenizers/qwen3/tokenizer.json" \
    "$CACHE"/corpora/austen/*.txt >/dev/null
