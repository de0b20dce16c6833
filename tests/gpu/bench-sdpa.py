"""bench-sdpa.py - PyTorch SDPA BF16 decode baselines for bench-decode (same grid),
one timing per SDPA backend so the baseline is the fastest one, not whichever
torch's dispatcher happens to pick.

Run on the GPU machine by tests/gpu/gpu-check.sh (python3 there has torch 2.11):
  python3 tests/gpu/bench-sdpa.py --csv sdpa.csv [--reps N] [--head-dim D] [--hq N] [--hkv N] [--only L:B]
q [B, Hq, 1, D], k/v [B, Hkv, L, D] bf16 (default Hq 32, Hkv 8, D 128), enable_gqa=True. Each backend is forced
with torch.nn.attention.sdpa_kernel([backend]): cuDNN, FlashAttention, memory-efficient;
a backend that refuses the shape (or GQA) is reported n/a with torch's reason. MATH
(unfused, materializes the scores) is timed only for a shape no fused backend runs.
cudaEvents around each call, 3 warm-ups, N reps, L2 flushed (256 MB zero_) before
each rep. Writes "L,B,backend,mean_ms,sd_ms,status" rows (status "ok" or "n/a: why")
and prints a table.
"""
import argparse
import statistics
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FUSED = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
         ("efficient", SDPBackend.EFFICIENT_ATTENTION))
MATH = ("math", SDPBackend.MATH)


def time_backend(backend, q, k, v, flush, reps):
    """(mean_ms, sd_ms) of SDPA forced onto `backend`; raises RuntimeError if it refuses."""
    with sdpa_kernel([backend]):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            flush.zero_()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1))
    return statistics.mean(ts), statistics.stdev(ts)


def reason(err, caught):
    """Why a backend refused, CSV-safe and short: torch states the cause in a warning
    ("... not supported because ...") before raising "No available kernel"."""
    texts = [str(w.message) for w in caught] + [str(err)]
    line = next((t for t in texts if t.strip()), type(err).__name__).strip().splitlines()[0]
    return line.replace(",", ";")[:160]


def shape_arg(text):
    """--only L:B as (L, B), both positive; argparse reports anything else."""
    try:
        L, B = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not L:B (two integers)")
    if L < 1 or B < 1:
        raise argparse.ArgumentTypeError(f"'{text}': L and B must be positive")
    return L, B


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--only", type=shape_arg, help="one shape, L:B")
    a = ap.parse_args()
    shapes = [(L, B) for L in (8192, 32768, 131072) for B in (1, 8, 32)]
    if a.only:
        shapes = [a.only]
    D, Hq, Hkv = a.head_dim, a.hq, a.hkv
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name(dev)}")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    print(f"shape: Hq {Hq}, Hkv {Hkv}, head_dim {D}")
    rows = []
    for L, B in shapes:
        q = torch.randn(B, Hq, 1, D, dtype=torch.bfloat16, device=dev)
        k = torch.randn(B, Hkv, L, D, dtype=torch.bfloat16, device=dev)
        v = torch.randn(B, Hkv, L, D, dtype=torch.bfloat16, device=dev)
        kv_bytes = B * Hkv * L * 4 * D
        ran = 0
        for name, be in FUSED + (MATH,):
            if name == "math" and ran:
                rows.append((L, B, name, float("nan"), float("nan"), "n/a: not timed (a fused backend ran)"))
                continue
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    m, s = time_backend(be, q, k, v, flush, a.reps)
                ran += 1
                rows.append((L, B, name, m, s, "ok"))
                print(f"sdpa {name:9s} L={L} B={B}: {m:.4f} +- {s:.4f} ms  "
                      f"({kv_bytes / (m * 1e-3) / 1e9:.0f} GB/s KV)", flush=True)
            except RuntimeError as e:   # the backend refuses this shape / GQA / dtype
                why = reason(e, caught)
                rows.append((L, B, name, float("nan"), float("nan"), "n/a: " + why))
                print(f"sdpa {name:9s} L={L} B={B}: n/a ({why})", flush=True)
            torch.cuda.synchronize()
        del q, k, v
        torch.cuda.empty_cache()
    with open(a.csv, "w") as f:
        f.write("L,B,backend,mean_ms,sd_ms,status\n")
        for L, B, name, m, s, st in rows:
            f.write(f"{L},{B},{name},{m:.5f},{s:.5f},{st}\n")
    print("\n| context | batch | " + " | ".join(n for n, _ in FUSED) + " | math | fastest |")
    print("|---|---|" + "---|" * (len(FUSED) + 2))
    for L, B in shapes:
        mine = {n: m for (l, b, n, m, s, st) in rows if l == L and b == B}
        cells = ["n/a" if mine[n] != mine[n] else f"{mine[n]:.4f}" for n, _ in FUSED + (MATH,)]
        ok = {n: m for n, m in mine.items() if m == m}
        best = min(ok, key=ok.get) if ok else None
        print(f"| {L // 1024}k | {B} | " + " | ".join(cells) +
              (f" | {best} {ok[best]:.4f} |" if best else " | none |"))


if __name__ == "__main__":
    main()
