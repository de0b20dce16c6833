#!/usr/bin/env bash
# issue15-tables.sh - issue 15's tables on SmolLM2-135M: one calibration on the demo's mix (8192 tokens,
# its q/k/v kept), OSCAR / +sign search / +OptR / +OptR+centering from that store, every method scored
# in domain (held-out Persuasion) and out of domain (Brown romance, hobbies, government: genres never
# calibrated on), one 2048-token window each, sink 32 + recent 128; then ctx 8192, sink 64 + recent 256,
# positions >= 4096 of Persuasion, also with calibrations made for those tiers (sequences of 512 and of
# 2048). Prints the tables (examples/method-table.py). A run whose output is already in DIR is not
# repeated. CPU: about 55 min of CPU time under load, 20 of them the two sign searches, and about 30 min
# more (idle) for the long-context part (BENCHMARKS.md, "Issue 15 tables").
#   examples/issue15-tables.sh [DIR]   (OSCAR_BUILD, OSCAR_CACHE as elsewhere)
set -euo pipefail
B=$(cd "${OSCAR_BUILD:-build}/bin" && pwd) X=$(cd "$(dirname "$0")" && pwd)
CACHE=${OSCAR_CACHE:-$HOME/.cache/oscar}
M=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf A=$CACHE/corpora/austen G=$CACHE/corpora/brown/genres
D=${1:-issue15-tables}
mkdir -p "$D"
SETS=(persuasion=$A/persuasion.txt romance=$G/romance.txt hobbies=$G/hobbies.txt government=$G/government.txt)
for f in "$M" "${SETS[@]#*=}" $A/prideprejudice.txt $G/news.txt $G/learned.txt; do
    [ -e "$f" ] || { echo "$0: missing $f (make deps; datasets/corpora.py writes the Brown genres)" >&2; exit 1; }
done
cd "$D"
# the calibration (its artifact is the OSCAR row), keeping its rows; one rotation per layer as measured
# (the tables predate --rotation-grouping auto, the default since; OptR refines per KV head from it)
[ -e oscar/oscar.json ] || "$B/oscar-calibrate" -m "$M" -f $A/prideprejudice.txt@0.5 -f $G/news.txt@0.25 \
    -f $G/learned.txt@0.25 --tokens 8192 -c 512 --sink 32 --recent 128 -t 2 --rotation-grouping layer --save-activations mix.h5 \
    -o oscar --json > oscar.json
cal() { local n=$1; shift; [ -e $n/oscar.json ] ||
    "$B/oscar-calibrate" -m "$M" --from-activations mix.h5 --sink 32 --recent 128 -t 2 --rotation-grouping layer \
        -o $n --json "$@" > $n.json; }
cal signs --sign-search --sign-passes 1
cal signs2 --sign-search --sign-passes 2
cal optr-nc --refine optr --optr-train-seq 4 --no-optr-center
cal optr-c --refine optr --optr-train-seq 4
cal optr-all --refine optr --optr-train-seq 16 --optr-steps 40
ver() { local out=$1; shift; for s in "${SETS[@]}"; do [ -e $out.${s%%=*}.json ] ||
    "$B/oscar-verify" --model "$M" --corpus "${s#*=}" --ctx 2048 --tokens 2048 --metric-tokens 512 \
        --sink 32 --recent 128 -t 2 --json "$@" > $out.${s%%=*}.json; done; }
ver base --methods bf16,hadamard,kivi,oscar-omni
for a in oscar signs signs2 optr-nc optr-c optr-all; do ver v.$a --rotations $a --methods bf16,oscar; done
# long context: the artifacts above (calibrated for sink 32 + recent 128), then calibrations for the
# long-context tiers (sink 64 + recent 256) on sequences of 512 (8192 tokens) and of 2048 (16384
# tokens), each with OptR + centering on its first 4 (Pride and Prejudice) sequences
lccal() { local n=$1 c=$2 t=$3; [ -e $n/oscar.json ] || "$B/oscar-calibrate" -m "$M" -f $A/prideprejudice.txt@0.5 \
    -f $G/news.txt@0.25 -f $G/learned.txt@0.25 --tokens $t -c $c --sink 64 --recent 256 -t 2 \
    --rotation-grouping layer --save-activations $n.h5 -o $n --json > $n.json
    [ -e $n-optr/oscar.json ] || "$B/oscar-calibrate" -m "$M" --from-activations $n.h5 --sink 64 --recent 256 -t 2 \
        --rotation-grouping layer --refine optr --optr-train-seq 4 -o $n-optr --json > $n-optr.json; }
lccal lc512 512 8192
lccal lc2048 2048 16384
lcver() { local out=$1; shift; [ -e $out.persuasion.json ] ||
    "$B/oscar-verify" --model "$M" --corpus $A/persuasion.txt --ctx 8192 --tokens 8192 --score-from 4096 \
        --metric-tokens 16 --sink 64 --recent 256 -t 2 --json "$@" > $out.persuasion.json; }
lcver lc.base --methods bf16,hadamard,kivi,oscar-omni
for a in oscar optr-c lc512 lc512-optr lc2048 lc2048-optr; do lcver lc.$a --rotations $a --methods bf16,oscar; done
python3 "$X/method-table.py" bf16=base:bf16 Hadamard=base:hadamard KIVI-style=base:kivi OScaR=base:oscar-omni \
    OSCAR=v.oscar:oscar "OSCAR + sign search, 1 pass"=v.signs:oscar "OSCAR + sign search, 2 passes"=v.signs2:oscar "OSCAR + OptR"=v.optr-nc:oscar \
    "OSCAR + OptR + centering"=v.optr-c:oscar \
    "OSCAR + OptR + centering, 16 sequences x 40 steps"=v.optr-all:oscar -- in:persuasion out:romance out:hobbies out:government
python3 "$X/method-table.py" bf16=lc.base:bf16 Hadamard=lc.base:hadamard KIVI-style=lc.base:kivi OScaR=lc.base:oscar-omni \
    "OSCAR (tiers 32 + 128, c 512)"=lc.oscar:oscar "OSCAR + OptR + centering (tiers 32 + 128, c 512)"=lc.optr-c:oscar \
    "OSCAR (tiers 64 + 256, c 512)"=lc.lc512:oscar "OSCAR + OptR + centering (tiers 64 + 256, c 512)"=lc.lc512-optr:oscar \
    "OSCAR (tiers 64 + 256, c 2048)"=lc.lc2048:oscar "OSCAR + OptR + centering (tiers 64 + 256, c 2048)"=lc.lc2048-optr:oscar \
    -- in:persuasion
