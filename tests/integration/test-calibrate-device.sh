#!/usr/bin/env bash
# test-calibrate-device.sh - oscar-calibrate's --device and --random-init on the CPU:
#   1. --device cpu is the layer-major engine of the default run, with every option:
#      byte-identical artifacts with and without it (also with --checkpoint-every), and
#      --capture-dtype bf16 is honoured (a different artifact, the same as without
#      --device, oscar.capture_dtype bfloat16; before, --device cpu ignored it);
#   2. --random-init smollm2-135m runs on synthetic tokens and records that in the artifact;
#   3. --device cuda on a machine without a GPU fails cleanly (exit 1, a message), also with
#      --resume, --save-activations and --checkpoint-every (the one engine takes them on every
#      backend), and conflicting options are usage errors (exit 2): an fp32 capture from the
#      bf16 GPU pass, which captures bf16.
# Skips (77) without the model.
set -euo pipefail
B=${OSCAR_BUILD:-build}
C=${OSCAR_CACHE:-$HOME/.cache/oscar}
M=$C/models/SmolLM2-135M-Instruct.Q4_1.gguf
F=$C/corpora/austen/prideprejudice.txt
[ -f "$M" ] && [ -f "$F" ] || { echo "skip: model or corpus missing"; exit 77; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
CAL="$B/bin/oscar-calibrate"
common=(--tokens 512 -c 128 --heldout 1 --sink 16 --recent 32 -q)   # INT2 rows in the held-out gate

"$CAL" -m "$M" -f "$F" "${common[@]}" -o "$T/classic"
"$CAL" -m "$M" -f "$F" "${common[@]}" -o "$T/device" --device cpu
cmp "$T/classic/oscar.safetensors" "$T/device/oscar.safetensors"
"$CAL" -m "$M" -f "$F" "${common[@]}" -o "$T/ckpt" --device cpu --checkpoint-every 64
cmp "$T/classic/oscar.safetensors" "$T/ckpt/oscar.safetensors"
grep -q '"oscar.capture_dtype": "float32"' "$T/device/oscar.json"
echo "ok: --device cpu artifact is byte-identical to the default path, with checkpoints too"
"$CAL" -m "$M" -f "$F" "${common[@]}" -o "$T/bf16" --capture-dtype bf16
"$CAL" -m "$M" -f "$F" "${common[@]}" -o "$T/bf16-cpu" --capture-dtype bf16 --device cpu
cmp "$T/bf16/oscar.safetensors" "$T/bf16-cpu/oscar.safetensors"
if cmp -s "$T/classic/oscar.safetensors" "$T/bf16/oscar.safetensors"; then
    echo "FAIL: --capture-dtype bf16 gave the fp32-capture artifact"; exit 1
fi
grep -q '"oscar.capture_dtype": "bfloat16"' "$T/bf16-cpu/oscar.json"
echo "ok: --device cpu --capture-dtype bf16 is a bf16 capture, recorded in the metadata"

"$CAL" --random-init smollm2-135m "${common[@]}" -o "$T/random"
grep -q '"oscar.base_model": "random-init:smollm2-135m"' "$T/random/oscar.json"
grep -q '"oscar.tokenizer_hash": "none (synthetic tokens)"' "$T/random/oscar.json"
echo "ok: --random-init artifact records its synthetic provenance"

if nvidia-smi -L >/dev/null 2>&1; then
    echo "GPU present: the CUDA path is covered by tests/gpu/gpu-forward-check.sh"
else
    set +e
    "$CAL" -m "$M" -f "$F" "${common[@]}" -o "$T/cuda" --device cuda 2>"$T/cuda.err"
    rc=$?
    set -e
    [ "$rc" -eq 1 ] || { echo "FAIL: --device cuda without a GPU exited $rc"; cat "$T/cuda.err"; exit 1; }
    grep -Eq "no CUDA device|not compiled in" "$T/cuda.err" || { cat "$T/cuda.err"; exit 1; }
    [ ! -e "$T/cuda" ] || { echo "FAIL: wrote an artifact"; exit 1; }
    echo "ok: --device cuda without a GPU: $(tail -n 1 "$T/cuda.err")"
    for opt in "--resume" "--checkpoint-every 64" "--save-activations $T/acts.h5" "--capture-dtype bf16"; do
        set +e
        # shellcheck disable=SC2086
        "$CAL" -m "$M" -f "$F" "${common[@]}" -o "$T/cuda" --device cuda $opt 2>"$T/cuda.err"
        rc=$?
        set -e
        [ "$rc" -eq 1 ] && grep -Eq "no CUDA device|not compiled in" "$T/cuda.err" \
            || { echo "FAIL: --device cuda $opt exited $rc"; cat "$T/cuda.err"; exit 1; }
    done
    [ ! -e "$T/acts.h5" ] || { echo "FAIL: --save-activations left a store"; exit 1; }
    echo "ok: --device cuda takes --resume, --checkpoint-every, --save-activations and --capture-dtype bf16"
fi

for bad in "--random-init qwen3-8b -m $M" "--device tpu -m $M -f $F" "--device cuda --capture-dtype fp32 -m $M -f $F" \
           "--random-init nope"; do
    set +e
    # shellcheck disable=SC2086
    "$CAL" $bad -o "$T/bad" "${common[@]}" 2>/dev/null
    rc=$?
    set -e
    [ "$rc" -eq 2 ] || { echo "FAIL: '$bad' exited $rc, expected 2"; exit 1; }
done
echo "ok: usage errors exit 2"
