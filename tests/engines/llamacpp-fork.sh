#!/usr/bin/env bash
# Builds the OSCAR llama.cpp fork's llama-perplexity (CPU only) into an ignored folder, so that
# tests/engines/served-agreement.sh can compare it with oscar-verify --target llamacpp.
#
# The fork is the branch zhongzhu/llamacpp of github.com/FutureMLS-Lab/OSCAR, commit
# 4570ea609faff29336fe44f2d84ab437e8183fbc ("Ship OSCAR rotation matrices + GGUF baking script").
# Obtain it either way:
#   git clone --branch zhongzhu/llamacpp https://github.com/FutureMLS-Lab/OSCAR fork   (then FORK_SRC=fork)
#   or a bare git dir holding that commit (the session's fetch tool gave
#   /work/.mirror/FutureMLS-Lab+OSCAR/repo): FORK_GIT=<dir>; the tree is exported with git archive.
#
# usage: tests/engines/llamacpp-fork.sh            (FORK_SRC or FORK_GIT in the environment)
#   FORK_COMMIT  commit to export from FORK_GIT (default the one above; a FORK_SRC checkout is checked
#                against it and refused when it differs, unless FORK_ANY_COMMIT=1)
#   FORK_OUT     where the source and build go (default .engines/llamacpp-fork, ignored by git)
#   JOBS         parallel build jobs (default 2)
# Prints the path of llama-perplexity on stdout; progress on stderr.
set -euo pipefail

want=${FORK_COMMIT:-4570ea609faff29336fe44f2d84ab437e8183fbc}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${FORK_OUT:-$root/.engines/llamacpp-fork}
jobs=${JOBS:-2}
src=$out/src
mkdir -p "$out"

if [[ -n "${FORK_GIT:-}" ]]; then
    git --git-dir="$FORK_GIT" cat-file -e "$want^{commit}" 2>/dev/null ||
        { echo "llamacpp-fork.sh: $FORK_GIT: has no commit $want (fetch branch zhongzhu/llamacpp of FutureMLS-Lab/OSCAR)" >&2; exit 2; }
    if [[ "$(cat "$src/.fork-commit" 2>/dev/null)" != "$want" ]]; then
        echo "llamacpp-fork.sh: exporting $want from $FORK_GIT into $src" >&2
        rm -rf "$src" && mkdir -p "$src"
        # models/ holds vocab GGUFs for upstream's tests, not needed here (a snapshot may lack them)
        git --git-dir="$FORK_GIT" archive "$want" -- . ':(exclude)models/*.gguf' | tar -x -C "$src"
        echo "$want" > "$src/.fork-commit"
    fi
elif [[ -n "${FORK_SRC:-}" ]]; then
    got=$(git -C "$FORK_SRC" rev-parse HEAD 2>/dev/null || echo unknown)
    if [[ "$got" != "$want" && "${FORK_ANY_COMMIT:-0}" != 1 ]]; then
        echo "llamacpp-fork.sh: $FORK_SRC: is at $got, not $want (set FORK_ANY_COMMIT=1 to build it anyway)" >&2
        exit 2
    fi
    src=$(cd "$FORK_SRC" && pwd)
else
    echo "llamacpp-fork.sh: set FORK_SRC (a checkout) or FORK_GIT (a git dir); see the comment at the top" >&2
    exit 2
fi

bin=$out/build/bin/llama-perplexity
if [[ ! -x "$bin" || "$src/.fork-commit" -nt "$bin" ]]; then
    echo "llamacpp-fork.sh: configuring (CPU only, Release) in $out/build" >&2
    cmake -S "$src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_CURL=OFF -DGGML_METAL=OFF -DGGML_CUDA=OFF -DGGML_NATIVE=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >&2
    echo "llamacpp-fork.sh: building llama-perplexity with $jobs jobs" >&2
    cmake --build "$out/build" -j "$jobs" --target llama-perplexity >&2
fi
echo "$bin"
