#!/usr/bin/env bash
# test-quant-oracle.sh - lib/quant vs the independent numpy oracle, byte for byte:
#   1. the committed fixtures tests/fixtures/quant (no Python needed);
#   2. fresh random + adversarial cases from tests/oracle/quant_oracle.py with a new
#      seed (printed; set OSCAR_SEED to replay), when the CI venv's numpy exists.
set -u
cd "$(dirname "$0")/../.."
build=${OSCAR_BUILD:-build}
tool=$build/bin/oscar-quant-tool
[ -x "$tool" ] || { echo "missing $tool"; exit 1; }
"$tool" check tests/fixtures/quant || exit 1
py=${OSCAR_CACHE:-$HOME/.cache/oscar}/venv/bin/python
if ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "no numpy venv at $py: live oracle part skipped"
    exit 0
fi
seed=${OSCAR_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "live oracle seed: $seed"
tmp=$(mktemp -d /tmp/oscar-quant-oracle-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$py" tests/oracle/quant_oracle.py --seed "$seed" --rows 8 --out "$tmp" || exit 1
"$tool" check "$tmp" || { echo "mismatch with seed $seed"; exit 1; }
# The raw quant mode writes the same bytes as the check mode compares.
read -r _ mode D G meta clip ratio rows < "$tmp/cases.txt"
"$tool" quant "$mode" "$D" "$G" "$meta" "$clip" "$ratio" "$rows" "$tmp/case0.in" "$tmp/y.codes" "$tmp/y.meta" || exit 1
cmp "$tmp/y.codes" "$tmp/case0.codes" && cmp "$tmp/y.meta" "$tmp/case0.meta" || exit 1
echo "ok"
