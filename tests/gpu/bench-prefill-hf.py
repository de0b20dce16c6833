"""bench-prefill-hf.py - transformers (sdpa, bf16) prefill baseline for test-forward-gpu bench.

Run on the GPU machine by tests/gpu/gpu-forward-check.sh (python3 there has torch 2.11 and
transformers 5.x):
  python3 tests/gpu/bench-prefill-hf.py --csv hf.csv [--seqs 15] [--len 2048] [--layers 36] [--reps 3]
Builds a Qwen3-8B-shaped model with random weights directly on the GPU
(AutoModelForCausalLM.from_config, bf16, attn_implementation="sdpa"), then times the base
model's prefill of seqs x len random tokens (no LM head, use_cache=False: the same work as
oscar's run without logits), best of --reps after one warm-up, torch.cuda.synchronize around
each call. A second variant adds forward hooks on every layer's q/k/v projections that
accumulate grouped QᵀQ per KV head, KᵀK and VᵀV in fp32 (a cost proxy for capture: the hooks
see the projections before q/k-norm and RoPE). Writes "label,seconds,tokens,peak_gib" lines.
--shape qwen3-30b-a3b: the Qwen3-30B-A3B shape (48 layers, 2048, 32/4 heads of 128, 128 experts of
768, top-8 renormalised; Qwen3MoeForCausalLM with transformers' own expert kernels), bare prefill only.
"""
import argparse
import time

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig


def build(layers, shape="qwen3-8b"):
    if shape == "qwen3-30b-a3b":
        cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=layers,
                             num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_experts=128,
                             num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
                             decoder_sparse_step=1, max_position_embeddings=40960, rope_theta=1e6,
                             rms_norm_eps=1e-6, tie_word_embeddings=False)
    else:
        cfg = Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=layers,
                          num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                          rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False)
    with torch.device("cuda"):
        try:
            m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        except TypeError:
            m = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    return m.eval()


def timed(model, ids, reps):
    with torch.inference_mode():
        model.model(input_ids=ids, use_cache=False)
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            model.model(input_ids=ids, use_cache=False)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
    return best


def add_hooks(model, acc):
    hs = []
    for li, layer in enumerate(model.model.layers):
        at = layer.self_attn

        def qh(mod, inp, out, li=li):
            q = out.reshape(-1, 8, 4, 128).permute(1, 0, 2, 3).reshape(8, -1, 128).float()
            acc["q"][li] += q.transpose(1, 2) @ q

        def kh(mod, inp, out, li=li, name="k"):
            x = out.reshape(-1, 8, 128).permute(1, 0, 2).float()
            acc[name][li] += x.transpose(1, 2) @ x

        hs.append(at.q_proj.register_forward_hook(qh))
        hs.append(at.k_proj.register_forward_hook(kh))
        hs.append(at.v_proj.register_forward_hook(lambda m, i, o, li=li: kh(m, i, o, li, "v")))
    return hs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--seqs", type=int, default=15)
    ap.add_argument("--len", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=36)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shape", default="qwen3-8b", choices=["qwen3-8b", "qwen3-30b-a3b"])
    a = ap.parse_args()
    torch.manual_seed(0)
    model = build(a.layers, a.shape)
    ids = torch.randint(0, 151936, (a.seqs, a.len), device="cuda")
    T = a.seqs * a.len
    rows = []
    torch.cuda.reset_peak_memory_stats()
    t = timed(model, ids, a.reps)
    rows.append(("transformers sdpa bf16 bare prefill", t, T, torch.cuda.max_memory_allocated() / 2**30))
    print(f"bare: {t:.3f} s, {T / t:.0f} tokens/s", flush=True)
    if a.shape != "qwen3-8b":  # the hooks below assume Qwen3-8B's heads
        rows[0] = (f"transformers sdpa bf16 bare prefill ({a.shape})",) + rows[0][1:]
        with open(a.csv, "w") as f:
            for r in rows:
                f.write(f"{r[0]},{r[1]:.6f},{r[2]},{r[3]:.3f}\n")
        return
    acc = {n: torch.zeros(a.layers, 8, 128, 128, device="cuda") for n in ("q", "k", "v")}
    hs = add_hooks(model, acc)
    torch.cuda.reset_peak_memory_stats()
    t = timed(model, ids, a.reps)
    rows.append(("transformers sdpa bf16 + fp32 QQT/KTK/VTV hooks", t, T, torch.cuda.max_memory_allocated() / 2**30))
    print(f"hooks: {t:.3f} s, {T / t:.0f} tokens/s", flush=True)
    for h in hs:
        h.remove()
    with open(a.csv, "w") as f:
        for r in rows:
            f.write(f"{r[0]},{r[1]:.6f},{r[2]},{r[3]:.3f}\n")


if __name__ == "__main__":
    main()
