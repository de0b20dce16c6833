#!/usr/bin/env python3
"""check_pt_export.py - checks an `oscar-zoo export --format pt` pair (+ key mean) against its artifact.

Usage: check_pt_export.py ARTIFACT_DIR PT_DIR

File names (formats/README.md): per layer k_rotation_<k_objective>.pt / v_rotation_<v_objective>.pt,
per KV head k_rotation_perhead.pt / v_rotation_perhead.pt; k_mean_decode.pt exactly when the
artifact has layers.{i}.k_mean. Besides the schema checks below, each file is read the way its
consumer does (the OptR SGLang engine, daniel-eai/Output-Aware-INT2-KV-Cache-Quantization @ cc0f61af:
mem_cache/memory_pool.py load_oscar_rotations, mem_cache/unified_kv_pool.py _load_oscar_k_means):
every layer in [0, L) under an int or str key, "rotation" (D, D) or (num_kv_heads, D, D),
"mu" 2-D with shape[1] == D (and num_kv_heads rows: TP 1), then compared bit for bit.

1. Always (CI venv: numpy + safetensors only): opens each .pt with zipfile and a
   restricted pickle.Unpickler whose find_class allows only
   torch._utils._rebuild_tensor_v2, torch.FloatStorage and collections.OrderedDict
   (stubbed) and whose persistent_load reads <stem>/data/<key>; checks the zip
   layout (stored records, one top-level folder = file stem, 64-byte aligned
   storages, byteorder/.format_version/version records) and the reference schema,
   and that every tensor equals the artifact's bit-exactly.
2. When torch is importable (here: /opt/oracle/bin/python, never in CI):
   torch.load(path, weights_only=True) and the same bit-exact comparison.
Prints one line per check; exits 1 on the first failure.
"""
import collections
import io
import json
import pickle
import struct
import sys
import zipfile

import numpy as np


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def read_artifact(path):
    """Reads oscar.safetensors without the safetensors package (header + raw F32)."""
    raw = open(path + "/oscar.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    out = {}
    for name, t in hdr.items():
        assert t["dtype"] == "F32", name
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(t["shape"])
    return out, meta


class Storage:
    def __init__(self, data):
        self.data = data


def rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks):
    assert isinstance(storage, Storage)
    assert requires_grad is False and isinstance(hooks, collections.OrderedDict) and len(hooks) == 0
    n = int(np.prod(size)) if size else 1
    arr = storage.data[offset:offset + n]
    exp = []
    acc = 1
    for s in reversed(size):
        exp.insert(0, acc)
        acc *= s
    assert list(stride) == exp, ("not contiguous", stride, size)
    return arr.reshape(size)


class FloatStorageStub:
    pass


class RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, f, zf, stem):
        super().__init__(f)
        self.zf, self.stem = zf, stem

    def find_class(self, module, name):
        allowed = {("torch._utils", "_rebuild_tensor_v2"): rebuild_tensor_v2,
                   ("torch", "FloatStorage"): FloatStorageStub,
                   ("collections", "OrderedDict"): collections.OrderedDict}
        if (module, name) not in allowed:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return allowed[(module, name)]

    def persistent_load(self, pid):
        tag, cls, key, loc, numel = pid
        assert tag == "storage" and cls is FloatStorageStub and loc == "cpu", pid
        data = np.frombuffer(self.zf.read(f"{self.stem}/data/{key}"), dtype="<f4")
        assert data.size == numel, (key, data.size, numel)
        return Storage(data)


def load_restricted(path):
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    with zipfile.ZipFile(path) as zf:
        if zf.testzip() is not None:
            fail(f"{path}: CRC mismatch")
        infos = zf.infolist()
        names = [i.filename for i in infos]
        for i in infos:
            if i.compress_type != zipfile.ZIP_STORED:
                fail(f"{path}: {i.filename} is compressed")
            if not i.filename.startswith(stem + "/"):
                fail(f"{path}: {i.filename} not under {stem}/")
        for rec, want in ((".format_version", b"1"), ("byteorder", b"little"), (".storage_alignment", b"64"),
                          ("version", b"3\n")):
            if zf.read(f"{stem}/{rec}") != want:
                fail(f"{path}: {rec} != {want!r}")
        if f"{stem}/.data/serialization_id" not in names:
            fail(f"{path}: no .data/serialization_id")
        raw = open(path, "rb").read()
        for i in infos:
            if "/data/" in i.filename:
                nl, xl = struct.unpack("<HH", raw[i.header_offset + 26:i.header_offset + 30])
                off = i.header_offset + 30 + nl + xl
                if off % 64:
                    fail(f"{path}: {i.filename} data at {off}, not 64-byte aligned")
        obj = RestrictedUnpickler(io.BytesIO(zf.read(f"{stem}/data.pkl")), zf, stem).load()
    return obj


