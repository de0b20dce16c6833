#!/usr/bin/env bash
# pt-import-torch.sh - oscar-zoo import against real torch, on a machine that has it
# (the GPU machine; CI's venv has no torch). For each layout of
# tests/oracle/torch_pt_oracle.py (zoo: format 1 per layer; optr: format 2 per KV head
# + k_mean; hadamard: one tensor shared by every layer; deflate):
#   1. the oracle writes the .pt files and the numbers an importer must find;
#   2. real torch loads each file with weights_only=True (the oracle's files are
#      torch files) and saves it again with torch.save (so the bytes are torch's);
#   3. oscar-zoo import reads torch's files; the artifact must equal the numbers bitwise.
# Prints one line per layout and "pt-import-torch: PASS" or exits 1.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
[ -n "${OSCAR_DEBS:-}" ] && . "$here/gpu-deps.sh"
py=""
for p in $(which -a python3); do "$p" -c 'import torch, numpy' 2>/dev/null && { py=$p; break; }; done
[ -n "$py" ] || { echo "pt-import-torch: no python3 with torch and numpy"; exit 1; }
make CUDA=0 -j"$(nproc)" build/bin/oscar-zoo > /tmp/pt-import-build.log 2>&1 || { tail -20 /tmp/pt-import-build.log; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ora=tests/oracle/torch_pt_oracle.py
fail=0
for v in zoo optr hadamard deflate; do
    "$py" "$ora" write $v "$T/$v" || { echo "FAIL $v: oracle write"; fail=1; continue; }
    mkdir -p "$T/$v-torch"
    cp "$T/$v/expected.npz" "$T/$v-torch/"
    "$py" - "$T/$v" "$T/$v-torch" <<'PY' || { echo "FAIL $v: torch could not load the oracle's files"; fail=1; continue; }
import glob, os, sys, torch
src, dst = sys.argv[1:]
for f in sorted(glob.glob(os.path.join(src, "*.pt"))):
    obj = torch.load(f, weights_only=True)
    torch.save(obj, os.path.join(dst, os.path.basename(f)))
print("torch", torch.__version__, "re-saved", len(glob.glob(os.path.join(dst, "*.pt"))), "files")
PY
    if build/bin/oscar-zoo import "$T/$v-torch" --out "$T/$v-art" -q > /dev/null 2> "$T/err" \
        && "$py" "$ora" check "$T/$v-torch" "$T/$v-art" > /dev/null 2>> "$T/err"; then
        echo "ok   $v: torch.save's files import to the oracle's numbers bitwise"
    else
        echo "FAIL $v: $(cat "$T/err")"; fail=1
    fi
done
[ $fail = 0 ] && echo "pt-import-torch: PASS" || exit 1
