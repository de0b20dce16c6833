"""bench-sdpa.py - PyTorch SDPA BF16 decode baseline for bench-decode (same grid).

Run on the GPU machine by tests/gpu/gpu-check.sh (python3 there has torch 2.11):
  python3 tests/gpu/bench-sdpa.py --csv sdpa.csv [--reps N]
q [B, 32, 1, 128], k/v [B, 8, L, 128] bf16, enable_gqa=True; cudaEvents around
each call, 3 warm-ups, N reps, L2 flushed (256 MB zero_) before each rep.
Prints "L,B,mean_ms,sd_ms" lines (CSV) and a short table.
"""
import argparse
import statistics

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    rows = []
    for L in (8192, 32768, 131072):
        for B in (1, 8, 32):
            q = torch.randn(B, 32, 1, 128, dtype=torch.bfloat16, device=dev)
            k = torch.randn(B, 8, L, 128, dtype=torch.bfloat16, device=dev)
            v = torch.randn(B, 8, L, 128, dtype=torch.bfloat16, device=dev)
            for _ in range(3):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            torch.cuda.synchronize()
            ts = []
            for _ in range(a.reps):
                flush.zero_()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1))
            m, s = statistics.mean(ts), statistics.stdev(ts)
            rows.append((L, B, m, s))
            print(f"sdpa L={L} B={B}: {m:.4f} +- {s:.4f} ms  ({B * 8 * L * 512 / (m * 1e-3) / 1e9:.0f} GB/s KV)", flush=True)
            del q, k, v
            torch.cuda.empty_cache()
    with open(a.csv, "w") as f:
        f.write("L,B,mean_ms,sd_ms\n")
        for L, B, m, s in rows:
            f.write(f"{L},{B},{m:.5f},{s:.5f}\n")


if __name__ == "__main__":
    main()
