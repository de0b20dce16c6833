#!/usr/bin/env python3
# gguf_oracle.py - builds small GGUF files with the reference `gguf` Python
# package (gguf.GGUFWriter, gguf.quants) and the values oscar must read back.
#
# Committed fixtures in tests/fixtures/gguf/ were made with:
#   ~/.cache/oscar/venv/bin/python tests/oracle/gguf_oracle.py tests/fixtures/gguf 1234
# (gguf==0.19.0, numpy from the oscar venv). The integration test
# tests/integration/test-gguf-oracle.sh runs it again live with a random seed.
#
# Output files in OUTDIR:
#   types.gguf        v3, alignment 32: every supported ggml type + every metadata type
#   types-v2.gguf     the same bytes with the version field set to 2 (v2 and v3 share the LE layout)
#   align64.gguf      general.alignment = 64, a few tensors, nested arrays
#   expect.gguf       F32 tensors "<name>" holding gguf.quants.dequantize() of each tensor
#                     of types.gguf / align64.gguf (same names, prefixed "types/" or "align64/")
#   meta.json         {file: {key: {"type": gguf type id, "value": ..., "elem_type": ...}}}
#
# Quantized types: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 F16 BF16 are produced with
# gguf.quants.quantize from random normal data; the k-quants (Q2_K..Q6_K),
# which the package can only dequantize, get random block bytes whose f16
# scale fields are finite random halves (so that no NaN/Inf hides a bug).
import json
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

QUANTIZABLE = [Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]
KQUANTS = {  # type: (block bytes, offsets of f16 fields in the block)
    Q.Q2_K: (84, [80, 82]),
    Q.Q3_K: (110, [108]),
    Q.Q4_K: (144, [0, 2]),
    Q.Q5_K: (176, [0, 2]),
    Q.Q6_K: (210, [208]),
}


def random_kquant_blocks(rng, qtype, n_blocks):
    size, f16_offs = KQUANTS[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in f16_offs:
        h = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        blocks[:, off:off + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def add_tensors(w, rng, prefix, expect, types, shapes):
    """Adds one tensor per type; records the reference dequantization."""
    for qtype in types:
        shape = shapes.get(qtype, (3, 256))  # numpy order: (rows, row length)
        name = f"{qtype.name.lower()}.weight"
        if qtype in KQUANTS:
            n_blocks = int(np.prod(shape)) // 256
            raw = random_kquant_blocks(rng, qtype, n_blocks).reshape(shape[:-1] + (-1,))
        else:
            data = rng.standard_normal(size=shape).astype(np.float32)
            raw = data if qtype == Q.F32 else gguf.quants.quantize(data, qtype)
        if qtype == Q.F32:
            w.add_tensor(name, raw)
        else:
            w.add_tensor(name, raw, raw_dtype=qtype)
        deq = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(shape)
        expect.append((f"{prefix}/{name}", deq))


def add_metadata(w, rng, meta):
    def kv(key, val, vtype, sub=None, record=None):
        w.add_key_value(key, val, vtype, sub_type=sub)
        e = {"type": int(vtype), "value": record if record is not None else val}
        if sub is not None:
            e["elem_type"] = int(sub)
        meta[key] = e

    i = int(rng.integers(1, 100))
    kv("test.u8", 200 + i % 50, V.UINT8)
    kv("test.i8", -100 - i % 20, V.INT8)
    kv("test.u16", 60000 + i, V.UINT16)
    kv("test.i16", -30000 - i, V.INT16)
    kv("test.u32", 4000000000 + i, V.UINT32)
    kv("test.i32", -2000000000 - i, V.INT32)
    f32 = float(np.float32(rng.standard_normal()))
    kv("test.f32", f32, V.FLOAT32)
    kv("test.bool_t", True, V.BOOL)
    kv("test.bool_f", False, V.BOOL)
    kv("test.str", "h\u00e9llo w\u00f6rld " + str(i), V.STRING)
    kv("test.empty_str", "", V.STRING)
    # JSON readers keep integers in int64: the u64 value is recorded as a decimal string
    kv("test.u64", 2**63 + i, V.UINT64, record=str(2**63 + i))
    kv("test.i64", -(2**62) - i, V.INT64)
    kv("test.f64", float(rng.standard_normal()), V.FLOAT64)
    kv("test.arr_i32", [int(x) for x in rng.integers(-1000, 1000, 7)], V.ARRAY, V.INT32)
    kv("test.arr_u8", [int(x) for x in rng.integers(0, 256, 5)], V.ARRAY, V.UINT8)
    kv("test.arr_f32", [float(np.float32(x)) for x in rng.standard_normal(4)], V.ARRAY, V.FLOAT32)
    kv("test.arr_f64", [float(x) for x in rng.standard_normal(3)], V.ARRAY, V.FLOAT64)
    kv("test.arr_bool", [True, False, True], V.ARRAY, V.BOOL)
    kv("test.arr_str", ["a", "", "tok\u00e9n", "x" * (10 + i)], V.ARRAY, V.STRING)
    kv("test.arr_nested", [[1, 2, 3], [4], [5, 6]], V.ARRAY, V.ARRAY)


def write_gguf(path, rng, meta_all, fname, expect, types, shapes, alignment=None):
    w = gguf.GGUFWriter(path, "testarch")
    meta = {"general.architecture": {"type": int(V.STRING), "value": "testarch"}}
    if alignment is not None:
        w.add_custom_alignment(alignment)
        meta["general.alignment"] = {"type": int(V.UINT32), "value": alignment}
    add_metadata(w, rng, meta)
    add_tensors(w, rng, fname, expect, types, shapes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta_all[fname] = meta


def main():
    out = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1234
    print(f"gguf_oracle: seed {seed}, gguf {getattr(gguf, '__version__', '?')}")
    rng = np.random.default_rng(seed)
    meta_all, expect = {}, []
    all_types = QUANTIZABLE + list(KQUANTS)
    shapes = {Q.F32: (2, 3, 5), Q.F16: (4, 7), Q.BF16: (9,)}
    write_gguf(f"{out}/types.gguf", rng, meta_all, "types", expect, all_types, shapes)
    raw = bytearray(open(f"{out}/types.gguf", "rb").read())
    raw[4:8] = (2).to_bytes(4, "little")
    open(f"{out}/types-v2.gguf", "wb").write(bytes(raw))
    write_gguf(f"{out}/align64.gguf", rng, meta_all, "align64", expect, [Q.F32, Q.Q8_0, Q.Q6_K],
               {Q.F32: (3, 1)}, alignment=64)
    w = gguf.GGUFWriter(f"{out}/expect.gguf", "expect")
    for name, deq in expect:
        w.add_tensor(name, np.ascontiguousarray(deq))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(f"{out}/meta.json", "w") as f:
        json.dump(meta_all, f, indent=1, sort_keys=True)
    print(f"gguf_oracle: wrote {len(expect)} tensors to {out}")


if __name__ == "__main__":
    main()
