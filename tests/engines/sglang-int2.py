#!/usr/bin/env python3
"""sglang-int2.py - the SGLang OSCAR fork's INT2 cache writers against oscar's quantizer.

Run by tests/engines/sglang-int2.sh on a GPU machine (torch + triton), with three files of the fork
exported under --fork. For each head_dim and group size:

  prefill: quantized_set_kv_int2_pretransformed_clip_triton (the fork's prefill write: per-row
           sort clip at int(r * D), min/max INT2, quartered packing, fp32 scale/zero) against
           `oscar-quant-tool quant asym D G f32 sort r` (lib/quant, what oscar-verify simulates for
           prefill rows);
  flush:   gpu_flush_int2_apply (the fork's decode-time demotion of HP rows: bisection clip for
           D >= 64, div_rn) against `oscar-quant-tool quant asym D G f32 bisect r` (oscar's
           OSCAR_CLIP_FLUSH rule for demoted rows);
  rotation: the fork rotates outside these kernels as a bf16 GEMM (rows @ bf16(R)), oscar as fp64
           sums of the fp32 R rounded to bf16; the INT2 codes of the two rotated rows (both
           through lib/quant) measure what that difference moves (reported, not bounded).

Triton's fp32 `/` is the approximate division (PTX div.full.f32, at most 2 ulp off): the prefill
writer divides by it for scale, zero and every code, the flush writer for scale only (div_rn for
zero and codes), where lib/quant rounds every division correctly. So the bounds are: scale / zero
within --max-ulps, and codes equal in all but --max-code-rows of the rows (a code flips only where
x / scale + zero + 0.5 lands within a few ulp of an integer).

The rows are the same bf16 tensors on both sides (K-like: Gaussian with a few large channels).
Prints a markdown table and writes report.json under --out; exit 1 when a bound below fails.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch


def rows_like_k(n, h, d, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, h, d, generator=g)
    x[:, :, torch.randperm(d, generator=g)[: max(2, d // 32)]] *= 8.0   # outlier channels
    return x.to(torch.bfloat16).cuda()


def oscar_quant(tool, rows_f32, d, g, clip, ratio, tmp):
    n = rows_f32.shape[0]
    src, codes, meta = (os.path.join(tmp, f) for f in ("x.f32", "x.codes", "x.meta"))
    rows_f32.astype(np.float32).tofile(src)
    subprocess.run([tool, "quant", "asym", str(d), str(g), "f32", clip, repr(ratio), str(n), src, codes, meta],
                   check=True)
    return (np.fromfile(codes, np.uint8).reshape(n, d // 4), np.fromfile(meta, np.float32).reshape(n, -1))


def fork_prefill(mod, x, g, ratio):
    n, h, d = x.shape
    ng = d // g
    loc = torch.arange(n, device="cuda", dtype=torch.int64)
    buf = [torch.zeros(n, h, d // 4, dtype=torch.uint8, device="cuda") for _ in range(2)]
    sz = [torch.zeros(n, h, 2 * ng, dtype=torch.float32, device="cuda") for _ in range(2)]
    mod.quantized_set_kv_int2_pretransformed_clip_triton(x, x, loc, buf[0], buf[1], sz[0], sz[1], ratio, ratio)
    torch.cuda.synchronize()
    return buf[0].reshape(n * h, d // 4).cpu().numpy(), sz[0].reshape(n * h, 2 * ng).cpu().numpy()


def fork_flush(mod, x, g, ratio):
    """One layer, one request, every row of x demoted: slot i of the HP arena -> slot i of INT2."""
    n, h, d = x.shape
    ng = d // g
    hp_k, hp_v = x.contiguous(), x.clone()
    q = [torch.zeros(n, h, d // 4, dtype=torch.uint8, device="cuda") for _ in range(2)]
    sz = [torch.zeros(n, h, 2 * ng, dtype=torch.float32, device="cuda") for _ in range(2)]
    ptr = lambda t: torch.tensor([t.data_ptr()], dtype=torch.int64, device="cuda")
    slots = torch.arange(n, device="cuda", dtype=torch.int64)
    plan = mod.FlushPlan(returned_slot_ids=slots.clone(), src_hp_slot=slots.clone(),
                         flush_pos=torch.arange(n, device="cuda", dtype=torch.int32),
                         valid_mask=torch.ones(n, device="cuda", dtype=torch.int8), dst_quant_slots=slots.clone(),
                         bs=1, flush_interval=n)
    req_to_token = torch.zeros(1, n, dtype=torch.int32, device="cuda")
    mod.gpu_flush_int2_apply(
        plan, req_pool_indices=torch.zeros(1, dtype=torch.int64, device="cuda"), req_to_token=req_to_token,
        hp_k_ptrs=ptr(hp_k), hp_v_ptrs=ptr(hp_v), quant_k_ptrs=ptr(q[0]), quant_v_ptrs=ptr(q[1]),
        k_sz_ptrs=ptr(sz[0]), v_sz_ptrs=ptr(sz[1]), hp_k_sample=hp_k, hp_v_sample=hp_v, quant_k_sample=q[0],
        quant_v_sample=q[1], k_sz_sample=sz[0], v_sz_sample=sz[1], hp_k_strides=tuple(hp_k.stride()),
        hp_v_strides=tuple(hp_v.stride()), quant_k_strides=tuple(q[0].stride()), quant_v_strides=tuple(q[1].stride()),
        k_sz_strides=tuple(sz[0].stride()), v_sz_strides=tuple(sz[1].stride()), num_heads=h, head_dim=d,
        v_head_dim=d, k_num_scale_groups=ng, v_num_scale_groups=ng, num_layers=1, k_clip_ratio=ratio,
        v_clip_ratio=ratio)
    torch.cuda.synchronize()
    return q[0].reshape(n * h, d // 4).cpu().numpy(), sz[0].reshape(n * h, 2 * ng).cpu().numpy()


def ulps(a, b):
    """Distance in units in the last place between float32 arrays of one sign (scale > 0; zero >= 0)."""
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


def compare(fc, fm, oc, om):
    rows_meta = int(np.sum(np.any(fm.view(np.uint32) != om.view(np.uint32), axis=1)))
    rows_codes = int(np.sum(np.any(fc != oc, axis=1)))
    return {"rows": int(fc.shape[0]), "rows_meta_differ": rows_meta, "meta_max_ulps": int(ulps(fm, om).max()),
            "rows_codes_differ": rows_codes, "code_bytes_differ": int(np.sum(fc != oc))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fork", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--commit", default="?")
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--max-ulps", type=int, default=8)
    ap.add_argument("--max-code-rows", type=float, default=0.05)
    a = ap.parse_args()
    sys.path.insert(0, a.fork)
    import sglang.QuantKernel.gpu_flush_int2 as flush_mod
    import sglang.QuantKernel.oscar_rotation_clip_int2_kv as prefill_mod
    import triton
    os.makedirs(a.out, exist_ok=True)
    results, worst_ulps, worst_codes = [], 0, 0.0
    print(f"## SGLang OSCAR fork ({a.commit[:9]}) INT2 writers vs oscar's lib/quant, {a.rows} rows x 4 heads, "
          f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}\n")
    print("| writer | D | G | clip | rows | rows with other scale/zero bits | max ulps | rows with other codes | "
          "code bytes differ |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for d in (64, 128, 256):
            for g in sorted({d, 32}, reverse=True):
                for ratio in (0.96, 0.92):
                    x = rows_like_k(a.rows, 4, d, seed=d * 1000 + g + int(ratio * 100))
                    xf = x.float().reshape(-1, d).cpu().numpy()
                    for name, fn, clip in (("prefill", fork_prefill, "sort"), ("flush", fork_flush, "bisect")):
                        fc, fm = fn(prefill_mod if name == "prefill" else flush_mod, x, g, ratio)
                        oc, om = oscar_quant(a.tool, xf, d, g, clip, ratio, tmp)
                        r = compare(fc, fm, oc, om) | {"writer": name, "D": d, "G": g, "clip": ratio}
                        results.append(r)
                        worst_ulps = max(worst_ulps, r["meta_max_ulps"])
                        worst_codes = max(worst_codes, r["rows_codes_differ"] / r["rows"])
                        print(f"| {name} | {d} | {g} | {ratio} | {r['rows']} | {r['rows_meta_differ']} | "
                              f"{r['meta_max_ulps']} | {r['rows_codes_differ']} | {r['code_bytes_differ']} |")
            # the rotation outside the writers: bf16 GEMM (the fork) vs fp64 sums (oscar), same R
            x = rows_like_k(a.rows, 4, d, seed=d + 7)
            R, _ = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64))
            y_fork = (x.reshape(-1, d) @ R.to(torch.bfloat16).cuda()).float().cpu().numpy()
            y_oscar = torch.from_numpy((x.double().reshape(-1, d).cpu() @ R.float().double()).float().numpy()) \
                .to(torch.bfloat16).float().numpy()
            elem = float(np.mean(y_fork != y_oscar))
            fc, _ = oscar_quant(a.tool, y_fork, d, d, "sort", 0.96, tmp)
            oc, _ = oscar_quant(a.tool, y_oscar, d, d, "sort", 0.96, tmp)
            r = {"writer": "rotation", "D": d, "rows": int(fc.shape[0]), "rotated_elems_differ": elem,
                 "rows_codes_differ": int(np.sum(np.any(fc != oc, axis=1))),
                 "code_elems_differ": float(np.mean(np.unpackbits(fc ^ oc).reshape(-1, 2).any(axis=1)))}
            results.append(r)
            print(f"| rotation bf16 GEMM vs fp64 | {d} | {d} | 0.96 | {r['rows']} | rotated values differ: "
                  f"{elem:.1%} | | {r['rows_codes_differ']} | {r['code_elems_differ']:.2%} of codes |")
    json.dump({"fork_commit": a.commit, "torch": torch.__version__, "triton": triton.__version__,
               "results": results}, open(os.path.join(a.out, "report.json"), "w"), indent=1)
    ok = worst_ulps <= a.max_ulps and worst_codes <= a.max_code_rows
    print(f"\nsglang-int2: {'PASS' if ok else 'FAIL'} (writers: scale/zero within {worst_ulps} ulps, bound "
          f"{a.max_ulps}; rows with other codes {worst_codes:.2%}, bound {a.max_code_rows:.0%})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
