#!/usr/bin/env python3
# make_model_fixtures.py - reference outputs of the forward pass, computed by Hugging Face transformers.
#
# How it was run (from the repository root, on the development machine; NOT in CI, which lacks torch):
#
#     /opt/oracle/bin/python tests/oracle/make_model_fixtures.py            # everything
#     /opt/oracle/bin/python tests/oracle/make_model_fixtures.py --tiny     # random-init models only
#     /opt/oracle/bin/python tests/oracle/make_model_fixtures.py --smollm   # SmolLM2-135M only
#     /opt/oracle/bin/python tests/oracle/make_model_fixtures.py --tiny --only tiny-llama3 tiny-mistral tiny-phi3
#
# The MoE fixtures: /opt/oracle/bin/python tests/oracle/make_model_fixtures.py --tiny --only tiny-qwen3-moe \
#     tiny-qwen2-moe tiny-mixtral   (torch 2.15.0 from PyPI run on the CPU, transformers 5.24.0, gguf 0.19.0)
# with torch 2.15 (CPU), transformers 5.24, gguf-py (whatever /opt/oracle has), numpy; the script prints
# the versions it used and records them in every index.json.
#
# What it writes:
#   tests/fixtures/models/<name>/{config.json,model.safetensors}  small RANDOMLY INITIALISED models
#       (torch.manual_seed), float32: tiny-llama (tied, GQA 2), tiny-qwen2 (q/k/v bias, untied, GQA 4),
#       tiny-qwen3 (q_norm/k_norm, head_dim 48 != hidden/heads = 32, tied, GQA 2), and at hidden 64:
#       tiny-llama3 (rope_type llama3, factor 8, low/high_freq_factor 1/4, original_max_position_embeddings 32:
#       with head_dim 16 and theta 10000 one frequency is kept, one smoothed and six divided by 8),
#       tiny-mistral (sliding_window 16 < the 24/33/40-token sequences, so every sequence is windowed),
#       tiny-phi3 (fused qkv_proj / gate_up_proj, partial_rotary_factor 0.5, sliding_window 20),
#       and mixtures of experts at hidden 64, stored as float16 (weights rounded to fp16 before transformers
#       runs them in fp32), sequences of 32/17/24 tokens: tiny-qwen3-moe (8 experts, top-2, norm_topk_prob),
#       tiny-qwen2-moe (4 experts, top-2, shared expert 32, q/k/v bias), tiny-mixtral (4 experts of
#       intermediate_size 16, top-2, sliding_window 16).
#   tests/fixtures/models/tiny-llama3.gguf, tiny-mistral.gguf, tiny-qwen3-moe.gguf, tiny-qwen2-moe.gguf,
#   tiny-mixtral.gguf (MoE: experts stacked in ffn_{gate,up,down}_exps, <arch>.expert_* keys; Mixtral as
#   arch llama with llama.expert_count): the same weights as llama.cpp's converter
#       writes them (q/k rows permuted per head, ggml names; llama3: rope_freqs.weight = per-frequency
#       divisors 1 / ((1 - s) / factor + s), factor or 1; mistral: llama.attention.sliding_window), checked
#       by test-forward against the same forward fixtures. (tiny-llama.gguf, tiny-qwen2.gguf, tiny-qwen3.gguf are
#       written from the committed safetensors by make_gguf_variants.py, numpy only.)
#   tests/fixtures/forward/<name>/index.json + raw little-endian files:
#       tokens.i32 [T], seq_start.i32 [n_seq+1], pos.i32 [T]   (several sequences, each run by HF separately)
#       logits.f32 [T, V]  (or [n_logit_pos, V] at logit_pos for SmolLM2)
#       hidden.f32 [T, C]  final normed hidden state (SmolLM2 only: logits of all positions = hidden @ W_out^T)
#       q<l>.f32 [T, Hq, D], k<l>.f32 [T, Hkv, D] (after q/k norm and RoPE), v<l>.f32 [T, Hkv, D]
#   tests/fixtures/forward/smollm2/ppl.json + ppl-tokens.i32: perplexity of SmolLM2-135M-Instruct (Q4_1 GGUF,
#       dequantised to fp32 by transformers) on the first 4096 tokens (tokenizer from the same GGUF, no special
#       tokens) of corpora/austen/persuasion.txt, sliding windows n_ctx = 1024, stride = 512, HF convention:
#       window w covers tokens [b, e) with b = w*stride, e = min(b + n_ctx, N), stopping after the window that
#       reaches N; it scores target tokens j in [max(prev_e, b + 1), e) (prev_e = previous window's end, 0
#       for the first), token j predicted from the logits at j - 1 of the same window. Every token but the
#       first is scored exactly once when stride < n_ctx: n_scored = N - 1. NLL = -log_softmax (float64 over fp32 logits), summed.
import argparse
import copy
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, MistralConfig, Phi3Config,
                          MixtralConfig, Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
