#!/usr/bin/env bash
# gaps.sh - in-domain and out-of-domain perplexity gaps of INT2 KV caches: runs
# oscar-verify once per held-out set (one --corpus each) and prints one table,
# perplexity of each method and its ratio to bf16 (1.000 = no loss).
#   examples/gaps.sh MODEL ARTIFACT KIND:LABEL=PATH... [-- oscar-verify options]
# KIND is 'in' (the calibration domain, held-out text: e.g. Persuasion for an
# Austen calibration) or 'out' (text of a domain never calibrated on: e.g. whole
# Brown genres). A PATH ending in .json is a report oscar-verify already wrote
# (--report DIR's report.json or --json output): read, not run again. The verify options default to --ctx 1024 --tokens 1024
# --metric-tokens 16 --methods bf16,hadamard,oscar; the ones given replace them.
# GAPS_JSON=FILE also writes every run's report plus the table as JSON.
set -euo pipefail
B=${OSCAR_BUILD:-build}
usage() { echo "usage: $0 MODEL ARTIFACT in|out:LABEL=PATH... [-- oscar-verify options]" >&2; exit 2; }
[ $# -ge 3 ] || usage
model=$1 art=$2; shift 2
sets=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do sets+=("$1"); shift; done
[ $# -gt 0 ] && shift # the --
extra=("$@")
[ ${#extra[@]} -gt 0 ] || extra=(--ctx 1024 --tokens 1024 --metric-tokens 16 --methods bf16,hadamard,oscar)
[ ${#sets[@]} -gt 0 ] || usage
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
for s in "${sets[@]}"; do
    kind=${s%%:*} rest=${s#*:}
    label=${rest%%=*} path=${rest#*=}
    if [[ "$kind" != in && "$kind" != out ]] || [ "$rest" = "$s" ] || [ "$path" = "$rest" ] || [ -z "$label" ]; then
        echo "$0: '$s' is not in|out:LABEL=PATH" >&2; exit 2
    fi
    [ -e "$path" ] || { echo "$0: $label: no such corpus: $path" >&2; exit 1; }
    if [[ "$path" == *.json ]]; then
        cp "$path" "$tmp/$i.json"
    else
        echo "== gaps: $label (${kind/out/out-of}-domain): oscar-verify on $path" >&2
        "$B/bin/oscar-verify" --model "$model" --rotations "$art" --corpus "$path" "${extra[@]}" --json \
            > "$tmp/$i.json"
    fi
    printf '%s\t%s\t%s\n' "$kind" "$label" "$tmp/$i.json" >> "$tmp/index"
    i=$((i + 1))
done
python3 - "$tmp/index" "${GAPS_JSON:-}" <<'PY'
import json, sys
rows, runs = [], []
for line in open(sys.argv[1]):
    kind, label, path = line.rstrip("\n").split("\t")
    r = json.load(open(path))
    ppl = {m["name"]: m["ppl"] for m in r["methods"]}
    if "bf16" not in ppl:
        sys.exit("gaps.sh: the methods need bf16 (the reference of the ratios)")
    rows.append((kind, label, r["corpus_tokens"], ppl))
    runs.append({"kind": kind, "label": label, "report": r})
methods = [m for m in rows[0][3] if m != "bf16" and all(m in r[3] for r in rows)]  # the ones every run has
print("| held-out set | domain | tokens | bf16 ppl | " + " | ".join("%s ppl (x bf16)" % m for m in methods) + " |")
print("|---|---|---:|---:|" + "---:|" * len(methods))
gap = {}
for kind, label, n, ppl in rows:
    print("| %s | %s | %d | %.3f | " % (label, kind, n, ppl["bf16"])
          + " | ".join("%.3f (%.4f)" % (ppl[m], ppl[m] / ppl["bf16"]) for m in methods) + " |")
    for m in methods:
        gap.setdefault((kind, m), []).append(ppl[m] / ppl["bf16"])
# The mean ratio per domain: what 'in-domain gap' and 'out-of-domain gap' mean here
for kind in ("in", "out"):
    if any(k == kind for k, _ in gap):
        print("| **mean %s** | %s | | | " % ("in-domain" if kind == "in" else "out-of-domain", kind)
              + " | ".join("(%.4f)" % (sum(gap[(kind, m)]) / len(gap[(kind, m)])) for m in methods) + " |")
if sys.argv[2]:
    table = {"%s/%s" % k: sum(v) / len(v) for k, v in gap.items()}
    import os
    tmp = sys.argv[2] + ".tmp"   # written whole, then renamed: never a half-written GAPS_JSON
    with open(tmp, "w") as f:
        json.dump({"runs": runs, "mean_ratio_to_bf16": table}, f, indent=1)
    os.replace(tmp, sys.argv[2])
PY
