#!/usr/bin/env python3
"""q2_0_oracle.py - independent numpy model of GGML_TYPE_Q2_0, the KV-cache type of the
OSCAR llama.cpp fork, used to check lib/quant/q2-0.c byte for byte.

Follows FutureMLS-Lab/OSCAR, branch zhongzhu/llamacpp @ 4570ea609:
  ggml/src/ggml-quants.c   quantize_row_q2_0_ref, dequantize_row_q2_0, ortho_hadamard_f32
  ggml/src/ggml-common.h   block_q2_0 {ggml_half d; ggml_half m; uint8_t qs[8]}
  ggml/src/ggml-impl.h     GGML_FP32_TO_FP16 (round to nearest even, subnormals kept)
Every step is one float32 operation in the fork's order; sums are sequential loops
(never np.sum, which reduces pairwise).

Writes to --out: cases.txt with one line per case "N HAD K RATIO NROWS" (HAD 1 = the
in-quant Hadamard, 0 = LLAMA_KV_NO_HADAMARD=1; RATIO = LLAMA_KV_CLIP_RATIO), and per
case caseN.in (float32 rows [NROWS, K]), caseN.q2 (the blocks) and caseN.deq
(float32 dequantized rows). tests/tools/oscar-q2-0-tool.c compares against them.
"""
import argparse
import os

import numpy as np

F32 = np.float32
BLOCK, GROUP = 32, 128
LEVELS = np.array([-0.9816, -0.4528, 0.4528, 0.9816], dtype=F32)
T = F32(0.6745)


def hadamard(t):
    """The fork's butterflies (a+b, a-b) for h = 1, 2, 4, ..., then one scaling."""
    t = t.copy()
    n = t.shape[1]
    h = 1
    while h < n:
        for i in range(0, n, 2 * h):
            a = t[:, i:i + h].copy()
            b = t[:, i + h:i + 2 * h].copy()
            t[:, i:i + h] = a + b
            t[:, i + h:i + 2 * h] = a - b
        h *= 2
    return t * (F32(1.0) / np.sqrt(F32(n)))


def groups(k):
    g = GROUP if k >= GROUP else BLOCK
    return [(i, min(g, k - i)) for i in range(0, k, g)]


def seq_sum(cols):
    s = np.zeros(cols.shape[0], dtype=F32)
    for j in range(cols.shape[1]):
        s = s + cols[:, j]
    return s


def f16_bytes(v):
    with np.errstate(over="ignore"):
        return v.astype("<f2").view(np.uint8).reshape(-1, 2)


