#!/usr/bin/env python3
"""torch_pt_oracle.py - an independent writer of torch.save files, without torch.

Usage:
  torch_pt_oracle.py write VARIANT DIR   writes DIR/k_rotation*.pt, DIR/v_rotation*.pt (+ k_mean) and
                                         DIR/expected.npz (what an importer must find)
  torch_pt_oracle.py check DIR ARTIFACT  compares ARTIFACT/oscar.safetensors with DIR/expected.npz, bitwise
  torch_pt_oracle.py hostile FILE MARK   writes a .pt whose pickle calls os.system('touch MARK') when
                                         unpickled by pickle.load (torch.load(weights_only=False))

torch.save(obj, f) runs Python's own pickle.Pickler (protocol 2) with a persistent_id that
turns every storage into ('storage', torch.<Dtype>Storage, key, location, numel), tensors
reduce to torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
OrderedDict()), and the result goes into a ZIP as <stem>/data.pkl next to <stem>/data/<key>,
<stem>/byteorder and <stem>/version. This script does the same with stand-in modules named
torch and torch._utils (so the pickler emits the same GLOBALs), the stdlib pickler and
zipfile: the opcode stream is Python's, not oscar's (formats/pt-writer.c), and the ZIP is
zipfile's (no 64-byte alignment, optionally deflated).

Variants (the layouts of compute_kv_rotation.py, OptR's calibrate_optr.py and compute_k_mean.py):
  zoo       format 1, per layer, int layer keys, 40 layers (LONG_BINPUT memo slots), eigenvalues
            stored as a strided view into a larger storage
  hadamard  one tensor object shared by every layer (memo BINGET of the tensor), str layer keys
  deflate   zoo, with deflated ZIP records
  optr      format 2, per KV head [Hkv,D,D], OptR's extra keys (floats, lists, None eigenvalues),
            plus k_mean_decode.pt {layers: {i: {mu: [Hkv,D]}}}
  gap       zoo with layer 3 missing (an importer must refuse it)
  small     zoo with 2 layers of head_dim 4, deflated (fuzz seeds)
"""
import collections
import io
import json
import os
import pickle
import struct
import sys
import types
import zipfile

import numpy as np

# ---- stand-ins for the names torch.save pickles -------------------------------------------
torch_mod = types.ModuleType("torch")
utils_mod = types.ModuleType("torch._utils")


class FloatStorage:  # the class object only appears inside persistent ids
    pass


FloatStorage.__module__ = "torch"
torch_mod.FloatStorage = FloatStorage


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks):
    raise RuntimeError("never called: this script only writes")


_rebuild_tensor_v2.__module__ = "torch._utils"
utils_mod._rebuild_tensor_v2 = _rebuild_tensor_v2
torch_mod._utils = utils_mod
sys.modules.setdefault("torch", torch_mod)
sys.modules.setdefault("torch._utils", utils_mod)


class Storage:
    def __init__(self, array):
        self.array = np.ascontiguousarray(array, dtype="<f4").ravel()


class Tensor:
    """A view (offset, size, stride in elements) of a Storage, reduced as torch reduces tensors."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, tuple(size), tuple(stride)

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor_v2,
                (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()))

    def values(self):
        return np.lib.stride_tricks.as_strided(self.storage.array[self.offset:], shape=self.size,
                                               strides=[4 * s for s in self.stride]).copy()


def contiguous(array):
    a = np.asarray(array, dtype="<f4")
    st, acc = [], 1
    for n in reversed(a.shape):
        st.insert(0, acc)
        acc *= n
    return Tensor(Storage(a), 0, a.shape, st)


class TorchLikePickler(pickle.Pickler):
    def __init__(self, f):
        super().__init__(f, protocol=2)
        self.keys = {}

    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            key = self.keys.setdefault(id(obj), (str(len(self.keys)), obj))[0]
            return ("storage", FloatStorage, key, "cpu", obj.array.size)
        return None


def save(obj, path, deflate=False):
    buf = io.BytesIO()
    p = TorchLikePickler(buf)
    p.dump(obj)
    stem = os.path.basename(path).rsplit(".", 1)[0]
    comp = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=comp) as zf:
        zf.writestr(f"{stem}/data.pkl", buf.getvalue())
        zf.writestr(f"{stem}/byteorder", "little")
        for key, storage in sorted(p.keys.values(), key=lambda kv: int(kv[0])):
            zf.writestr(f"{stem}/data/{key}", storage.array.tobytes())
        zf.writestr(f"{stem}/version", "3\n")


# ---- the reference layouts -----------------------------------------------------------------
rng = np.random.default_rng(19)


def orthogonal(d, lead=()):
    q, _ = np.linalg.qr(rng.standard_normal(lead + (d, d)))
    return q.astype("<f4")


def per_layer_file(objective, L, D, key=int):
    """compute_kv_rotation.py's dict; eigenvalues as views (offset 1, stride 2) of a larger storage."""
    rot = orthogonal(D, (L,))
    eig = np.sort(rng.standard_normal((L, D)), axis=1).astype("<f4")
    layers = {}
    for i in range(L):
        big = np.zeros(2 * D + 1, dtype="<f4")
        big[1::2] = eig[i]
        layers[key(i)] = {"layer_id": i, "rotation": contiguous(rot[i]),
                          "eigenvalues": Tensor(Storage(big), 1, (D,), (2,))}
    obj = {"format_version": 1, "objective": objective, "source_grouping": "layer", "layers": layers}
    return obj, rot, eig