CACHE = os.environ.get("OSCAR_CACHE", os.path.expanduser("~/.cache/oscar"))

VERSIONS = {
    "python": sys.version.split()[0],
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "numpy": np.__version__,
}
try:
    from importlib.metadata import version as _pkg_version
    VERSIONS["gguf"] = _pkg_version("gguf")
except Exception:  # noqa: BLE001
    pass

# ---- capture of post-RoPE q/k and v: wrap the module-level eager attention function ----------------
CAPTURED = {}


def wrap_attention(module):
    orig = module.eager_attention_forward

    def capture(mod, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        # query [B, Hq, T, D] post-norm post-RoPE, key [B, Hkv, T, D], value [B, Hkv, T, D]
        CAPTURED[mod.layer_idx] = (
            query[0].transpose(0, 1).detach().float().numpy().copy(),
            key[0].transpose(0, 1).detach().float().numpy().copy(),
            value[0].transpose(0, 1).detach().float().numpy().copy(),
        )
        return orig(mod, query, key, value, attention_mask, scaling, dropout, **kwargs)

    module.eager_attention_forward = capture


import transformers.models.llama.modeling_llama as m_llama  # noqa: E402
import transformers.models.qwen2.modeling_qwen2 as m_qwen2  # noqa: E402
import transformers.models.qwen3.modeling_qwen3 as m_qwen3  # noqa: E402
import transformers.models.mistral.modeling_mistral as m_mistral  # noqa: E402
import transformers.models.phi3.modeling_phi3 as m_phi3  # noqa: E402
import transformers.models.qwen2_moe.modeling_qwen2_moe as m_qwen2_moe  # noqa: E402
import transformers.models.qwen3_moe.modeling_qwen3_moe as m_qwen3_moe  # noqa: E402
import transformers.models.mixtral.modeling_mixtral as m_mixtral  # noqa: E402

for _m in (m_llama, m_qwen2, m_qwen3, m_mistral, m_phi3, m_qwen2_moe, m_qwen3_moe, m_mixtral):
    wrap_attention(_m)


def write_raw(path, arr, dtype):
    a = np.ascontiguousarray(arr, dtype=dtype)
    a.astype(a.dtype.newbyteorder("<"), copy=False).tofile(path)


def run_sequences(model, seqs, layers, want_hidden=False):
    """Runs each sequence separately; returns concatenated logits, hidden, q/k/v per layer."""
    logits, hidden, qkv = [], [], {l: ([], [], []) for l in layers}
    for s in seqs:
        CAPTURED.clear()
        ids = torch.tensor([s], dtype=torch.long)
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=want_hidden, use_cache=False)
        logits.append(out.logits[0].float().numpy())
        if want_hidden:
            # hidden_states[-1] in HF llama is after the final norm
            hidden.append(out.hidden_states[-1][0].float().numpy())
        for l in layers:
            for i in range(3):
                qkv[l][i].append(CAPTURED[l][i])
    cat = lambda xs: np.concatenate(xs, axis=0)  # noqa: E731
    return (cat(logits), cat(hidden) if want_hidden else None,
            {l: tuple(cat(x) for x in qkv[l]) for l in layers})


