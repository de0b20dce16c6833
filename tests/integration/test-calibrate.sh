#!/usr/bin/env bash
# test-calibrate.sh - oscar-calibrate end to end on SmolLM2-135M with a small
# budget: artifact written and loadable (C reader with the orthogonality check,
# Python safetensors), rotations orthogonal to 1e-6, gate passes (OSCAR below
# Hadamard and naive INT2), resume after SIGKILL gives byte-identical tensors,
# --threads 1 vs 2 byte-identical, bad inputs fail with exit 1/2 and write nothing.
set -u
. "$(dirname "$0")/common.sh"
need_smollm2
CAL=$B/bin/oscar-calibrate
# the [D,D] layout asserted below is grouping layer's (auto is test-calibrate-grouping.sh's)
ARGS=(-m "$MODEL" -f "$CORPUS" --tokens 512 -c 128 --heldout 1 --sink 16 --recent 32 --clip-search 1.0:0.8:0.04 -q
      --rotation-grouping layer)

# 1. reference run (2 threads)
"$CAL" "${ARGS[@]}" -t 2 -o "$T/a" --json > "$T/a.json" || fail "calibrate run failed"
for f in oscar.safetensors oscar.json README.md; do [ -s "$T/a/$f" ] || fail "missing $f"; done
grep -q '"pass": true' "$T/a.json" || fail "gate did not pass: $(head -c 400 "$T/a.json")"
grep -q '^- kv-cache' "$T/a/README.md" || fail "model card tags missing"

# 2. Python safetensors loads it; orthogonality 1e-6 (fp32 rotations from fp64 orthogonal
#    matrices: ~1e-7 at D = 64; 1e-6 leaves 10x headroom and still catches any real defect)
if [ -x "$PY" ]; then
    "$PY" - "$T/a/oscar.safetensors" <<'PYEOF' || fail "python check"
import sys, numpy as np
from safetensors.numpy import load_file
from safetensors import safe_open
t = load_file(sys.argv[1])
with safe_open(sys.argv[1], "np") as f:
    md = f.metadata()
L, D = int(md["oscar.num_layers"]), int(md["oscar.head_dim"])
assert md["format"] == "pt" and md["oscar.format_version"] == "1", md
assert md["oscar.k_objective"] == "qqt_r_h_pbr" and md["oscar.v_objective"] == "sst_r_h_pbr", md
assert md["oscar.calib_tag"] == "seq512_prompt4_group64", md["oscar.calib_tag"]
worst = 0.0
for i in range(L):
    for k in ("k_rotation", "v_rotation"):
        R = t[f"layers.{i}.{k}"].astype(np.float64)
        assert R.shape == (D, D), R.shape
        worst = max(worst, np.abs(R @ R.T - np.eye(D)).max())
    e = t[f"layers.{i}.k_eigenvalues"]
    assert e.shape == (D,) and np.all(np.diff(e) >= 0), "eigenvalues not ascending"
    c = t[f"layers.{i}.k_clip"]
    assert c.shape == () and 0.8 <= float(c) <= 1.0, c
assert worst < 1e-6, worst
print("python: %d tensors, max|RR^T-I| = %.2e" % (len(t), worst))
PYEOF
else
    echo "note: venv python missing, safetensors check skipped"
fi

# 3. threads 1 gives identical bytes
"$CAL" "${ARGS[@]}" -t 1 -o "$T/b" || fail "threads=1 run failed"
for f in oscar.safetensors oscar.json README.md; do cmp -s "$T/a/$f" "$T/b/$f" || fail "$f differs between --threads 2 and 1"; done

# 4. SIGKILL at a random point after the first checkpoint, then --resume: identical bytes
SEED=${CAL_SEED:-$RANDOM}
echo "resume test seed $SEED"
"$CAL" "${ARGS[@]}" -t 2 -o "$T/c" --checkpoint-every 128 & pid=$!
for _ in $(seq 1 600); do [ -f "$T/c.ckpt" ] && break; sleep 0.1; done
[ -f "$T/c.ckpt" ] || { kill -9 $pid; fail "no checkpoint appeared"; }
sleep "$(awk -v s="$SEED" 'BEGIN{srand(s); printf "%.1f", rand()*4}')"
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
[ -e "$T/c/oscar.safetensors" ] && echo "note: run finished before the kill"
"$CAL" "${ARGS[@]}" -t 2 -o "$T/c" --checkpoint-every 128 --resume || fail "resume failed"
for f in oscar.safetensors oscar.json README.md; do cmp -s "$T/a/$f" "$T/c/$f" || fail "$f differs after kill + resume"; done
[ -e "$T/c.ckpt" ] && fail "checkpoint not removed after success"

# 5. bad inputs: clear error, exit code, nothing written
: > "$T/empty.txt"
"$CAL" -m "$MODEL" -f "$T/empty.txt" -o "$T/e1" -q 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "empty" "$T/err" && [ ! -e "$T/e1" ] || fail "empty corpus: rc=$rc $(cat "$T/err")"
head -c 3000 "$CORPUS" > "$T/short.txt"
"$CAL" -m "$MODEL" -f "$T/short.txt" -o "$T/e2" --tokens 5000 -q 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "allow-short" "$T/err" && [ ! -e "$T/e2" ] || fail "short corpus: rc=$rc $(cat "$T/err")"
"$CAL" -m "$MODEL" -f "$CORPUS" -q 2> /dev/null; [ $? -eq 2 ] || fail "missing --out must be a usage error"
"$CAL" -m "$MODEL" -f "$CORPUS" -o "$T/x" --clip 1.5,0.9 -q 2> /dev/null; [ $? -eq 2 ] || fail "bad --clip must be a usage error"
mkdir -p "$T/ro" && chmod 555 "$T/ro"
if [ ! -w "$T/ro" ]; then
    "$CAL" "${ARGS[@]}" -o "$T/ro/art" 2> "$T/err"; rc=$?
    [ $rc -eq 1 ] && [ ! -e "$T/ro/art" ] || fail "unwritable output: rc=$rc"
fi
printf 'OSCCALCKgarbage' > "$T/d.ckpt"
"$CAL" "${ARGS[@]}" -o "$T/d" --resume 2> "$T/err"; rc=$?
[ $rc -eq 1 ] && grep -q "checkpoint" "$T/err" && [ ! -e "$T/d" ] || fail "corrupt checkpoint: rc=$rc $(cat "$T/err")"
echo "ok"
