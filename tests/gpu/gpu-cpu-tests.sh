#!/usr/bin/env bash
# gpu-cpu-tests.sh - the CPU test suite (make test's unit, sanitizer and
# integration runs) on the GPU machine's CPUs, which differ from CI's. That
# machine reaches no registry, so what `make deps` would fetch is carried in
# $OSCAR_CARRY (default .devcarry, git-ignored) and staged in $OSCAR_CACHE:
#   debs/      Debian .debs of the libraries its image lacks (gpu-deps.sh)
#   whl/       wheels the oracle venv needs beyond the image's Python
#              (gguf, huggingface_hub 2.4.0 and its deps: httpx2, idna, anyio, ...);
#              the venv also sees the image's numpy, tokenizers and safetensors
#   model/     SmolLM2-135M-Instruct.Q4_1.gguf split into parts (the device
#              tool carries 64 MiB per call, so a stage-only call can bring
#              parts ahead: OSCAR_STAGE_ONLY=1 copies them and exits)
#   corpora/   the corpora as `make deps` builds them
# The data committed under data/ (Qwen3 tokenizer, GSM8K) is unpacked into the
# cache by datasets/unpack-data.sh, with zstd from the carried .debs.
# The model is checked against the sha256 that datasets/deps.sh pins.
#
#   bash tests/gpu/gpu-cpu-tests.sh        # then: N passed, N failed
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
carry=${OSCAR_CARRY:-$root/.devcarry}
export OSCAR_CACHE=${OSCAR_CACHE:-/root/oscar-cache}
mkdir -p "$OSCAR_CACHE/models" "$OSCAR_CACHE/parts"

# --- stage what was carried ----------------------------------------------------
[ -d "$carry/model" ] && cp "$carry"/model/* "$OSCAR_CACHE/parts/" 2>/dev/null
[ -d "$carry/corpora" ] && cp -r "$carry/corpora" "$OSCAR_CACHE/"
if [ "${OSCAR_STAGE_ONLY:-0}" = 1 ]; then
    ls -la "$OSCAR_CACHE/parts"
    exit 0
fi
gguf=$OSCAR_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
want=$(sed -n 's/^GGUF_SHA=//p' datasets/deps.sh)
if [ ! -f "$gguf" ]; then
    cat "$OSCAR_CACHE"/parts/smollm2.part* > "$gguf.tmp" && mv "$gguf.tmp" "$gguf"
fi
got=$(sha256sum "$gguf" | cut -d' ' -f1)
[ "$got" = "$want" ] || { echo "gpu-cpu-tests: SmolLM2 sha256 $got, want $want"; rm -f "$gguf"; exit 1; }

# The image's numpy, tokenizers and safetensors live in a venv of their own (the
# first python3 on PATH that has them); a venv made from it would see only the
# base interpreter's packages, so a .pth file adds that venv's site-packages
# behind the carried wheels.
if [ ! -x "$OSCAR_CACHE/venv/bin/python" ]; then
    base=""
    for py in $(which -a python3); do
        "$py" -c 'import numpy, tokenizers, safetensors' 2>/dev/null && { base=$py; break; }
    done
    [ -n "$base" ] || { echo "gpu-cpu-tests: no python3 on PATH has numpy, tokenizers and safetensors"; exit 1; }
    "$base" -m venv "$OSCAR_CACHE/venv" || exit 1
    site=$("$OSCAR_CACHE/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/image-packages.pth" || exit 1
    "$OSCAR_CACHE/venv/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "$carry"/whl/*.whl || exit 1
fi
"$OSCAR_CACHE/venv/bin/python" -c 'import gguf, numpy, tokenizers, safetensors, huggingface_hub as h
h.hf_hub_download; print("venv: huggingface_hub", h.__version__)' || { echo "gpu-cpu-tests: the venv is incomplete"; exit 1; }

# --- libraries, data, build, tests -----------------------------------------------
OSCAR_DEBS=$carry/debs . "$here/gpu-deps.sh"
bash datasets/unpack-data.sh || exit 1
lscpu | sed -n 's/^Model name: *//p; s/^CPU(s): *//p'
jobs=$(nproc)
make CUDA=0 WERROR=1 -j"$jobs" all > /tmp/gpu-cpu-build.log 2>&1 || { tail -30 /tmp/gpu-cpu-build.log; exit 1; }
make CUDA=0 WERROR=1 SAN=1 -j"$jobs" all >> /tmp/gpu-cpu-build.log 2>&1 || { tail -30 /tmp/gpu-cpu-build.log; exit 1; }
OSCAR_BUILD=build OSCAR_SAN_BUILD=build-san bash tests/run-tests.sh
