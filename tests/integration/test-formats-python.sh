#!/usr/bin/env bash
# test-formats-python.sh - safetensors interop with the Python `safetensors`
# package (it reads our file; we read its files, single and sharded, F32/F16/BF16),
# and the SmolLM2 GGUF loaded through oscar_model_load: config values, the q/k
# un-permutation checked against gguf's own dequantization, source_sha256 vs
# sha256sum. Exit 77 without the venv.
set -eu
. "$(dirname "$0")/common.sh"
build=$B py=$PY tmp=$T
[ -x "$py" ] || skip "no venv"
tool=$build/bin/oscar-st-tool

"$tool" write "$tmp/ours.safetensors"
"$py" - "$tmp/ours.safetensors" <<'PY'
import sys, numpy as np
from safetensors import safe_open
with safe_open(sys.argv[1], "np") as f:
    assert f.metadata() == {"format": "pt", "oscar.note": "h\u00e9llo"}, f.metadata()
    assert sorted(f.keys()) == ["codes", "layers.0.k_clip", "layers.0.k_rotation", "perm"]
    np.testing.assert_array_equal(f.get_tensor("layers.0.k_rotation"), np.array([[1.5, -2, 3], [4, 5, 6.25]], np.float32))
    assert f.get_tensor("layers.0.k_clip").shape == () and f.get_tensor("layers.0.k_clip") == np.float32(0.96)
    np.testing.assert_array_equal(f.get_tensor("perm"), np.array([[-1, 2], [-3, 4]], np.int32))
    np.testing.assert_array_equal(f.get_tensor("codes"), np.array([250, 1, 2], np.uint8))
print("python safetensors reads oscar's file: ok")
PY

"$py" - "$tmp" <<'PY'
import sys, json, numpy as np
from safetensors.numpy import save_file
d = sys.argv[1]
rng = np.random.default_rng(5)
a = {"x.f32": rng.standard_normal((3, 5)).astype(np.float32), "x.f16": rng.standard_normal((7,)).astype(np.float16),
     "x.bf16": (rng.standard_normal((4, 2)).astype(np.float32).view(np.uint32) & 0xffff0000).view(np.float32)}
save_file({"x.f32": a["x.f32"], "x.f16": a["x.f16"]}, f"{d}/single.safetensors", metadata={"format": "pt"})
# bf16 stored by hand: numpy has no bf16, so write the raw upper halves with a header
import struct
hdr = json.dumps({"x.bf16": {"dtype": "BF16", "shape": [4, 2], "data_offsets": [0, 16]}}).encode()
hdr += b" " * (-len(hdr) % 8)
raw = (a["x.bf16"].view(np.uint32) >> 16).astype(np.uint16).tobytes()
open(f"{d}/bf16.safetensors", "wb").write(struct.pack("<Q", len(hdr)) + hdr + raw)
import os
os.makedirs(f"{d}/sharded")
save_file({"x.f32": a["x.f32"]}, f"{d}/sharded/model-00001-of-00002.safetensors")
save_file({"x.f16": a["x.f16"]}, f"{d}/sharded/model-00002-of-00002.safetensors")
json.dump({"metadata": {}, "weight_map": {"x.f32": "model-00001-of-00002.safetensors",
                                          "x.f16": "model-00002-of-00002.safetensors"}},
          open(f"{d}/sharded/model.safetensors.index.json", "w"))
with open(f"{d}/expect.txt", "w") as f:
    for k, v in a.items():
        f.write(f"{k} {float(np.sum(v.astype(np.float64))):.17g}\n")
PY
"$tool" dump "$tmp/single.safetensors" > "$tmp/single.txt"
"$tool" dump "$tmp/bf16.safetensors" > "$tmp/bf16.txt"
"$tool" dump "$tmp/sharded" > "$tmp/sharded.txt"
"$tool" dump "$tmp/sharded/model.safetensors.index.json" > "$tmp/sharded2.txt"
cmp "$tmp/sharded.txt" "$tmp/sharded2.txt"
"$py" - "$tmp" <<'PY'
import sys
d = sys.argv[1]
exp = dict(l.split() for l in open(f"{d}/expect.txt"))
got = {}
for fn in ["single", "bf16", "sharded"]:
    for l in open(f"{d}/{fn}.txt"):
        p = l.split()
        if p[0] == "tensor":
            got.setdefault(fn, {})[p[1]] = p[4]
# fp32 sums of exactly-converted values, accumulated in fp64 in both: equal to rounding of the
# different summation orders, far below 1e-9 relative for <= 15 values of magnitude ~1
for fn, ts in got.items():
    for k, v in ts.items():
        assert abs(float(v) - float(exp[k])) <= 1e-12 * max(1.0, abs(float(exp[k]))), (fn, k, v, exp[k])
assert set(got["sharded"]) == {"x.f32", "x.f16"} and set(got["single"]) == {"x.f32", "x.f16"}
print("oscar reads python safetensors files (single, bf16, sharded): ok")
PY
grep -q "meta format=pt" "$tmp/single.txt"

model=$MODEL
[ -f "$model" ] || { echo "SmolLM2 absent: model load skipped"; exit 0; }
out=$("$tool" model "$model")
echo "$out"
echo "$out" | grep -q "arch llama layers 30 embd 576 heads 9 kv 3 head_dim 64 ff 1536 vocab 49152 ctx 8192 theta 100000 eps 9.99999975e-06 tied 1"
sha=$(sha256sum "$model" | cut -d' ' -f1)
echo "$out" | grep -q "sha256 $sha"
# HF row 1 of head 0 is ggml row 2 (i = 1 -> 2i); check against gguf's dequantization
"$py" - "$model" "$out" <<'PY'
import sys, numpy as np, gguf
r = gguf.GGUFReader(sys.argv[1])
t = {x.name: x for x in r.tensors}
vals = dict(l.rsplit(" ", 1) for l in sys.argv[2].splitlines() if l.startswith("w"))
for name, key in [("blk.0.attn_q.weight", "wq0 row1 first"), ("blk.0.attn_k.weight", "wk0 row1 first")]:
    w = gguf.quants.dequantize(t[name].data, t[name].tensor_type).reshape(-1, 576)
    assert np.float32(vals[key]) == w[2, 0], (name, vals[key], w[2, 0], w[1, 0])
print("SmolLM2 q/k un-permutation matches gguf rows: ok")
PY
