#!/usr/bin/env bash
# sglang-int2.sh - the SGLang OSCAR fork's INT2 cache writers against oscar's quantizer, on a GPU
# machine with torch and triton (the H200): tests/engines/sglang-int2.py says what is compared.
#
# The fork is sglang-research/ of github.com/FutureMLS-Lab/OSCAR, main @ 473ff3f9 (the commit
# lib/util/target.c cites). Only three files of it are used, exported into an ignored folder:
#   python/sglang/srt/mem_cache/kv_quant_kernels.py
#   python/sglang/QuantKernel/oscar_rotation_clip_int2_kv.py   (the prefill writer)
#   python/sglang/QuantKernel/gpu_flush_int2.py                 (the decode-time demotion)
# They import only torch and triton, so they run without SGLang itself (no package __init__ is
# exported: Python reads the folders as namespace packages).
#
#   FORK_GIT=<bare git dir with that commit> bash tests/engines/sglang-int2.sh export   (here)
#   bash tests/engines/sglang-int2.sh run       (GPU machine; carry .engines/sglang-fork)
# Env: FORK_COMMIT (default 473ff3f9...), FORK_OUT (default .engines/sglang-fork), OUT (report dir).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${FORK_OUT:-$root/.engines/sglang-fork}
want=${FORK_COMMIT:-473ff3f9d}
files=(python/sglang/srt/mem_cache/kv_quant_kernels.py python/sglang/QuantKernel/oscar_rotation_clip_int2_kv.py
       python/sglang/QuantKernel/gpu_flush_int2.py)
case "${1:-}" in
export)
    [[ -n "${FORK_GIT:-}" ]] || { echo "sglang-int2.sh: set FORK_GIT to a git dir of FutureMLS-Lab/OSCAR" >&2; exit 2; }
    full=$(git --git-dir="$FORK_GIT" rev-parse --verify "$want^{commit}" 2>/dev/null) ||
        { echo "sglang-int2.sh: $FORK_GIT has no commit $want" >&2; exit 2; }
    rm -rf "$out" && mkdir -p "$out"
    for f in "${files[@]}"; do
        mkdir -p "$out/$(dirname "$f")"
        git --git-dir="$FORK_GIT" show "$full:sglang-research/$f" > "$out/$f"
    done
    echo "$full" > "$out/.fork-commit"
    echo "sglang-int2.sh: exported ${#files[@]} files of $full into $out" >&2
    ;;
run)
    for f in "${files[@]}"; do [[ -f "$out/$f" ]] || { echo "sglang-int2.sh: $out/$f missing (run export)" >&2; exit 2; }; done
    make -s -C "$root" WERROR=1 build/bin/oscar-quant-tool >&2
    python3 "$root/tests/engines/sglang-int2.py" --fork "$out/python" --tool "$root/build/bin/oscar-quant-tool" \
        --out "${OUT:-$root/build/sglang-int2}" --commit "$(cat "$out/.fork-commit")"
    ;;
*)
    echo "usage: sglang-int2.sh export|run" >&2
    exit 2
    ;;
esac