def check_obj(obj, tensors, meta, which, path, as_np):
    per_head = meta["oscar.source_grouping"] == "kv_head"
    L, D = int(meta["oscar.num_layers"]), int(meta["oscar.head_dim"])
    want_keys = {"format_version", "objective", "source_grouping", "layers"}
    if set(obj) != want_keys:
        fail(f"{path}: keys {sorted(obj)}")
    if obj["format_version"] != (2 if per_head else 1):
        fail(f"{path}: format_version {obj['format_version']}")
    if obj["objective"] != meta[f"oscar.{which}_objective"]:
        fail(f"{path}: objective {obj['objective']}")
    if obj["source_grouping"] != ("kv_head" if per_head else "layer"):
        fail(f"{path}: source_grouping {obj['source_grouping']}")
    if sorted(obj["layers"]) != list(range(L)) or not all(type(k) is int for k in obj["layers"]):
        fail(f"{path}: layer keys {list(obj['layers'])[:5]}")
    for i in range(L):
        ent = obj["layers"][i]
        if set(ent) != {"layer_id", "rotation", "eigenvalues"} or ent["layer_id"] != i:
            fail(f"{path}: layer {i} entry {sorted(ent)}")
        for key, name in (("rotation", f"layers.{i}.{which}_rotation"), ("eigenvalues", f"layers.{i}.{which}_eigenvalues")):
            got = as_np(ent[key])
            ref = tensors[name]
            if got.dtype != np.float32 or got.shape != ref.shape:
                fail(f"{path}: layer {i} {key} {got.dtype} {got.shape} vs {ref.shape}")
            if got.tobytes() != ref.tobytes():
                fail(f"{path}: layer {i} {key} differs from {name}")
        exp_shape = (int(meta["oscar.num_kv_heads"]), D, D) if per_head else (D, D)
        if as_np(ent["rotation"]).shape != exp_shape:
            fail(f"{path}: layer {i} rotation shape")


def consumer_layer(state, path, lid):
    """The engine loaders' lookup: a 'layers' dict, the layer under an int or a str key."""
    if "layers" not in state:
        fail(f"{path}: no 'layers' key (the loader raises ValueError)")
    ent = state["layers"].get(lid, state["layers"].get(str(lid)))
    if ent is None:
        fail(f"{path}: missing layer {lid} (the loader raises ValueError)")
    return ent


def consumer_rotations(state, path, L, D, hkv, as_np):
    """As load_oscar_rotations(path, layer_num=L, start_layer=0, head_dim=D, num_heads=hkv)."""
    out, headwise = [], None
    for lid in range(L):
        r = as_np(consumer_layer(state, path, lid)["rotation"])
        this = r.ndim == 3
        if r.shape[-2:] != (D, D) or r.ndim not in (2, 3) or (this and r.shape[0] != hkv):
            fail(f"{path}: layer {lid} rotation {r.shape} is neither ({D},{D}) nor ({hkv},{D},{D})")
        if headwise is not None and headwise != this:
            fail(f"{path}: mixes layerwise and headwise layers")
        headwise = this
        out.append(r)
    return np.stack(out), headwise


def consumer_k_means(state, path, L, D, hkv, as_np):
    """As _load_oscar_k_means(path, layer_num=L, start_layer=0, head_dim=D, num_heads=hkv)."""
    out = []
    for lid in range(L):
        mu = as_np(consumer_layer(state, path, lid)["mu"])
        if mu.ndim != 2 or mu.shape[1] != D or mu.shape[0] != hkv:
            fail(f"{path}: layer {lid} mu {mu.shape}, the loader wants [{hkv}, {D}]")
        out.append(mu)
    return np.stack(out)


