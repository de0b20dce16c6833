#!/usr/bin/env bash
# bench-verify-old-new.sh OLD_TREE [THREADS] - quantized-cache perplexity speed
# of this tree against an older one, in one script on one machine: builds
# OLD_TREE (a checkout or `git archive` of the older commit) with CUDA=0, then
# runs each tree's bench-kv-window (one 2048-token window of Persuasion per
# method, one pass vs decode-in-one-forward) and oscar-verify on SmolLM2
# (bf16, naive, hadamard + kivi, one 2048 window, metrics on 512 tokens), old
# then new, printing both tables and the wall times. Needs $OSCAR_CACHE with the
# model and corpora (make deps).
#
# With ARTIFACT (bench-verify-old-new.sh OLD_TREE THREADS ARTIFACT) it times the
# demo's verify step instead (examples/demo.sh: bf16,naive,hadamard,oscar with
# --rotations ARTIFACT, ctx 2048, metrics on 512 tokens), old, new, old, new
# (timings on a shared machine are noisy: compare within one run), printing each
# run's phases, wall and CPU seconds, and whether the two report.json files agree
# in every number but the timings.
set -euo pipefail
old=$(cd "$1" && pwd)
threads=${2:-$(nproc)}
artifact=${3:-}
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
if [ -n "$artifact" ]; then
    out=$(mktemp -d)
    for t in "$old" "$here" "$old" "$here"; do
        tag=$( [ "$t" = "$old" ] && echo old || echo new )
        echo "== $tag: the demo's verify step (load: $(cut -d' ' -f1-3 /proc/loadavg))"
        rm -rf "$out/$tag"
        /usr/bin/time -f "wall %e s, CPU %U s user + %S s sys" "$t/build/bin/oscar-verify" --model "$M" \
            --rotations "$artifact" --corpus "$A" --ctx 2048 --tokens 2048 --metric-tokens 512 --sink 32 \
            --recent 128 --methods bf16,naive,hadamard,oscar -t "$threads" --report "$out/$tag" 2>&1 |
            grep -E '^(metrics|perplexity) .* in |^(bf16|naive|hadamard|oscar) |^wall'
    done
    strip='import json,sys
def s(o):
    if isinstance(o, dict): return {k: s(v) for k, v in o.items() if "second" not in k and k not in ("commit", "version")}
    if isinstance(o, list): return [s(x) for x in o]
    return o
print(json.dumps(s(json.load(open(sys.argv[1]))), sort_keys=True))'
    if [ "$(python3 -c "$strip" "$out/old/report.json")" = "$(python3 -c "$strip" "$out/new/report.json")" ]; then
        echo "report.json: old and new agree in every number but the timings"
    else
        echo "report.json: old and new DIFFER"
    fi
    rm -rf "$out"
    exit 0
fi
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
