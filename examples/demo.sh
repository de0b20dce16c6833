#!/usr/bin/env bash
# demo.sh - the main job on SmolLM2-135M + Jane Austen:
#   1. calibrate on Pride and Prejudice (20k tokens), print the gate table,
#      write to $OSCAR_CACHE/zoo/smollm2-135m/<tag>/
#   2. (when oscar-verify / a perplexity tool exists) perplexity on held-out Persuasion.
set -eu
cd "$(dirname "$0")/.."
B=${OSCAR_BUILD:-build}
CACHE=${OSCAR_CACHE:-$HOME/.cache/oscar}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
CORPUS=$CACHE/corpora/austen/prideprejudice.txt
TOKENS=${DEMO_TOKENS:-20000}
TMP=$CACHE/zoo/smollm2-135m/.demo-run
"$B/bin/oscar-calibrate" -m "$MODEL" -f "$CORPUS" --tokens "$TOKENS" -c 512 -o "$TMP" --json > "$TMP.json"
TAG=$(sed -n 's/.*"oscar.calib_tag": "\([^"]*\)".*/\1/p' "$TMP/oscar.json" | head -n 1)
DEST=$CACHE/zoo/smollm2-135m/$TAG
rm -rf "$DEST" && mv "$TMP" "$DEST" && mv "$TMP.json" "$DEST.summary.json"
echo "artifact: $DEST"
if [ -x "$B/bin/oscar-verify" ]; then
    "$B/bin/oscar-verify" --model "$MODEL" --corpus "$CACHE/corpora/austen/persuasion.txt" --ctx 1024 \
        --methods bf16 || true
fi
