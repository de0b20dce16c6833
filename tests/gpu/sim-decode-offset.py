# sim-decode-offset.py - a numpy model of the fused INT2 decode kernel's value path
# (kernels/decode-attention.cu), to explain and size the 1.008e-3 error gpu-check drew at
# L = 131072 (BENCHMARKS.md, "Accuracy finding"). The kernel unpacks codes as 128 + m c
# (bf16 exponent trick), accumulates w_t (128 + m c_t) over a warp's whole token range and
# removes 128 Σw and Σ w zero once at the end; with near-uniform attention over random
# values the true output is ~1e-2 of Σ|w (c - z)|, so the fp32 rounding of the large
# offset sums shows. kernel(): that scheme with fp32 round-to-nearest sums (tensor cores
# may round worse); kernel_tile(): the offsets removed per 16-token tile (the proposed fix).
# Run: ~/.cache/oscar/venv/bin/python tests/gpu/sim-decode-offset.py   (about 2 minutes)
# Measured on this machine: scheme as is 1.2e-4 (256 tokens per warp range) / 5.0e-4
# (1024); per-tile offsets 3.4e-5 for both.
import numpy as np
rng = np.random.default_rng(1)
L, D = 131072, 128
c = rng.integers(0, 4, size=(L, D)).astype(np.float64)            # codes
scale = np.abs(rng.normal(1.0, 0.2, size=L)) * 0.8                 # per-token scales
zero = 1.5 + rng.normal(0, 0.2, size=L)                            # zero points (code units)
logit = rng.normal(0, 1.5, size=L)                                 # q.k / sqrt(D) (near-uniform attention)
p = np.exp(logit - logit.max()); p /= p.sum()
w = p * scale
o_exact = (w[:, None] * (c - zero[:, None])).sum(0)                 # fp64 truth
def kernel(n_per_warp, mult=1.0):
    f = np.float32
    out = np.zeros(D)
    for s0 in range(0, L, n_per_warp):
        ww = w[s0:s0+n_per_warp].astype(f)
        acc = np.zeros(D, dtype=f); wsum = f(0); zsum = f(0)
        for t in range(len(ww)):
            acc = (acc + ww[t] * (f(128) + f(mult) * c[s0+t].astype(f))).astype(f)
            wsum = f(wsum + ww[t]); zsum = f(zsum + ww[t] * f(zero[s0+t]))
        out += ((acc - f(128) * wsum) / f(mult) - zsum).astype(np.float64)
    return out
for n in (256, 1024):
    o = kernel(n)
    print(f"per-warp tokens {n}: rel err {np.linalg.norm(o - o_exact) / np.linalg.norm(o_exact):.3e}, |o|/sum|w(c-z)| = {np.linalg.norm(o_exact) / np.linalg.norm((np.abs(w[:, None] * (c - zero[:, None]))).sum(0)):.2e}")
def kernel_tile(n_per_warp, tile=16):
    f = np.float32
    out = np.zeros(D)
    for s0 in range(0, L, n_per_warp):
        run = np.zeros(D, dtype=f)
        for t0 in range(s0, min(s0 + n_per_warp, L), tile):
            ww = w[t0:t0+tile].astype(f)
            acc = np.zeros(D, dtype=f); wsum = f(0); zsum = f(0)
            for t in range(len(ww)):
                acc = (acc + ww[t] * (f(128) + c[t0+t].astype(f))).astype(f)
                wsum = f(wsum + ww[t]); zsum = f(zsum + ww[t] * f(zero[t0+t]))
            run = (run + ((acc - f(128) * wsum) - zsum)).astype(f)
        out += run.astype(np.float64)
    return out
for n in (256, 1024):
    o = kernel_tile(n)
    print(f"per-tile de-offset, per-warp tokens {n}: rel err {np.linalg.norm(o - o_exact) / np.linalg.norm(o_exact):.3e}")