def write_zoo(d, deflate=False, drop=None, L=40, D=16):
    k, rk, ek = per_layer_file("qqt_r_h_pbr", L, D)
    v, rv, ev = per_layer_file("sst_r_h_pbr", L, D)
    if drop is not None:
        del k["layers"][drop]
        del v["layers"][drop]
    save(k, f"{d}/k_rotation_qqt_r_h_pbr.pt", deflate)
    save(v, f"{d}/v_rotation_sst_r_h_pbr.pt", deflate)
    np.savez(f"{d}/expected.npz", k_rotation=rk, v_rotation=rv, k_eigenvalues=ek, v_eigenvalues=ev,
             meta=json.dumps({"per_head": False, "eigenvalues": "imported"}))


def write_hadamard(d):
    L, D = 5, 8
    h = np.array([[1.0]])
    while h.shape[0] < D:
        h = np.block([[h, h], [h, -h]]) / np.sqrt(2)
    t, ones = contiguous(h.astype("<f4")), contiguous(np.ones(D, dtype="<f4"))
    for kv in "kv":
        obj = {"format_version": 1, "objective": "hadamard", "source_grouping": "layer",
               "layers": {str(i): {"layer_id": i, "rotation": t, "eigenvalues": ones} for i in range(L)}}
        save(obj, f"{d}/{kv}_rotation_hadamard.pt")
    rot = np.stack([h.astype("<f4")] * L)
    np.savez(f"{d}/expected.npz", k_rotation=rot, v_rotation=rot, k_eigenvalues=np.ones((L, D), "<f4"),
             v_eigenvalues=np.ones((L, D), "<f4"), meta=json.dumps({"per_head": False, "eigenvalues": "imported"}))


def write_optr(d):
    L, H, D = 3, 2, 8
    out = {}
    for kv in "kv":
        rot = orthogonal(D, (L, H))
        obj = {"format_version": 2, "objective": f"optr_output_aware_{kv}", "source_grouping": "kv_head",
               "layers": {}, "variant": "sequential", "loss_objective": "hybrid", "lam": 1.0, "steps": 80,
               "lr": 0.02, "margin_k": 0.0, "margin_v": 0.0, "calib_chunks": "3,4", "held_chunks": "10,12"}
        for i in range(L):
            obj["layers"][i] = {"layer_id": i, "rotation": contiguous(rot[i]),
                                "eigenvalues": None if kv == "v" else contiguous(np.arange(D, dtype="<f4")),
                                "kept_heads": [0] if i % 2 else [], "base_held": contiguous(rng.random(H)),
                                "best_held": contiguous(rng.random(H)), "ortho_err": 1.5e-7}
        save(obj, f"{d}/{kv}_rotation.pt")
        out[kv] = rot
    mu = rng.standard_normal((L, H, D)).astype("<f4")
    save({"format_version": 1, "note": "decode-calibrated per-(layer,kvhead) post-RoPE key channel mean",
          "layers": {i: {"layer_id": i, "mu": contiguous(mu[i])} for i in range(L)}}, f"{d}/k_mean_decode.pt")
    zeros = np.zeros((L, H, D), "<f4")
    np.savez(f"{d}/expected.npz", k_rotation=out["k"], v_rotation=out["v"], k_eigenvalues=zeros,
             v_eigenvalues=zeros, k_mean=mu, meta=json.dumps({"per_head": True, "eigenvalues": "unknown"}))


# ---- checking an imported artifact ---------------------------------------------------------
def read_artifact(path):
    raw = open(os.path.join(path, "oscar.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    t = {}
    for name, info in hdr.items():
        a, b = info["data_offsets"]
        t[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"])
    return t, meta


def check(d, art):
    exp = np.load(f"{d}/expected.npz")
    info = json.loads(str(exp["meta"]))
    t, meta = read_artifact(art)
    L = exp["k_rotation"].shape[0]
    if int(meta["oscar.num_layers"]) != L:
        sys.exit(f"FAIL: {meta['oscar.num_layers']} layers, want {L}")
    if (meta["oscar.source_grouping"] == "kv_head") != info["per_head"]:
        sys.exit(f"FAIL: grouping {meta['oscar.source_grouping']}")
    if not meta["oscar.eigenvalues"].startswith(info["eigenvalues"]) and info["eigenvalues"] != "unknown":
        sys.exit(f"FAIL: oscar.eigenvalues {meta['oscar.eigenvalues']}")
    names = ["k_rotation", "v_rotation", "k_eigenvalues", "v_eigenvalues"] + (["k_mean"] if "k_mean" in exp else [])
    for i in range(L):
        for name in names:
            got, want = t[f"layers.{i}.{name}"], exp[name][i]
            if got.shape != want.shape or got.tobytes() != want.tobytes():
                sys.exit(f"FAIL: layers.{i}.{name} differs (shape {got.shape} vs {want.shape})")
    print(f"ok: {L} layers, {len(names)} tensors each, bit-identical to the oracle's")


def hostile(path, mark):
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {mark}",))

    buf = pickle.dumps({"layers": {0: {"rotation": Evil()}}}, protocol=2)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("k_rotation_evil/data.pkl", buf)
        zf.writestr("k_rotation_evil/version", "3\n")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        variant, d = sys.argv[2], sys.argv[3]
        os.makedirs(d, exist_ok=True)
        {"zoo": write_zoo, "hadamard": write_hadamard, "optr": write_optr,
         "deflate": lambda x: write_zoo(x, deflate=True), "gap": lambda x: write_zoo(x, drop=3),
         "small": lambda x: write_zoo(x, deflate=True, L=2, D=4)}[variant](d)
    elif cmd == "check":
        check(sys.argv[2], sys.argv[3])
    elif cmd == "hostile":
        hostile(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
