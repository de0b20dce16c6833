#!/usr/bin/env python3
"""stats_oracle.py - independent numpy fp64 oracle for lib/stats and lib/rotation/fit.

Implements method.md §2 (ktk, vtv, qqt, sst in the reference's sqrt(w_hat) Gram
form, plus the experimental attention-mass V estimator as documented in
lib/stats/stats.h), §3 (eigh) and §5 (P_br and the nine compositions) directly
from the formulas, on synthetic Q/K/V that the C side regenerates bit for bit
(counter-based splitmix64, dyadic values: every input is exact in fp32 and
z @ M is exact in fp64, so both sides see identical float32 inputs).

Writes one container file per case (format below) that tests/oracle/stats-oracle.h
reads. Committed fixtures (tests/fixtures/stats/) were made with:

    ~/.cache/oscar/venv/bin/python tests/oracle/stats_oracle.py --out tests/fixtures/stats --compact

tests/integration/test-stats-oracle.sh runs it live (full content) and checks
with build/bin/stats-oracle-check.

Container: b"OSCFIX1\\0", u32 count, then per array: u32 name_len, name, u32 dtype
(1 = f64, 2 = i32), u32 ndim, u64 dims[ndim], little-endian data.
"""
import argparse
import os
import struct
import sys

import numpy as np

MASK = (1 << 64) - 1
GAMMA = np.uint64(0x9E3779B97F4A7C15)

CASES = {
    # SmolLM2 shapes (GQA 3, D 64), 2 layers
    "smol": dict(L=2, Hq=9, Hkv=3, D=64, seqs=[37, 64, 23, 50, 26], chunks=[2, 1, 2], seed=11),
    # Qwen3-8B head shapes (GQA 4, D 128), 1 layer
    "qwen": dict(L=1, Hq=8, Hkv=2, D=128, seqs=[100, 77, 143], chunks=[1, 2], seed=12),
}
KINDS = ["ktk", "vtv", "qqt", "sst", "vatt"]
COMPS = ["plain", "pbr", "br", "br_h128", "r_h", "h_pbr", "h_r_pbr", "h_pbr_r", "r_h_pbr"]


def mix64(x):
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


class Gen:
    """value(i) = mix64(seed + (i + 1) * GAMMA), i = 0, 1, 2, ... (splitmix64 as a counter)."""

    def __init__(self, seed):
        self.seed = np.uint64(seed)
        self.i = 0

    def draw(self, n):
        idx = np.arange(self.i + 1, self.i + 1 + n, dtype=np.uint64)
        self.i += n
        with np.errstate(over="ignore"):
            return mix64(self.seed + idx * GAMMA)

    def z(self, n):  # 24-bit dyadic in [-1, 1)
        return ((self.draw(n) >> np.uint64(40)).astype(np.int64) - (1 << 23)).astype(np.float64) / float(1 << 23)

    def m(self, n):  # 8-bit dyadic in [-1, 1) / 8
        return ((self.draw(n) >> np.uint64(56)).astype(np.int64) - 128).astype(np.float64) / 1024.0


def gen_inputs(c):
    """q [L,T,Hq,D], k/v [L,T,Hkv,D] float32; order: layer, tensor (q,k,v), head: M [D,D] then z [T,D]."""
    T, D = sum(c["seqs"]), c["D"]
    g = Gen(c["seed"])
    out = {"q": [], "k": [], "v": []}
    for _ in range(c["L"]):
        for name, H in (("q", c["Hq"]), ("k", c["Hkv"]), ("v", c["Hkv"])):
            x = np.empty((T, H, D), dtype=np.float32)
            for h in range(H):
                M = g.m(D * D).reshape(D, D)
                z = g.z(T * D).reshape(T, D)
                x[:, h, :] = (z @ M).astype(np.float32)  # exact in fp64, one rounding to fp32
            out[name].append(x)
    return {k: np.stack(v).astype(np.float64) for k, v in out.items()}


def sym(a):
    return (a + a.T) / 2