def save_forward(outdir, seqs, logits, qkv, layers, extra):
    os.makedirs(outdir, exist_ok=True)
    toks = np.concatenate([np.asarray(s, dtype=np.int32) for s in seqs])
    starts = np.cumsum([0] + [len(s) for s in seqs]).astype(np.int32)
    pos = np.concatenate([np.arange(len(s), dtype=np.int32) for s in seqs])
    write_raw(os.path.join(outdir, "tokens.i32"), toks, np.int32)
    write_raw(os.path.join(outdir, "seq_start.i32"), starts, np.int32)
    write_raw(os.path.join(outdir, "pos.i32"), pos, np.int32)
    write_raw(os.path.join(outdir, "logits.f32"), logits, np.float32)
    for l in layers:
        q, k, v = qkv[l]
        write_raw(os.path.join(outdir, f"q{l}.f32"), q, np.float32)
        write_raw(os.path.join(outdir, f"k{l}.f32"), k, np.float32)
        write_raw(os.path.join(outdir, f"v{l}.f32"), v, np.float32)
    index = {
        "n_tokens": int(len(toks)),
        "n_seq": len(seqs),
        "layers": list(layers),
        "logits_shape": list(logits.shape),
        "versions": VERSIONS,
    }
    index.update(extra)
    with open(os.path.join(outdir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


# ---- tiny random-init models -------------------------------------------------------------------------
TINY = {
    "tiny-llama": (LlamaConfig, dict(hidden_size=128, intermediate_size=192, num_hidden_layers=3,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                     vocab_size=512, max_position_embeddings=512, rms_norm_eps=1e-5,
                                     rope_theta=10000.0, tie_word_embeddings=True), 1),
    "tiny-qwen2": (Qwen2Config, dict(hidden_size=128, intermediate_size=160, num_hidden_layers=3,
                                     num_attention_heads=8, num_key_value_heads=2,
                                     vocab_size=384, max_position_embeddings=512, rms_norm_eps=1e-6,
                                     rope_theta=1000000.0, tie_word_embeddings=False), 2),
    "tiny-qwen3": (Qwen3Config, dict(hidden_size=128, intermediate_size=160, num_hidden_layers=3,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=48,
                                     vocab_size=512, max_position_embeddings=512, rms_norm_eps=1e-6,
                                     rope_theta=1000000.0, tie_word_embeddings=True,
                                     attention_bias=False), 3),
    "tiny-llama3": (LlamaConfig, dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      vocab_size=256, max_position_embeddings=256, rms_norm_eps=1e-5,
                                      rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0,
                                                           low_freq_factor=1.0, high_freq_factor=4.0,
                                                           original_max_position_embeddings=32),
                                      tie_word_embeddings=False), 4),
    "tiny-mistral": (MistralConfig, dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                                         vocab_size=256, max_position_embeddings=256, rms_norm_eps=1e-5,
                                         rope_theta=10000.0, sliding_window=16, tie_word_embeddings=True), 5),
    "tiny-phi3": (Phi3Config, dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                   max_position_embeddings=256, original_max_position_embeddings=256,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, partial_rotary_factor=0.5,
                                   sliding_window=20, tie_word_embeddings=False, pad_token_id=None,
                                   bos_token_id=None, eos_token_id=None), 6),
    # mixture of experts, every layer sparse (llama.cpp's qwen2moe/qwen3moe graphs know no dense layers)
    "tiny-qwen3-moe": (Qwen3MoeConfig, dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                            vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-6,
                                            rope_theta=1000000.0, tie_word_embeddings=True,
                                            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                                            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[]), 7),
    "tiny-qwen2-moe": (Qwen2MoeConfig, dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                            num_attention_heads=4, num_key_value_heads=2,
                                            vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-6,
                                            rope_theta=1000000.0, tie_word_embeddings=False,
                                            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                            shared_expert_intermediate_size=32, norm_topk_prob=False,
                                            decoder_sparse_step=1, mlp_only_layers=[]), 8),
    # Mixtral: experts of intermediate_size, top-2 renormalised, sliding_window 16 (shorter than every sequence)
    "tiny-mixtral": (MixtralConfig, dict(hidden_size=64, intermediate_size=16, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                         vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-5,
                                         rope_theta=1000000.0, sliding_window=16, tie_word_embeddings=False,
                                         num_local_experts=4, num_experts_per_tok=2), 9),
}
# Stored as float16 (the weights are rounded to fp16 before transformers runs them in fp32, so the
# fixtures are exact for the stored weights): half the bytes.
HALF = ("tiny-qwen3-moe", "tiny-qwen2-moe", "tiny-mixtral")
SEQ_LENS = {"tiny-qwen3-moe": [32, 17, 24], "tiny-qwen2-moe": [32, 17, 24], "tiny-mixtral": [32, 17, 24]}


