#!/usr/bin/env bash
# unpack-data.sh - the data committed under data/ (compressed, with licences
# and provenance in data/README.md), unpacked into $OSCAR_CACHE and checked
# against the sha256 of the original files:
#   data/tokenizers/qwen3/  -> $OSCAR_CACHE/tokenizers/qwen3/{tokenizer,tokenizer_config}.json
#   data/corpora/gsm8k/     -> $OSCAR_CACHE/corpora/gsm8k/test.jsonl
# (The Brown archive is unpacked by corpora.py with the Austen novels.)
# Idempotent: a file already in place with the right sha256 is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${OSCAR_CACHE:-$HOME/.cache/oscar}

# unpack SRC DEST SHA256: zstd -d (or a plain copy) to DEST.tmp, check, rename
unpack() {
    local src=$1 dest=$2 want=$3
    if [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$want" ]; then
        return 0
    fi
    mkdir -p "$(dirname "$dest")"
    case "$src" in
        *.zst) zstd -q -d --long=24 -f "$src" -o "$dest.tmp" ;;
        *) cp "$src" "$dest.tmp" ;;
    esac
    local got
    got=$(sha256sum "$dest.tmp" | cut -d' ' -f1)
    if [ "$got" != "$want" ]; then
        rm -f "$dest.tmp"
        echo "unpack-data: $src: sha256 $got, expected $want (corrupt checkout?)" >&2
        exit 1
    fi
    mv "$dest.tmp" "$dest"
}

unpack data/tokenizers/qwen3/tokenizer.json.zst "$CACHE/tokenizers/qwen3/tokenizer.json" \
    aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
unpack data/tokenizers/qwen3/tokenizer_config.json "$CACHE/tokenizers/qwen3/tokenizer_config.json" \
    5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
unpack data/corpora/gsm8k/test.jsonl.zst "$CACHE/corpora/gsm8k/test.jsonl" \
    3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14