def check_k_mean(obj, tensors, meta, path, as_np):
    L, D, hkv = int(meta["oscar.num_layers"]), int(meta["oscar.head_dim"]), int(meta["oscar.num_kv_heads"])
    if set(obj) != {"format_version", "note", "layers"} or obj["format_version"] != 1 or not isinstance(obj["note"], str):
        fail(f"{path}: top level {sorted(obj)} (want compute_k_mean.py's format_version/note/layers)")
    if sorted(obj["layers"]) != list(range(L)) or not all(type(k) is int for k in obj["layers"]):
        fail(f"{path}: layer keys {list(obj['layers'])[:5]}")
    for i in range(L):
        ent = obj["layers"][i]
        if set(ent) != {"layer_id", "mu"} or ent["layer_id"] != i:
            fail(f"{path}: layer {i} entry {sorted(ent)}")
    mu = consumer_k_means(obj, path, L, D, hkv, as_np)
    for i in range(L):
        ref = tensors[f"layers.{i}.k_mean"]
        if mu[i].dtype != np.float32 or mu[i].tobytes() != ref.tobytes():
            fail(f"{path}: layer {i} mu differs from layers.{i}.k_mean")


def check_consumer(obj, tensors, meta, which, path, as_np):
    L, D, hkv = int(meta["oscar.num_layers"]), int(meta["oscar.head_dim"]), int(meta["oscar.num_kv_heads"])
    rot, headwise = consumer_rotations(obj, path, L, D, hkv, as_np)
    if headwise != (meta["oscar.source_grouping"] == "kv_head"):
        fail(f"{path}: the loader sees headwise={headwise}")
    ref = np.stack([tensors[f"layers.{i}.{which}_rotation"] for i in range(L)])
    if rot.tobytes() != ref.tobytes():
        fail(f"{path}: the loader's stacked rotations differ from the artifact's")


def export_files(pt_dir, meta):
    import os
    per_head = meta["oscar.source_grouping"] == "kv_head"
    files = {"k": f"{pt_dir}/k_rotation_{'perhead' if per_head else meta['oscar.k_objective']}.pt",
             "v": f"{pt_dir}/v_rotation_{'perhead' if per_head else meta['oscar.v_objective']}.pt"}
    pts = sorted(f for f in os.listdir(pt_dir) if f.endswith(".pt"))
    return files, pts


def main():
    art, pt_dir = sys.argv[1], sys.argv[2]
    tensors, meta = read_artifact(art)
    files, pts = export_files(pt_dir, meta)
    has_mean = "layers.0.k_mean" in tensors
    mean_path = f"{pt_dir}/k_mean_decode.pt"
    want = sorted([p.rsplit("/", 1)[-1] for p in files.values()] + (["k_mean_decode.pt"] if has_mean else []))
    if pts != want:
        fail(f"{pt_dir}: .pt files {pts}, want {want}")
    for which, path in files.items():
        obj = load_restricted(path)
        check_obj(obj, tensors, meta, which, path, lambda x: x)
        check_consumer(obj, tensors, meta, which, path, lambda x: x)
        print(f"ok restricted-unpickler {path}: {len(obj['layers'])} layers, format_version {obj['format_version']}, "
              "as load_oscar_rotations reads it")
    if has_mean:
        check_k_mean(load_restricted(mean_path), tensors, meta, mean_path, lambda x: x)
        print(f"ok restricted-unpickler {mean_path}: mu [Hkv, D] per layer, as _load_oscar_k_means reads it")
    try:
        import torch
    except ImportError:
        print("torch not importable: torch.load check skipped")
        return
    for which, path in files.items():
        obj = torch.load(path, weights_only=True)
        check_obj(obj, tensors, meta, which, path, lambda x: x.numpy())
        check_consumer(obj, tensors, meta, which, path, lambda x: x.numpy())
        print(f"ok torch {torch.__version__} torch.load(weights_only=True) {path}")
    if has_mean:
        check_k_mean(torch.load(mean_path, weights_only=True), tensors, meta, mean_path, lambda x: x.numpy())
        print(f"ok torch {torch.__version__} torch.load(weights_only=True) {mean_path}")


if __name__ == "__main__":
    main()