def estimators(q, k, v, seqs, Hkv, D):
    """Per-head matrices [Hkv,D,D] and layer matrices [D,D] for one layer (method.md §2)."""
    T, Hq = q.shape[0], q.shape[1]
    g = Hq // Hkv
    res = {}
    # ktk / vtv: pooled rows of all KV heads
    for name, x in (("ktk", k), ("vtv", v)):
        X = x.reshape(T * Hkv, D)
        res[name] = (sym(X.T @ X / (T * Hkv)), np.stack([sym(x[:, h].T @ x[:, h] / T) for h in range(Hkv)]))
    # qqt: A_h over the contiguous group
    A = np.stack([(lambda Qg: Qg.T @ Qg / (T * g))(q[:, h * g:(h + 1) * g].reshape(T * g, D)) for h in range(Hkv)])
    res["qqt"] = (sym(A.mean(axis=0)), np.stack([sym(a) for a in A]))
    # sst: reference form with w_hat and the Gram matrix of v * sqrt(w_hat)
    C = []
    for h in range(Hkv):
        kh, vh = k[:, h], v[:, h]
        w = np.einsum("td,de,te->t", kh, A[h], kh)
        assert (w >= 0).all(), "oracle data produced a negative sst weight"
        what = w * T / max(w.sum(), 1e-12)
        vs = vh * np.sqrt(what)[:, None]
        gram = vs.T @ vs / T
        stream = (w[:, None] * vh).T @ vh / max(w.sum(), 1e-12)
        assert np.abs(gram - stream).max() <= 1e-12 * np.abs(gram).max(), "sqrt-Gram form != streaming form"
        C.append(sym(gram))
    C = np.stack(C)
    res["sst"] = (sym(C.mean(axis=0)), C)
    # vatt: w_{h,t} = sum_{j in group} sum_{i >= t} p_{j,i,t}^2 per sequence (causal softmax, scale 1/sqrt(D))
    W = np.zeros((T, Hkv))
    a = 0
    for n in seqs:
        mask = np.tril(np.ones((n, n), dtype=bool))
        for h in range(Hkv):
            for j in range(h * g, (h + 1) * g):
                lg = q[a:a + n, j] @ k[a:a + n, h].T / np.sqrt(D)
                lg = np.where(mask, lg, -np.inf)
                p = np.exp(lg - lg.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                W[a:a + n, h] += (p ** 2).sum(axis=0)
        a += n
    Cv = np.stack([sym((W[:, h][:, None] * v[:, h]).T @ v[:, h] / max(W[:, h].sum(), 1e-12)) for h in range(Hkv)])
    res["vatt"] = (sym(Cv.mean(axis=0)), Cv)
    return res


def hadamard(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]]) / np.sqrt(2.0)
    return h


def pbr_perm(lam):
    D = len(lam)
    bits = D.bit_length() - 1
    s = np.argsort(-lam, kind="stable")  # descending, ties by ascending index
    perm = np.empty(D, dtype=np.int64)
    for i in range(D):
        perm[int(format(i, "0%db" % bits)[::-1], 2)] = s[i]
    return perm


def compose(name, U, lam):
    D = U.shape[0]
    H, P = hadamard(D), np.eye(D)[:, pbr_perm(lam)]
    f = {"plain": U, "pbr": P, "br": U @ P, "br_h128": U @ P @ H, "r_h": U @ H, "h_pbr": H @ P,
         "h_r_pbr": H @ U @ P, "h_pbr_r": H @ P @ U, "r_h_pbr": U @ H @ P}
    return f[name]


def canon(U):
    """Sign convention for comparisons only: the largest-|x| entry of each eigenvector is positive."""
    idx = np.abs(U).argmax(axis=0)
    return U * np.sign(U[idx, np.arange(U.shape[1])])


def write_container(path, arrays):
    with open(path + ".tmp", "wb") as f:
        f.write(b"OSCFIX1\0" + struct.pack("<I", len(arrays)))
        for name, a in arrays:
            dt = 1 if a.dtype == np.float64 else 2
            a = np.ascontiguousarray(a, dtype="<f8" if dt == 1 else "<i4")
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<II", dt, a.ndim))
            f.write(struct.pack("<%dQ" % a.ndim, *a.shape))
            f.write(a.tobytes())
    os.replace(path + ".tmp", path)


def run_case(name, c, out_dir, compact):
    x = gen_inputs(c)
    L, Hkv, D = c["L"], c["Hkv"], c["D"]
    per = [estimators(x["q"][l], x["k"][l], x["v"][l], c["seqs"], Hkv, D) for l in range(L)]
    arrays = [("params", np.array([L, c["Hq"], Hkv, D, c["seed"]], dtype=np.int32)),
              ("seq_lens", np.array(c["seqs"], dtype=np.int32)),
              ("chunk_nseq", np.array(c["chunks"], dtype=np.int32))]
    head_kinds = (["qqt", "sst"] if name == "smol" else []) if compact else KINDS
    comp_kinds = ["qqt", "sst"] if compact else KINDS
    comps = ["plain", "r_h_pbr"] if compact else COMPS
    for kind in KINDS:
        arrays.append((kind + ".layer", np.stack([p[kind][0] for p in per])))
        if kind in head_kinds:
            arrays.append((kind + ".head", np.stack([p[kind][1] for p in per])))
        eig = [np.linalg.eigh(p[kind][0]) for p in per]
        arrays.append((kind + ".eig", np.stack([e[0] for e in eig])))
        if kind in comp_kinds:
            Us = [canon(e[1]) for e in eig]
            arrays.append((kind + ".U", np.stack(Us)))
            for comp in comps:
                arrays.append((kind + ".comp." + comp, np.stack([compose(comp, U, e[0]) for U, e in zip(Us, eig)])))
    path = os.path.join(out_dir, "stats-%s.bin" % name)
    write_container(path, arrays)
    print("%s: T=%d L=%d Hq=%d Hkv=%d D=%d -> %s (%d bytes)" % (name, sum(c["seqs"]), L, c["Hq"], Hkv, D, path,
                                                             os.path.getsize(path)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--case", choices=sorted(CASES) + ["all"], default="all")
    ap.add_argument("--compact", action="store_true", help="fewer arrays (the committed fixtures)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in sorted(CASES) if a.case == "all" else [a.case]:
        run_case(name, CASES[name], a.out, a.compact)
    return 0


if __name__ == "__main__":
    sys.exit(main())
