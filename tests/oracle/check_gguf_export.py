#!/usr/bin/env python3
"""check_gguf_export.py - checks an `oscar-zoo export --format gguf` file with the `gguf` package.

Usage: check_gguf_export.py ARTIFACT_DIR OUT.gguf EXPECT_ORDER(hf|ggml) [BASE.gguf]

- every blk.{i}.attn_{k,v}_rot.weight exists, F32, ne = [D, D] (gguf reports
  shape in ne order), data (numpy rows = ne[1] index) equal to Mᵀ bit-exactly,
  where M = R_V for V and, for K, R_K (hf) or its ggml row permutation built
  from method.md §1.1's rule R_HF[i,:] = R_ggml[π(i),:], π(i)=2i, π(i+D/2)=2i+1;
- semantics: for random HF-order k, ggml_mul_mat(rot, k_ggml) (= rot_rows · k_ggml)
  equals k·R_K computed in HF order (fp64 tolerance from fp32 products);
- oscar.* metadata (types and values);
- with BASE: every base KV present with the same value and type, every base
  tensor present with the same type, ne and bytes, and nothing else but the
  rotation tensors and oscar.* keys.
"""
import sys

import numpy as np
import gguf

from check_pt_export import read_artifact, fail


def field_value(f):
    t = f.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]) for i in f.data]
        return np.concatenate([f.parts[i] for i in f.data]).tobytes() if f.data else b""
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]])
    return f.parts[f.data[0]].tobytes()


def main():
    art, out, order = sys.argv[1], sys.argv[2], sys.argv[3]
    base = sys.argv[4] if len(sys.argv) > 4 else None
    tensors, meta = read_artifact(art)
    L, D = int(meta["oscar.num_layers"]), int(meta["oscar.head_dim"])
    r = gguf.GGUFReader(out)
    byname = {t.name: t for t in r.tensors}
    pi = np.array([2 * i for i in range(D // 2)] + [2 * i + 1 for i in range(D // 2)])
    rng = np.random.default_rng(0)
    worst = 0.0
    for i in range(L):
        for which in ("k", "v"):
            name = f"blk.{i}.attn_{which}_rot.weight"
            if name not in byname:
                fail(f"{out}: no {name}")
            t = byname[name]
            if t.tensor_type != gguf.GGMLQuantizationType.F32 or list(t.shape) != [D, D]:
                fail(f"{out}: {name} type {t.tensor_type} ne {list(t.shape)}")
            R = tensors[f"layers.{i}.{which}_rotation"]
            M = R
            if which == "k" and order == "ggml":
                M = np.empty_like(R)
                M[pi, :] = R  # R_HF[i,:] = R_ggml[pi(i),:]
            stored = np.asarray(t.data).reshape(D, D)
            if stored.tobytes() != np.ascontiguousarray(M.T).tobytes():
                fail(f"{out}: {name} is not M^T")
            if which == "k":
                k_hf = rng.standard_normal(D)
                k_g = np.empty(D)
                k_g[pi if order == "ggml" else np.arange(D)] = k_hf
                got = stored.astype(np.float64) @ k_g  # ggml_mul_mat(rot, k): row j of rot · k
                ref = k_hf @ R.astype(np.float64)
                worst = max(worst, float(np.abs(got - ref).max()))
    # both sides use the same fp32 entries in fp64 arithmetic: only summation order differs
    # (D terms of |k|·|R| <= ~4), so 1e-12 is far above rounding and far below any index error
    if worst > 1e-12:
        fail(f"{out}: ggml_mul_mat(rot, k_ggml) != k_hf·R_K (max err {worst})")
    f = r.fields
    want = {"oscar.qk_order": order.encode(), "oscar.k_objective": meta["oscar.k_objective"].encode(),
            "oscar.v_objective": meta["oscar.v_objective"].encode()}
    for k, v in want.items():
        if k not in f or field_value(f[k]) != v:
            fail(f"{out}: {k} = {field_value(f[k]) if k in f else None}, want {v}")
    if f["oscar.num_layers"].types[0] != gguf.GGUFValueType.UINT32 or int(f["oscar.num_layers"].parts[-1][0]) != L:
        fail(f"{out}: oscar.num_layers")
    kc = float(f["oscar.k_clip_ratio"].parts[-1][0])
    if f["oscar.k_clip_ratio"].types[0] != gguf.GGUFValueType.FLOAT32 or abs(kc - float(meta["oscar.k_clip_ratio"])) > 1e-6:
        fail(f"{out}: oscar.k_clip_ratio {kc}")
    clip = np.frombuffer(field_value(f["oscar.k_clip"]), dtype="<f4")
    ref_clip = np.concatenate([tensors[f"layers.{i}.k_clip"].reshape(-1) for i in range(L)])
    if clip.tobytes() != ref_clip.tobytes():
        fail(f"{out}: oscar.k_clip array")
    print(f"ok {out}: {2 * L} rotation tensors ne=[{D},{D}] = M^T ({order} order), metadata, mul_mat err {worst:.2e}")
    if not base:
        return
    b = gguf.GGUFReader(base)
    for k, bf in b.fields.items():
        if k.startswith("GGUF."):
            continue
        if k not in f or f[k].types != bf.types or field_value(f[k]) != field_value(bf):
            fail(f"{out}: base key {k} not copied unchanged")
    extra = [k for k in f if k not in b.fields and not k.startswith("oscar.")]
    if extra:
        fail(f"{out}: unexpected keys {extra}")
    n = 0
    for bt in b.tensors:
        t = byname.get(bt.name)
        if t is None or t.tensor_type != bt.tensor_type or list(t.shape) != list(bt.shape):
            fail(f"{out}: base tensor {bt.name} missing or changed type/shape")
        if np.asarray(t.data).tobytes() != np.asarray(bt.data).tobytes():
            fail(f"{out}: base tensor {bt.name} bytes differ")
        n += 1
    if len(r.tensors) != n + 2 * L:
        fail(f"{out}: {len(r.tensors)} tensors, want {n} + {2 * L}")
    print(f"ok {out}: {n} base tensors byte-identical, {len(b.fields)} base fields unchanged")


if __name__ == "__main__":
    main()
