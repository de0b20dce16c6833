#!/usr/bin/env python3
"""quant_oracle.py - independent numpy implementation of the OSCAR quantizers
(docs/method.md §8, §9, §10, §18.2, §19) used to check lib/quant bit for bit.

Writes cases to an output directory: for case N, caseN.in (float32 rows),
caseN.codes, caseN.meta, and one line per case in cases.txt:
    N MODE D G META CLIP RATIO NROWS
MODE: asym | sym | lm | int4bdh (G = Hadamard order) | kivik (G = K block tokens) |
      kiviv (G = V group).  META: f32 | f16 | bf16.  CLIP: none | sort | bisect.

Committed fixtures (tests/fixtures/quant/) were generated with:
    ~/.cache/oscar/venv/bin/python tests/oracle/quant_oracle.py --seed 20260601 \
        --rows 6 --out tests/fixtures/quant
The integration test tests/integration/test-quant-oracle.sh runs it with a fresh seed.
"""
import argparse
import os

import numpy as np

F32, F64 = np.float32, np.float64


def bf16_bits(x):
    u = np.asarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    r = np.where(nan, (u >> 16) | 0x40, r)
    return r.astype(np.uint16)


def bf16_round(x):
    return (bf16_bits(x).astype(np.uint32) << 16).view(F32)


def store_meta(vals, meta):
    vals = np.asarray(vals, dtype=F32)
    if meta == "f32":
        return vals.tobytes()
    if meta == "f16":
        with np.errstate(over="ignore"):
            return vals.astype(np.float16).tobytes()
    return bf16_bits(vals).tobytes()


def ladder(t, top):
    c = np.zeros(t.shape, dtype=np.uint8)
    for k in range(1, top + 1):
        c += (t >= F32(k)).astype(np.uint8)
    return c


def pack2(c):
    q = c.shape[-1] // 4
    return (c[..., :q] | (c[..., q:2 * q] << 2) | (c[..., 2 * q:3 * q] << 4) | (c[..., 3 * q:] << 6)).astype(np.uint8)


def clip_index(r, D):
    if r <= 0:
        return -1
    return int(min(max(np.floor(r * D), 0), D - 1))


def tau_sort(x, idx):
    return np.sort(np.abs(x))[idx]


def tau_bisect(x, idx):
    D = x.shape[0]
    a = np.abs(x)
    lo, hi = F32(0), F32(a.max())
    target = D - idx
    for _ in range(int(np.log2(D))):
        mid = F32((lo + hi) * F32(0.5))
        if int(np.sum(a > mid)) > target:
            lo = mid
        else:
            hi = mid
    return hi


def asym_row(x, G):
    codes, meta = [], []
    for g in range(0, x.shape[0], G):
        xs = x[g:g + G]
        m, M = F32(xs.min() + F32(0)), F32(xs.max() + F32(0))   # canonical zero sign
        scale = F32(np.maximum(F32(M - m), F32(1e-8)) / F32(3))
        zero = F32(-m / scale)
        t = (xs / scale + zero) + F32(0.5)
        codes.append(ladder(t.astype(F32), 3))
        meta += [scale, zero]
    return np.concatenate(codes), meta


def sym_row(x, G):
    codes, meta = [], []
    for g in range(0, x.shape[0], G):
        xs = x[g:g + G]
        s = F32(np.maximum(np.abs(xs).max(), F32(1e-8)) / F32(1.5))
        codes.append(ladder((xs / s + F32(2)).astype(F32), 3))
        meta += [s, F32(1.5)]
    return np.concatenate(codes), meta


def lm_row(x):
    D = x.shape[0]
    mu = F32(np.cumsum(x.astype(F64))[-1] / D)
    e = x.astype(F64) - F64(mu)
    sigma = F32(np.sqrt(np.cumsum(e * e)[-1] / D + 1e-8))
    z = ((x - mu) / sigma).astype(F32)
    T = F32(0.9810652732849121)
    c = ((z >= -T).astype(np.uint8) + (z >= F32(0)) + (z >= T)).astype(np.uint8)
    k = F32(3.0191171169281006 / 3.0 * 1.16)
    z0 = F32(1.5095585584640503 / (3.0191171169281006 / 3.0))
    scale = F32(k * sigma)
    return c, [scale, F32(z0 - F32(mu / scale))]


def int2_rows(X, mode, G, clip, ratio):
    D = X.shape[1]
    codes, meta = [], []
    idx = clip_index(ratio, D)
    for x in X:
        x = x.copy()
        if mode != "sym" and clip != "none" and idx >= 0:
            tau = tau_sort(x, idx) if clip == "sort" else tau_bisect(x, idx)
            x = np.where(x < -tau, -tau, np.where(x > tau, tau, x)).astype(F32)
        if mode == "asym":
            c, mt = asym_row(x, G)
        elif mode == "sym":
            c, mt = sym_row(x, G)
        else:
            c, mt = lm_row(x)
        codes.append(pack2(c))
        meta += mt
    return np.concatenate(codes), meta


