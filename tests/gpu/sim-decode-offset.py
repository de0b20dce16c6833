# sim-decode-offset.py - a numpy model of the fused INT2 decode kernel's value path
# (kernels/decode-attention.cu), to explain and size the 1.008e-3 error gpu-check drew at
# L = 131072 (BENCHMARKS.md, "Accuracy finding"). The kernel unpacks codes as 128 + m c
# (bf16 exponent trick), accumulates w_t (128 + m c_t) over a warp's whole token range and
# removes 128 Σw and Σ w zero once at the end; with near-uniform attention over random
# values the true output is ~1e-2 of Σ|w (c - z)|, so the fp32 rounding of the large
# offset sums shows. Variants, 1024 tokens per warp range, fp32 sums per token:
#   now(128+c)  the kernel's scheme
#   per-tile    the offsets removed per 16-token tile (fresh accumulator per tile)
#   1+c/4       codes unpacked into the top mantissa bits (offset 1, step 1/4)
#   c only      codes as plain values (no offset)
# with round-to-nearest ("RN") and, as a pessimistic bound, round-toward-zero on every
# add ("trunc"; the real tensor cores accumulate per MMA, so this overstates them: it
# predicts 0.29 for the current kernel, which measures 1e-4..1e-3).
# Run: ~/.cache/oscar/venv/bin/python tests/gpu/sim-decode-offset.py   (about 10 minutes)
# Measured here (2026-11-29):
#   RN    now 4.88e-04 | per-tile 3.36e-05 | 1+c/4 3.32e-05 | c only 9.21e-06
#   trunc now 2.89e-01 | per-tile 4.79e-03 | 1+c/4 1.22e-02 | c only 2.56e-03
import numpy as np
rng = np.random.default_rng(1)
L, D = 131072, 128
c = rng.integers(0, 4, size=(L, D)).astype(np.float64)
scale = np.abs(rng.normal(1.0, 0.2, size=L)) * 0.8
zero = 1.5 + rng.normal(0, 0.2, size=L)
logit = rng.normal(0, 1.5, size=L)
p = np.exp(logit - logit.max()); p /= p.sum()
w = p * scale
o_exact = (w[:, None] * (c - zero[:, None])).sum(0)
def rz(x64):  # fp64 -> fp32 rounded toward zero
    f = x64.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x64)
    f[over] = np.nextafter(f[over], np.float32(0))
    return f
def run(offset, mult, tile, n_range, trunc):
    rnd = rz if trunc else (lambda x: x.astype(np.float32))
    out = np.zeros(D)
    for s0 in range(0, L, n_range):
        run_acc = np.zeros(D, dtype=np.float32)
        s1 = min(s0 + n_range, L)
        acc = np.zeros(D, dtype=np.float32); wsum = 0.0; zsum = 0.0
        for t0 in range(s0, s1, tile):
            if tile < n_range: acc = np.zeros(D, dtype=np.float32); wsum = 0.0; zsum = 0.0
            for t in range(t0, min(t0 + tile, s1)):
                acc = rnd(acc.astype(np.float64) + float(np.float32(w[t])) * (offset + mult * c[t]))
                wsum = float(np.float32(wsum + np.float32(w[t]))); zsum = float(np.float32(zsum + np.float32(w[t]) * np.float32(zero[t])))
            if tile < n_range:
                run_acc = (run_acc + ((acc - np.float32(offset * wsum)) / np.float32(mult) - np.float32(zsum))).astype(np.float32)
        if tile >= n_range: run_acc = ((acc - np.float32(offset * wsum)) / np.float32(mult) - np.float32(zsum)).astype(np.float32)
        out += run_acc.astype(np.float64)
    return np.linalg.norm(out - o_exact) / np.linalg.norm(o_exact)
n = 1024
for trunc in (False, True):
    print("trunc" if trunc else "RN   ",
          "now(128+c) %.2e" % run(128.0, 1.0, n, n, trunc),
          "| per-tile %.2e" % run(128.0, 1.0, 16, n, trunc),
          "| 1+c/4 %.2e" % run(1.0, 0.25, n, n, trunc),
          "| c only %.2e" % run(0.0, 1.0, n, n, trunc), flush=True)