# ---- GGUF variants, converted as llama.cpp's convert_hf_to_gguf.py does for LlamaForCausalLM -----------
def ggml_permute(w, n_head):
    # q/k rows of each head from HF half-split order to ggml's adjacent pairs: (h, 2, D/2) -> (h, D/2, 2)
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_divisors(cfg):
    # llama.cpp's convention: ggml divides each frequency theta_i by rope_freqs[i]
    rp = cfg.rope_parameters
    dim = cfg.head_dim
    freqs = 1.0 / (rp["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    orig, lo, hi, factor = (rp["original_max_position_embeddings"], rp["low_freq_factor"], rp["high_freq_factor"],
                            rp["factor"])
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / float(f)
        if wavelen < orig / hi:
            out.append(1.0)
        elif wavelen > orig / lo:
            out.append(factor)
        else:
            s = (orig / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - s) / factor + s))
    return np.asarray(out, dtype=np.float32)


def write_gguf(model, name):
    import gguf
    cfg = model.config
    half = name in HALF
    # from the saved checkpoint, as llama.cpp's converter reads it (transformers 5 fuses the experts
    # in memory; the file has them one tensor per expert)
    from safetensors.numpy import load_file
    sd = {k: v.astype(np.float32) for k, v in
          load_file(os.path.join(FIX, "models", name, "model.safetensors")).items()}
    path = os.path.join(FIX, "models", f"{name}.gguf")
    arch = {"llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2_moe": "qwen2moe",
            "qwen3_moe": "qwen3moe"}[cfg.model_type]
    moe = cfg.model_type in ("mixtral", "qwen2_moe", "qwen3_moe")
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if moe:  # llama.cpp's MoE keys (convert_hf_to_gguf.py; Mixtral's experts are feed_forward_length wide)
        w.add_expert_count(cfg.num_local_experts if arch == "llama" else cfg.num_experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
        if arch != "llama":
            w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
        if arch == "qwen2moe":
            w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    if getattr(cfg, "sliding_window", None) and arch == "llama":
        w.add_sliding_window(cfg.sliding_window)
    if cfg.rope_parameters.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_divisors(cfg))
    names = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
             "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight",
             "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
             "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
             "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
             "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
             "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
             "block_sparse_moe.gate.weight": "ffn_gate_inp.weight"}

    def put(gname, t):
        t = np.ascontiguousarray(t)
        # 1-D tensors (norms, biases) stay f32 as llama.cpp's converter keeps them
        w.add_tensor(gname, t.astype(np.float16) if half and t.ndim > 1 else t)

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    if not cfg.tie_word_embeddings:
        put("output.weight", sd["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        for k, g in names.items():
            key = f"model.layers.{i}.{k}"
            if key not in sd:
                continue
            t = sd[key]
            if arch == "llama" and k.startswith("self_attn.q_proj"):
                t = ggml_permute(t, cfg.num_attention_heads)
            elif arch == "llama" and k.startswith("self_attn.k_proj"):
                t = ggml_permute(t, cfg.num_key_value_heads)
            elif k == "mlp.shared_expert_gate.weight":
                t = t.reshape(-1)  # llama.cpp: a vector of n_embd
            put(f"blk.{i}.{g}", t)
        if moe:  # the experts stacked: [E, rows, cols] (ggml ne = [cols, rows, E])
            mx = arch == "llama"
            pre, n_exp = ("block_sparse_moe", cfg.num_local_experts) if mx else ("mlp", cfg.num_experts)
            for proj, g in ((("w1" if mx else "gate_proj"), "ffn_gate_exps"), (("w3" if mx else "up_proj"), "ffn_up_exps"),
                            (("w2" if mx else "down_proj"), "ffn_down_exps")):
                stack = np.stack([sd[f"model.layers.{i}.{pre}.experts.{e}.{proj}.weight"] for e in range(n_exp)])
                put(f"blk.{i}.{g}.weight", stack)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{name}: wrote {path}", file=sys.stderr)


GGUF_VARIANTS = ("tiny-llama3", "tiny-mistral", "tiny-qwen3-moe", "tiny-qwen2-moe", "tiny-mixtral")


def make_tiny(name):
    cls, kw, seed = TINY[name]
    torch.manual_seed(seed)
    cfg = cls(**kw)
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    # HF initialises norm weights to 1 and biases to 0; perturb them so the test sees them applied.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname or pname.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
            if name in HALF:
                p.copy_(p.half().float())
    mdir = os.path.join(FIX, "models", name)
    if name in HALF:  # a copy: half() would also round the fp32 model's RoPE inv_freq buffer
        copy.deepcopy(model).half().save_pretrained(mdir, safe_serialization=True)
    else:
        model.save_pretrained(mdir, safe_serialization=True)
    for extra in ("generation_config.json",):
        p = os.path.join(mdir, extra)
        if os.path.exists(p):
            os.remove(p)
    g = torch.Generator().manual_seed(100 + seed)
    lens = SEQ_LENS.get(name, [40, 24, 33])
    seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in lens]
    layers = [0, 1, cfg.num_hidden_layers - 1]
    logits, _, qkv = run_sequences(model, seqs, layers)
    save_forward(os.path.join(FIX, "forward", name), seqs, logits, qkv, layers,
                 {"model": f"tests/fixtures/models/{name}", "seed": seed})
    if name in GGUF_VARIANTS:
        write_gguf(model, name)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} params, T={sum(lens)}", file=sys.stderr)


