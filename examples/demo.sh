#!/usr/bin/env bash
# demo.sh - the main job on the embedded default, SmolLM2-135M + Jane Austen:
#   1. calibrate on Pride and Prejudice ($DEMO_TOKENS tokens, default 20000), print the
#      gate table, write the artifact to $OSCAR_CACHE/zoo/smollm2-135m/<tag>/;
#   2. verify it on held-out Persuasion: perplexity of the model (bf16) and with INT2 KV
#      caches (naive, Hadamard, OSCAR), context 2048, BF16 sink 32 + recent 128.
# Progress goes to stderr; the verify table to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${OSCAR_BUILD:-build}
CACHE=${OSCAR_CACHE:-$HOME/.cache/oscar}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
AUSTEN=$CACHE/corpora/austen
TOKENS=${DEMO_TOKENS:-20000}
ZOO=$CACHE/zoo/smollm2-135m
TMP=$ZOO/.demo-run
mkdir -p "$ZOO"

echo "== oscar-calibrate: SmolLM2-135M on Pride and Prejudice, $TOKENS tokens" >&2
"$B/bin/oscar-calibrate" -m "$MODEL" -f "$AUSTEN/prideprejudice.txt" --tokens "$TOKENS" -c 512 -o "$TMP" \
    --json -v > "$TMP.json"   # -v after --json: progress, gate table and timings stay on stderr
TAG=$(sed -n 's/.*"oscar.calib_tag": "\([^"]*\)".*/\1/p' "$TMP/oscar.json" | head -n 1)
DEST=$ZOO/$TAG
rm -rf "$DEST" && mv "$TMP" "$DEST" && mv "$TMP.json" "$DEST.summary.json"
echo "artifact: $DEST" >&2

echo "== oscar-verify: perplexity on held-out Persuasion with bf16 and INT2 KV caches" >&2
"$B/bin/oscar-verify" --model "$MODEL" --rotations "$DEST" --corpus "$AUSTEN/persuasion.txt" \
    --ctx 2048 --tokens 2048 --sink 32 --recent 128 --methods bf16,naive,hadamard,oscar \
    --report "$DEST.report" --update-card
echo "report: $DEST.report/ (report.json, layers.svg, summary.md)" >&2
