# hub-lib.sh - sourced by tests/integration/test-hub-*.sh: starts the local Hub
# emulator (tests/hub/hub_emulator.py) on loopback, points HF_ENDPOINT, HF_HOME
# and HF_TOKEN at it, and stops it on exit. Skips (77) without python3 or the
# oscar-zoo binary.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${OSCAR_BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
ZOO="$BUILD/bin/oscar-zoo"
VENV_PY="${OSCAR_CACHE:-$HOME/.cache/oscar}/venv/bin/python"
[ -x "$ZOO" ] || { echo "skip: $ZOO not built"; exit 77; }
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }

T=$(mktemp -d /tmp/oscar-hub-test.XXXXXX)
EMU_PID=""
cleanup() {
    [ -n "$EMU_PID" ] && kill "$EMU_PID" 2>/dev/null
    [ -n "${EMU_PID}" ] && wait "$EMU_PID" 2>/dev/null
    mountpoint -q "$T/full" 2>/dev/null && umount "$T/full"
    rm -rf "$T"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# start_emulator [extra args...]
start_emulator() {
    python3 "$ROOT/tests/hub/hub_emulator.py" --port-file "$T/ports.json" "$@" &
    EMU_PID=$!
    for _ in $(seq 100); do [ -f "$T/ports.json" ] && break; sleep 0.05; done
    [ -f "$T/ports.json" ] || fail "emulator did not start"
    ENDPOINT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["endpoint"])' "$T/ports.json")
    export HF_ENDPOINT="$ENDPOINT"
    export HF_HOME="$T/hf-home"
    export HF_HUB_CACHE="$T/hf-home/hub"
    export HF_TOKEN=hf_emulator_token
    export HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1
    export HF_HUB_ETAG_TIMEOUT=5 HF_HUB_DOWNLOAD_TIMEOUT=5
    export OSCAR_HUB_BACKOFF=0.05 OSCAR_HUB_MAX_RETRIES=3
    unset HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HUGGING_FACE_HUB_TOKEN HF_TOKEN_PATH
}

emu_post() { # emu_post PATH JSON
    curl -sf -X POST -H 'Content-Type: application/json' --data "$2" "$ENDPOINT$1" >/dev/null || fail "emulator control $1"
}
emu_fault() { emu_post /_emu/fault "$1"; }
emu_log() { curl -sf "$ENDPOINT/_emu/log"; }

have_hf_python() { [ -x "$VENV_PY" ] && "$VENV_PY" -c 'import huggingface_hub' 2>/dev/null; }

# make_artifact DIR: a small rotation-artifact-like folder (model card, json, safetensors-ish blob)
make_artifact() {
    mkdir -p "$1"
    cat > "$1/README.md" <<'CARD'
---
license: apache-2.0
base_model:
- HuggingFaceTB/SmolLM2-135M-Instruct
tags: [oscar, int2, kv-cache, quantization, rotation]
---
# OSCAR rotations (test artifact)
CARD
    printf '{"format_version": 1, "objective": "oscar"}\n' > "$1/oscar.json"
    python3 -c 'import os,sys; open(sys.argv[1],"wb").write(os.urandom(int(sys.argv[2])))' "$1/oscar.safetensors" "${2:-300000}"
}