# ---- SmolLM2-135M ------------------------------------------------------------------------------------
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def austen_ids(tok, path, n):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    ids = tok(text[: 8 * n], add_special_tokens=False)["input_ids"]
    assert len(ids) >= n, (len(ids), n)
    return ids[:n]


def perplexity(model, ids, n_ctx, stride):
    n = len(ids)
    nll, scored, prev_e, b = 0.0, 0, 0, 0
    while True:
        e = min(b + n_ctx, n)
        with torch.no_grad():
            lg = model(input_ids=torch.tensor([ids[b:e]]), use_cache=False).logits[0].double()
        lsm = torch.log_softmax(lg, dim=-1)
        for j in range(max(prev_e, b + 1), e):
            nll -= float(lsm[j - 1 - b, ids[j]])
            scored += 1
        print(f"  window [{b}, {e}) nll {nll:.4f} scored {scored}", file=sys.stderr)
        prev_e = e
        if e == n:
            break
        b += stride
    return nll, scored


def make_smollm():
    mdir = os.path.join(CACHE, "models")
    tok = AutoTokenizer.from_pretrained(mdir, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(mdir, gguf_file=GGUF, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    cfg = model.config
    austen = os.path.join(CACHE, "corpora", "austen")
    # two sequences of real text: 48 tokens from Emma, 32 from Pride and Prejudice
    seqs = [austen_ids(tok, os.path.join(austen, "emma.txt"), 48),
            austen_ids(tok, os.path.join(austen, "prideprejudice.txt"), 32)]
    layers = [0, 15, 29]
    logits, hidden, qkv = run_sequences(model, seqs, layers, want_hidden=True)
    T = logits.shape[0]
    logit_pos = list(range(0, T, 10)) + [T - 1]
    outdir = os.path.join(FIX, "forward", "smollm2")
    save_forward(outdir, seqs, logits[logit_pos], qkv, layers,
                 {"model": "$OSCAR_CACHE/models/" + GGUF, "logit_pos": logit_pos})
    write_raw(os.path.join(outdir, "hidden.f32"), hidden, np.float32)
    # check: hidden @ W_out^T reproduces the logits (so hidden.f32 stands in for the full [T, V] logits)
    w = model.lm_head.weight.detach().float().numpy()
    rec = hidden.astype(np.float64) @ w.astype(np.float64).T
    rel = np.linalg.norm(rec - logits) / np.linalg.norm(logits)
    print(f"smollm2: hidden->logits rel err {rel:.2e}", file=sys.stderr)
    assert rel < 1e-5

    ids = austen_ids(tok, os.path.join(austen, "persuasion.txt"), 4096)
    write_raw(os.path.join(outdir, "ppl-tokens.i32"), np.asarray(ids, dtype=np.int32), np.int32)
    nll, scored = perplexity(model, ids, 1024, 512)
    res = {"corpus": "corpora/austen/persuasion.txt", "n_tokens": len(ids), "n_ctx": 1024, "stride": 512,
           "nll_sum": nll, "n_scored": scored, "ppl": math.exp(nll / scored), "versions": VERSIONS,
           "convention": "HF sliding window; targets not scored by earlier windows; n_scored = N - 1"}
    with open(os.path.join(outdir, "ppl.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print(f"smollm2: ppl {res['ppl']:.4f} over {scored} tokens", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--smollm", action="store_true")
    ap.add_argument("--only", nargs="*", help="tiny models to (re)make, e.g. tiny-llama3 (default: all)")
    a = ap.parse_args()
    both = not a.tiny and not a.smollm
    print(json.dumps(VERSIONS), file=sys.stderr)
    torch.set_num_threads(2)
    if a.tiny or both:
        for name in TINY:
            if not a.only or name in a.only:
                make_tiny(name)
    if a.smollm or both:
        make_smollm()


if __name__ == "__main__":
    main()