def quantize(x, had, ratio):
    rows, k = x.shape
    out = np.zeros((rows, k // BLOCK, 12), dtype=np.uint8)
    with np.errstate(over="ignore", invalid="ignore"):
        for i0, n in groups(k):
            t = x[:, i0:i0 + n].copy()
            mean = seq_sum(t) / F32(n)
            t = t - mean[:, None]
            if had:
                t = hadamard(t)
            if F32(0) < ratio < F32(1):
                idx = min(int(ratio * F32(n)), n - 1)
                thr = np.sort(np.abs(t), axis=1)[:, idx][:, None]
                t = np.where(t > thr, thr, t)
                t = np.where(t < -thr, -thr, t)
            for b in range(n // BLOCK):
                blk = t[:, b * BLOCK:(b + 1) * BLOCK]
                ss = seq_sum(blk * blk)
                sigma = np.sqrt(ss / F32(BLOCK))
                inv = np.where(sigma > F32(1e-8), F32(1.0) / np.where(sigma > 0, sigma, F32(1)), F32(0))
                vs = blk * inv[:, None]
                c = np.where(vs < -T, 0, np.where(vs < 0, 1, np.where(vs < T, 2, 3))).astype(np.uint8)
                ob = i0 // BLOCK + b
                out[:, ob, 0:2] = f16_bytes(sigma)
                out[:, ob, 2:4] = f16_bytes(mean if b == 0 else np.zeros(rows, dtype=F32))
                out[:, ob, 4:] = c[:, 0::4] | (c[:, 1::4] << 2) | (c[:, 2::4] << 4) | (c[:, 3::4] << 6)
    return out.reshape(rows, -1)


def dequantize(q, k, had):
    rows = q.shape[0]
    q = q.reshape(rows, k // BLOCK, 12)
    y = np.zeros((rows, k), dtype=F32)
    d = q[:, :, 0:2].copy().view("<f2")[:, :, 0].astype(F32)
    m = q[:, :, 2:4].copy().view("<f2")[:, :, 0].astype(F32)
    qs = q[:, :, 4:]
    codes = np.stack([(qs >> (2 * e)) & 3 for e in range(4)], axis=-1).reshape(rows, k // BLOCK, BLOCK)
    with np.errstate(over="ignore", invalid="ignore"):
        for i0, n in groups(k):
            b0 = i0 // BLOCK
            t = (LEVELS[codes[:, b0:b0 + n // BLOCK]] * d[:, b0:b0 + n // BLOCK, None]).reshape(rows, n)
            if had:
                t = hadamard(t)
            y[:, i0:i0 + n] = t + m[:, b0][:, None]
    return y


def tie_block():
    """32 values whose block sigma is exactly 1.0f, so +-0.6745f lands on a threshold."""
    a = F32(np.sqrt((32.0 - 2.0 * float(T) ** 2) / 30.0))
    for _ in range(64):
        x = np.array([T, -T] + [a, -a] * 15, dtype=F32)
        sigma = np.sqrt(seq_sum((x * x)[None, :]) / F32(BLOCK))[0]
        if sigma == F32(1):
            return x
        a = np.nextafter(a, F32(0) if sigma > 1 else F32(10), dtype=F32)
    raise SystemExit("no exact tie block found")


def rows_for(rng, k, n):
    x = rng.standard_normal((n, k)).astype(F32) * F32(rng.uniform(0.1, 4.0))
    x += F32(rng.uniform(-2, 2))                       # a DC offset, the reason for the centring
    special = [
        np.zeros(k, dtype=F32),                         # all zero: sigma 0, codes 2
        np.full(k, F32(rng.uniform(-3, 3))),            # constant: mean rounding leaves tiny residue
        np.full(k, F32(1e-9)),                          # sigma below 1e-8
        np.where(np.arange(k) % 2 == 0, F32(1), F32(-1)),   # ties in |t| for the clip sort
    ]
    out = x.copy()
    out[0, rng.integers(k)] = F32(rng.choice([-1, 1]) * 1e4)   # one huge outlier
    if n > 1:
        out[1, rng.integers(k)] = F32(3e19)                   # sum of squares overflows fp32
    if k % 32 == 0 and n > 2:
        out[2, :32] = tie_block()
    return np.concatenate([out, np.stack(special)]).astype(F32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--rows", type=int, default=6)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    shapes = [32, 64, 96, 128, 160, 192, 256, 320, 384, 224]
    ratios = ["0", "0.96", "0.92", "0.5", "1"]
    lines = []
    n = 0
    for k in shapes:
        for had in (0, 1):
            if had and k >= GROUP and k % GROUP == 96:
                continue   # the fork's Hadamard reads past a 96-element last group (refused by oscar)
            ratio = ratios[(n + a.seed) % len(ratios)]
            x = rows_for(rng, k, a.rows)
            q = quantize(x, had, F32(float(ratio)))
            y = dequantize(q, k, had)
            x.tofile(os.path.join(a.out, f"case{n}.in"))
            q.tofile(os.path.join(a.out, f"case{n}.q2"))
            y.tofile(os.path.join(a.out, f"case{n}.deq"))
            lines.append(f"{n} {had} {k} {ratio} {x.shape[0]}")
            n += 1
    with open(os.path.join(a.out, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{n} q2_0 cases in {a.out}")


if __name__ == "__main__":
    main()
