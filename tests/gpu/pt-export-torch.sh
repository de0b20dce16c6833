#!/usr/bin/env bash
# pt-export-torch.sh - oscar-zoo export --format pt against real torch, on a machine that has it
# (the GPU machine; CI's venv has no torch). For each layout (per layer, per layer + k_mean, per KV
# head, per KV head + k_mean) of a synthetic artifact (tests/tools/oscar-make-artifact.c):
#   1. oscar-zoo export --format pt --target oscar writes the files (formats/README.md names them);
#   2. tests/oracle/check_pt_export.py with torch importable: torch.load(weights_only=True) of every
#      file, read the way the OptR SGLang engine's loaders read them (load_oscar_rotations with
#      num_heads, _load_oscar_k_means), bit-exact against the artifact;
#   3. torch.save of what torch loaded, oscar-zoo import of torch's bytes: the artifact's rotations,
#      eigenvalues and k_mean come back bitwise.
# Prints one line per layout and "pt-export-torch: PASS" or exits 1.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
[ -n "${OSCAR_DEBS:-}" ] && . "$here/gpu-deps.sh"
py=""
for p in $(which -a python3); do "$p" -c 'import torch, numpy' 2>/dev/null && { py=$p; break; }; done
[ -n "$py" ] || { echo "pt-export-torch: no python3 with torch and numpy"; exit 1; }
make CUDA=0 -j"$(nproc)" build/bin/oscar-zoo build/bin/oscar-make-artifact > /tmp/pt-export-build.log 2>&1 \
    || { tail -20 /tmp/pt-export-build.log; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
for v in 0 0m 1 1m; do
    art="$T/art$v"
    build/bin/oscar-make-artifact "$art" 4 8 2 64 $v 21 qwen3 2>/dev/null || { echo "FAIL $v: make artifact"; fail=1; continue; }
    build/bin/oscar-zoo export "$art" --format pt --target oscar --out "$T/pt$v" -q > /dev/null 2> "$T/err" \
        || { echo "FAIL $v: export: $(cat "$T/err")"; fail=1; continue; }
    out=$("$py" tests/oracle/check_pt_export.py "$art" "$T/pt$v" 2>&1)
    echo "$out" | grep -q "^ok torch .* torch.load(weights_only=True)" && ! echo "$out" | grep -q FAIL \
        || { echo "FAIL $v: $out"; fail=1; continue; }
    mkdir -p "$T/torch$v"
    "$py" - "$T/pt$v" "$T/torch$v" <<'PY' || { echo "FAIL $v: torch re-save"; fail=1; continue; }
import glob, os, sys, torch
src, dst = sys.argv[1:]
for f in sorted(glob.glob(os.path.join(src, "*.pt"))):
    torch.save(torch.load(f, weights_only=True), os.path.join(dst, os.path.basename(f)))
PY
    if build/bin/oscar-zoo import "$T/torch$v" --out "$T/imp$v" -q > /dev/null 2> "$T/err" \
        && "$py" - tests/oracle "$art" "$T/imp$v" <<'PY' 2>> "$T/err"; then
import sys
sys.path.insert(0, sys.argv[1])
from check_pt_export import read_artifact
a, _ = read_artifact(sys.argv[2])
b, _ = read_artifact(sys.argv[3])
names = [k for k in a if k.endswith(("_rotation", "_eigenvalues", ".k_mean"))]
assert len(names) == 4 * (5 if "layers.0.k_mean" in a else 4), names
for k in names:
    assert a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes(), k
PY
        echo "ok   $v: $(ls "$T/pt$v" | tr '\n' ' ')load in torch as the OptR loaders read them; torch.save's bytes import back bitwise"
    else
        echo "FAIL $v: $(cat "$T/err")"; fail=1
    fi
done
[ $fail = 0 ] && echo "pt-export-torch: PASS" || exit 1
