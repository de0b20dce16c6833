#!/usr/bin/env python3
"""oscar_omni_oracle.py - an independent numpy model of OScaR's KV quantizer
(arXiv 2605.19660; code ZunhaiSu/OScaR-KV-Quant @ d2109f5), used to check
lib/quant/oscar-omni.c bit for bit through tests/tools/oscar-omni-tool.c.

What it follows in that commit (docs/method.md §18.2):
  csrc/oscar/src/k_preprocess.cu   K: per-head normalized Hadamard (natural order), bf16 store,
                                   n = sqrt(sum of squares over all KV heads and head_dim of the
                                   fp32 rotated values), 1 if not > 0; y = bf16(bf16(H k) / n)
  csrc/oscar/src/include/qpack.h   compute_affine_asym_params: scale = (max - min)/3,
                                   zero_q = rint(-min/scale), q = clamp(rint(x/scale + zero_q), 0, 3),
                                   x^ = q*scale + zero_dequant, zero_dequant = -zero_q*scale;
                                   min = max = 0 -> [-1, 1]; zero range -> q = 0, x^ = min
  evaluation/qwen3.py,             quant_mode "k-channel": K per channel over 32-token blocks,
  eval_longbench.py                V per token over 32-channel groups; params half2/bfloat162
                                   of the model dtype, dequantized by hfma2 in that dtype
  evaluation/example.py            --offline_v_hadamard: the cache holds bf16(H v)
CPU choices shared with the C code (the GPU order is not reproducible): the FWHT butterfly
in fp32 (stages 1, 2, 4, ... then one 1/sqrt(D) factor), the norm's sum of squares in fp64
in (head, channel) order, the dequantized x^ = fp32(q*scale) + zero then rounded to META.

Writes DIR/cases.txt ("N HKV D META T" per line), DIR/caseN.k.in / .v.in (float32 [T, HKV, D])
and the expected outputs caseN.{k.norm, k.scaled, k.hp, k.codes, k.meta, k.deq, k.rest,
v.codes, v.meta, v.deq, v.rest} (layouts in tests/tools/oscar-omni-tool.c).
"""
import argparse
import os

import numpy as np

F32, F64 = np.float32, np.float64
BLOCK, VGROUP = 32, 32