def int4bdh_rows(X, b):
    D = X.shape[1]
    codes, meta = [], []
    inv = F32(1.0 / np.sqrt(b))
    for x in X:
        y = (x * inv).astype(F32)
        for base in range(0, D, b):
            h = 1
            while h < b:
                for i in range(b):
                    if i & h:
                        continue
                    lo, up = y[base + i], y[base + i + h]
                    y[base + i], y[base + i + h] = F32(lo + up), F32(lo - up)
                h <<= 1
        y = bf16_round(y)
        m, M = F32(y.min() + F32(0)), F32(y.max() + F32(0))
        scale = F32(np.maximum(F32(M - m), F32(1e-8)) / F32(15))
        zero = F32(-m / scale)
        q = ladder(((y / scale + zero) + F32(0.5)).astype(F32), 15)
        codes.append((q[:D // 2] | (q[D // 2:] << 4)).astype(np.uint8))
        meta += [scale, zero]
    return np.concatenate(codes), meta


def kivi_group(xs):
    m, M = F32(xs.min() + F32(0)), F32(xs.max() + F32(0))
    if m == 0 and M == 0:
        m, M = F32(-1), F32(1)
    if m == M:
        return np.zeros(xs.shape, np.uint8), [F32(0), F32(m)]
    scale = F32(F32(M - m) / F32(3))
    zq = F32(np.rint(F32(-m / scale)))
    t = np.rint((xs / scale + zq).astype(F32))
    c = np.clip(t, 0, 3).astype(np.uint8)
    return c, [scale, F32(-zq * scale)]


def kivik_rows(X, B):
    codes, meta = [], []
    for b0 in range(0, X.shape[0], B):
        blk = X[b0:b0 + B]
        for d in range(X.shape[1]):
            c, mt = kivi_group(blk[:, d])
            codes.append(pack2(c))
            meta += mt
    return np.concatenate(codes), meta


def kiviv_rows(X, G):
    codes, meta = [], []
    for x in X:
        cs = []
        for g in range(0, X.shape[1], G):
            c, mt = kivi_group(x[g:g + G])
            cs.append(c)
            meta += mt
        codes.append(pack2(np.concatenate(cs)))
    return np.concatenate(codes), meta


def make_rows(rng, n, D, kind):
    if kind == "randn":
        return rng.standard_normal((n, D)).astype(F32)
    if kind == "adversarial":
        rows = []
        for i in range(n):
            k = i % 7
            if k == 0:
                r = np.full(D, F32(3.0))                      # constant row
            elif k == 1:
                r = np.zeros(D, F32)                          # all zero
            elif k == 2:
                r = rng.standard_normal(D).astype(F32)
                r[rng.integers(D)] = F32(1e4)                 # huge outlier
            elif k == 3:
                r = (rng.standard_normal(D) * 1e-40).astype(F32)   # denormals
            elif k == 4:
                r = np.where(rng.random(D) < 0.5, -1, 1).astype(F32) * F32(2.5)  # mixed signs, ties
            elif k == 5:
                r = (rng.standard_normal(D) * 1e20).astype(F32)    # huge magnitude
            else:
                r = bf16_round(rng.standard_normal(D) * 4)    # bf16 inputs (serving path)
            rows.append(np.asarray(r, F32))
        return np.stack(rows)
    raise ValueError(kind)


def cases(D):
    out = []
    g = 4
    while g <= D:
        for meta in ("f32", "bf16", "f16"):
            out.append(("asym", g, meta, "none", 0.0))
        out.append(("asym", g, "f32", "sort", 0.92))
        out.append(("asym", g, "bf16", "bisect", 0.96))
        out.append(("sym", g, "f32", "none", 0.0))
        g *= 2
    out += [("asym", D, "f32", "sort", 0.96), ("asym", D, "f32", "bisect", 0.9), ("asym", D, "f32", "sort", 1.0),
            ("lm", D, "f32", "none", 0.0), ("lm", D, "bf16", "sort", 0.96), ("lm", D, "f16", "bisect", 0.92)]
    for b in (1, 16, D):
        out.append(("int4bdh", b, "f32", "none", 0.0))
    out.append(("int4bdh", 16, "bf16", "none", 0.0))
    out += [("kivik", 32, "f16", "none", 0.0), ("kivik", 32, "f32", "none", 0.0), ("kiviv", 32, "f16", "none", 0.0),
            ("kiviv", 16, "bf16", "none", 0.0)]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dims", default="64,128,256")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    lines, n = [], 0
    for D in [int(d) for d in a.dims.split(",")]:
        for (mode, G, meta, clip, ratio) in cases(D):
            for kind in ("randn", "adversarial"):
                rows = a.rows
                if mode == "kivik":
                    rows = G * max(1, a.rows // 8)
                X = make_rows(rng, rows, D, kind)
                if mode in ("asym", "sym", "lm"):
                    codes, mt = int2_rows(X, mode, G, clip, ratio)
                elif mode == "int4bdh":
                    codes, mt = int4bdh_rows(X, G)
                elif mode == "kivik":
                    codes, mt = kivik_rows(X, G)
                else:
                    codes, mt = kiviv_rows(X, G)
                base = os.path.join(a.out, "case%d" % n)
                X.astype(F32).tofile(base + ".in")
                codes.astype(np.uint8).tofile(base + ".codes")
                with open(base + ".meta", "wb") as f:
                    f.write(store_meta(mt, meta))
                lines.append("%d %s %d %d %s %s %r %d" % (n, mode, D, G, meta, clip, ratio, rows))
                n += 1
    with open(os.path.join(a.out, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("seed %d: %d cases in %s" % (a.seed, n, a.out))


if __name__ == "__main__":
    main()
