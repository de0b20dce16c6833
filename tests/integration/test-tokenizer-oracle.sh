#!/usr/bin/env bash
# test-tokenizer-oracle.sh - oscar's tokenizer must give the same ids as Hugging
# Face `tokenizers`, id for id, on the whole Austen and Brown corpora and on
# generated edge cases (with and without special-token parsing), for
#   Qwen3:   oracle Tokenizer.from_file($OSCAR_CACHE/tokenizers/qwen3/tokenizer.json,
#            unpacked by make deps from data/tokenizers/qwen3)
#   SmolLM2: oracle built in Python from the GGUF metadata read with `gguf`
#            (see tests/oracle/tokenize_oracle.py for why it equals the
#            official SmolLM2 tokenizer.json).
# Skips (77) when the venv, the model, the corpora or the tokenizer are absent
# (make deps puts them in place).
set -u
cd "$(dirname "$0")/../.."
build=${OSCAR_BUILD:-build}
cache=${OSCAR_CACHE:-$HOME/.cache/oscar}
py=$cache/venv/bin/python
tool=$build/bin/oscar-tokenize
qwen=$cache/tokenizers/qwen3/tokenizer.json
gguf=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
for f in "$py" "$tool" "$qwen" "$gguf"; do
    [ -e "$f" ] || { echo "skip: $f missing"; exit 77; }
done
ls "$cache"/corpora/austen/*.txt "$cache"/corpora/brown/*.txt > /dev/null 2>&1 || { echo "skip: corpora missing"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" tests/oracle/tricky_texts.py "$tmp/tricky" ${OSCAR_SEED:-} || exit 1

fail=0
# check NAME TOKENIZER-ARGS(oscar) ORACLE-ARGS FLAGS FILES...
check() {
    local name=$1 tok=$2 oracle=$3 flags=$4
    shift 4
    printf '%s\n' "$@" > "$tmp/names"
    local t0=$(date +%s.%N)
    if ! "$tool" --bench $flags --tokenizer "$tok" "$@" > "$tmp/oscar.ids" 2> "$tmp/oscar.err"; then
        echo "FAIL $name: oscar-tokenize failed: $(cat "$tmp/oscar.err")"; fail=1; return
    fi
    "$py" tests/oracle/tokenize_oracle.py $oracle $flags "$@" > "$tmp/oracle.ids" || { echo "FAIL $name: oracle failed"; fail=1; return; }
    if "$py" tests/oracle/tokenize_oracle.py --compare "$tmp/oscar.ids" "$tmp/oracle.ids" --names "$tmp/names" > "$tmp/cmp"; then
        echo "ok   $name: $(tail -n 1 "$tmp/cmp"); $(sed 's/.*tokens in/encode/' "$tmp/oscar.err")"
    else
        echo "FAIL $name:"; head -n 20 "$tmp/cmp"; fail=1
    fi
}

check "qwen3 austen"   "$qwen" "--tokenizer-json $qwen" "" "$cache"/corpora/austen/*.txt
check "qwen3 brown"    "$qwen" "--tokenizer-json $qwen" "" "$cache"/corpora/brown/*.txt
check "qwen3 tricky"   "$qwen" "--tokenizer-json $qwen" "" "$tmp"/tricky/*.txt
check "qwen3 tricky --no-special" "$qwen" "--tokenizer-json $qwen" "--no-special" "$tmp"/tricky/*.txt
# the SmolLM2 oracle reads the GGUF once per call (slow in Python): one call per corpus
check "smollm2 austen" "$gguf" "--gguf $gguf" "" "$cache"/corpora/austen/*.txt
check "smollm2 brown+tricky" "$gguf" "--gguf $gguf" "" "$cache"/corpora/brown/*.txt "$tmp"/tricky/*.txt
check "smollm2 tricky --no-special" "$gguf" "--gguf $gguf" "--no-special" "$tmp"/tricky/*.txt
exit $fail