# ---- number formats ------------------------------------------------------------------------
def to_bf16_bits(x):
    """Round-to-nearest-even float32 -> bfloat16 bits (inputs here are finite)."""
    b = np.ascontiguousarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    lsb = (b >> np.uint64(16)) & np.uint64(1)
    return (((b + np.uint64(0x7FFF) + lsb) >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.uint16)


def bf16(x):
    return (to_bf16_bits(x).astype(np.uint32) << np.uint32(16)).view(F32)


def f16(x):
    return np.asarray(x, dtype=F32).astype(np.float16).astype(F32)


def round_to(meta, x):
    return bf16(x) if meta == "bf16" else f16(x) if meta == "f16" else np.asarray(x, dtype=F32)


def meta_bytes(meta, x):
    x = np.ascontiguousarray(x, dtype=F32)
    if meta == "f32":
        return x.tobytes()
    if meta == "f16":
        return x.astype(np.float16).tobytes()
    return to_bf16_bits(x).tobytes()


# ---- Hadamard ------------------------------------------------------------------------------
def sylvester(n):
    i = np.arange(n)
    par = np.vectorize(lambda v: bin(v).count("1") & 1)(i[:, None] & i[None, :])
    return np.where(par == 1, -1.0, 1.0) / np.sqrt(n)


def fwht(x):
    """Normalized FWHT along the last axis, fp32: butterflies at strides 1, 2, 4, ..."""
    y = np.array(x, dtype=F32, copy=True)
    n = y.shape[-1]
    h = 1
    while h < n:
        v = y.reshape(y.shape[:-1] + (n // (2 * h), 2, h))
        lo, up = v[..., 0, :].copy(), v[..., 1, :].copy()
        v[..., 0, :] = lo + up
        v[..., 1, :] = lo - up
        y = v.reshape(y.shape)
        h *= 2
    return (y * F32(1.0 / np.sqrt(n))).astype(F32)


def self_check():
    """The butterfly is the natural-order Sylvester matrix, and H_128 = H_16 (x) H_8 (the kernel's tiles)."""
    rng = np.random.default_rng(1)
    for n in (64, 128):
        x = rng.standard_normal(n)
        assert np.allclose(fwht(x.astype(F32)), sylvester(n) @ x.astype(F32), rtol=0, atol=1e-5)
    assert np.allclose(np.kron(sylvester(16), sylvester(8)), sylvester(128), atol=1e-15)


# ---- quantizer -----------------------------------------------------------------------------
def pack_quartered(c):
    q = c.shape[-1] // 4
    return (c[..., :q] | (c[..., q:2 * q] << 2) | (c[..., 2 * q:3 * q] << 4) | (c[..., 3 * q:] << 6)).astype(np.uint8)


def affine_group(xs):
    """KIVI/OScaR group: codes, scale, zero_dequant of float32 values xs."""
    lo, hi = F32(xs.min()) + F32(0), F32(xs.max()) + F32(0)
    if lo == 0 and hi == 0:
        lo, hi = F32(-1), F32(1)
    if lo == hi:
        return np.zeros(xs.shape, np.uint8), F32(0), lo
    scale = F32(F32(hi - lo) / F32(3))
    zq = F32(np.rint(F32(-lo) / scale))
    t = np.rint((xs / scale + zq).astype(F32))
    return np.clip(t, 0, 3).astype(np.uint8), scale, F32(-zq * scale)


def stored(meta, v):
    return round_to(meta, F32(v))


def k_scale(k):
    """k [T, H, D] -> y (scaled, rotated, bf16) and the per-token norms."""
    r = fwht(k)
    T = k.shape[0]
    ss = np.add.accumulate((r.astype(F64) ** 2).reshape(T, -1), axis=1)[:, -1]
    norm = np.sqrt(ss).astype(F32)
    norm = np.where(norm > 0, norm, F32(1)).astype(F32)
    y = bf16(bf16(r) / norm[:, None, None])
    return y, norm


def k_unscale(y, norm):
    return fwht((y * norm[:, None, None]).astype(F32))


def k_quant(y, meta):
    """y [T, H, D], T a multiple of BLOCK -> codes, meta bytes, dequantized y^ (per block [H, D, ...])."""
    T, H, D = y.shape
    codes, mb, deq = bytearray(), bytearray(), np.zeros_like(y)
    for b0 in range(0, T, BLOCK):
        blk_codes = np.zeros((H, D, BLOCK // 4), np.uint8)
        prm = np.zeros((H, D, 2), F32)
        for h in range(H):
            for d in range(D):
                c, s, z = affine_group(y[b0:b0 + BLOCK, h, d])
                blk_codes[h, d] = pack_quartered(c)
                prm[h, d] = (s, z)
                s2, z2 = stored(meta, s), stored(meta, z)
                deq[b0:b0 + BLOCK, h, d] = round_to(meta, (c.astype(F32) * s2).astype(F32) + z2)
        codes += blk_codes.tobytes()
        mb += meta_bytes(meta, prm)
    return bytes(codes), bytes(mb), deq


def v_quant(v, meta):
    """v [T, H, D] -> codes, meta bytes, dequantized bf16(H v)^ (not rotated back)."""
    T, H, D = v.shape
    r = bf16(fwht(v)).reshape(-1, D)
    codes = np.zeros((r.shape[0], D // 4), np.uint8)
    prm = np.zeros((r.shape[0], D // VGROUP, 2), F32)
    deq = np.zeros_like(r)
    for i in range(r.shape[0]):
        c = np.zeros(D, np.uint8)
        for g in range(D // VGROUP):
            sl = slice(g * VGROUP, (g + 1) * VGROUP)
            c[sl], s, z = affine_group(r[i, sl])
            prm[i, g] = (s, z)
            deq[i, sl] = round_to(meta, (c[sl].astype(F32) * stored(meta, s)).astype(F32) + stored(meta, z))
        codes[i] = pack_quartered(c)
    return codes.tobytes(), meta_bytes(meta, prm), deq.reshape(T, H, D)


# ---- inputs --------------------------------------------------------------------------------
def make_tokens(rng, T, H, D, kind):
    x = rng.standard_normal((T, H, D)).astype(F32)
    if kind == "outliers":      # a few huge channels (the reason for the rotation)
        x[:, :, rng.choice(D, 3, replace=False)] *= F32(60)
    elif kind == "tni":         # token norm imbalance: low-norm sinks and loud tokens in one block
        x *= np.exp(rng.uniform(-7, 7, T)).astype(F32)[:, None, None]
        x[0] *= F32(1e-3)
    elif kind == "zeros":       # zero tokens, a zero head all block long, one zero channel
        x[rng.choice(T, 3, replace=False)] = 0
        x[:, 0, :] = 0
        x[:, -1, 5] = 0
    elif kind == "repeat":      # identical tokens: constant channels (zero range) per block
        x[:] = x[:1]
        x[BLOCK // 2] *= F32(2)  # twice the norm, the same scaled row: every channel has zero range
    elif kind == "bf16":        # serving inputs are bf16
        x = bf16(x * F32(4))
    return x.astype(F32)


def write_case(d, n, H, D, meta, T, k, v):
    pre = os.path.join(d, "case%d." % n)
    y, norm = k_scale(k)
    kc, km, kd = k_quant(y, meta)
    vc, vm, vd = v_quant(v, meta)
    files = {"k.in": k, "v.in": v, "k.norm": norm, "k.scaled": y, "k.hp": k_unscale(y, norm),
             "k.codes": kc, "k.meta": km, "k.deq": kd, "k.rest": k_unscale(kd, norm),
             "v.codes": vc, "v.meta": vm, "v.deq": vd, "v.rest": fwht(vd)}
    for name, val in files.items():
        with open(pre + name, "wb") as f:
            f.write(val if isinstance(val, bytes) else np.ascontiguousarray(val, dtype=F32).tobytes())
    return "%d %d %d %s %d\n" % (n, H, D, meta, T)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    self_check()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    kinds = ["gauss", "outliers", "tni", "zeros", "repeat", "bf16"]
    shapes = [(1, 64), (4, 128), (8, 64)]
    lines, n = [], 0
    for H, D in shapes:
        for j, kind in enumerate(kinds):
            meta = ("bf16", "f16", "f32")[j % 3]
            T = 64 if j % 2 else 32
            k, v = make_tokens(rng, T, H, D, kind), make_tokens(rng, T, H, D, kind)
            lines.append(write_case(a.out, n, H, D, meta, T, k, v))
            n += 1
    with open(os.path.join(a.out, "cases.txt"), "w") as f:
        f.writelines(lines)
    print("seed %d: %d cases in %s" % (a.seed, n, a.out))


if __name__ == "__main__":
    main()
