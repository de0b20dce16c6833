#!/usr/bin/env bash
# bench-verify-old-new.sh OLD_TREE [THREADS] - quantized-cache perplexity speed
# of this tree against an older one, in one script on one machine: builds
# OLD_TREE (a checkout or `git archive` of the older commit) with CUDA=0, then
# runs each tree's bench-kv-window (one 2048-token window of Persuasion per
# method, one pass vs decode-in-one-forward) and oscar-verify on SmolLM2
# (bf16, naive, hadamard + kivi, one 2048 window, metrics on 512 tokens), old
# then new, printing both tables and the wall times. Needs $OSCAR_CACHE with the
# model and corpora (make deps).
set -euo pipefail
old=$(cd "$1" && pwd)
threads=${2:-$(nproc)}
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${OSCAR_CACHE:-$HOME/.cache/oscar}
M=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
A=$cache/corpora/austen/persuasion.txt
lscpu | sed -n 's/^Model name: *//p'
echo "threads $threads; old tree $old ($(cat "$old/.commit" 2>/dev/null || git -C "$old" rev-parse --short HEAD 2>/dev/null || echo '?')), new tree $here ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'))"
for t in "$old" "$here"; do
    make -C "$t" CUDA=0 -j"$threads" build/bin/bench-kv-window build/bin/oscar-verify > "$t/.bench-build.log" 2>&1 \
        || { tail -20 "$t/.bench-build.log"; exit 1; }
done
for t in "$old" "$here"; do
    echo "== $( [ "$t" = "$old" ] && echo old || echo new ): bench-kv-window --ctx 2048 --sink 32 --recent 128 --page 64 --no-steps"
    "$t/build/bin/bench-kv-window" "$M" "$A" --ctx 2048 --sink 32 --recent 128 --page 64 -t "$threads" --no-steps
done
for t in "$old" "$here"; do
    echo "== $( [ "$t" = "$old" ] && echo old || echo new ): oscar-verify --ctx 2048 --tokens 2048 --metric-tokens 512 --methods bf16,naive,hadamard,kivi"
    s=$(date +%s.%N)
    "$t/build/bin/oscar-verify" --model "$M" --corpus "$A" --ctx 2048 --tokens 2048 --metric-tokens 512 \
        --methods bf16,naive,hadamard,kivi -t "$threads" 2>/dev/null
    echo "wall $(echo "$(date +%s.%N) - $s" | bc) s"
done
