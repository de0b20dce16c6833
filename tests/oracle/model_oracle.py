#!/usr/bin/env python3
# model_oracle.py - a tiny random llama model written twice: as a Hugging Face
# directory (config.json + model.safetensors, via the `safetensors` package)
# and as a llama GGUF converted the way llama.cpp's converter does it
# (q_proj/k_proj rows permuted per head by LlamaModel.permute, ggml names).
# oscar must load both into identical fp32 weights.
#
# Committed fixture tests/fixtures/model/ was made with:
#   ~/.cache/oscar/venv/bin/python tests/oracle/model_oracle.py tests/fixtures/model 7
import json
import os
import sys

import numpy as np
import gguf
from safetensors.numpy import save_file

L, C, HQ, HKV, D, F, V = 2, 16, 4, 2, 4, 24, 40


def permute(w, n_head):
    # LlamaModel.permute: rows (h, 2, D/2) -> (h, D/2, 2)
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    out, seed = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)
    hf = {"model.embed_tokens.weight": r(V, C), "model.norm.weight": r(C), "lm_head.weight": r(V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        hf |= {p + "input_layernorm.weight": r(C), p + "self_attn.q_proj.weight": r(HQ * D, C),
               p + "self_attn.k_proj.weight": r(HKV * D, C), p + "self_attn.v_proj.weight": r(HKV * D, C),
               p + "self_attn.o_proj.weight": r(C, HQ * D), p + "post_attention_layernorm.weight": r(C),
               p + "mlp.gate_proj.weight": r(F, C), p + "mlp.up_proj.weight": r(F, C),
               p + "mlp.down_proj.weight": r(C, F)}
    hfdir = os.path.join(out, "hf")
    os.makedirs(hfdir, exist_ok=True)
    save_file(hf, os.path.join(hfdir, "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
           "num_hidden_layers": L, "num_attention_heads": HQ, "num_key_value_heads": HKV,
           "intermediate_size": F, "vocab_size": V, "rope_theta": 50000.0, "rms_norm_eps": 1e-5,
           "max_position_embeddings": 512, "tie_word_embeddings": False, "hidden_act": "silu",
           "rope_scaling": None, "_name_or_path": "tiny-llama"}
    with open(os.path.join(hfdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    w = gguf.GGUFWriter(os.path.join(out, "tiny-llama.gguf"), "llama")
    w.add_name("tiny-llama")
    w.add_block_count(L)
    w.add_context_length(512)
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_head_count(HQ)
    w.add_head_count_kv(HKV)
    w.add_rope_freq_base(50000.0)
    w.add_layer_norm_rms_eps(1e-5)
    names = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
             "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
             "mlp.down_proj.weight": "ffn_down.weight"}
    w.add_tensor("token_embd.weight", hf["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", hf["model.norm.weight"])
    w.add_tensor("output.weight", hf["lm_head.weight"])
    for i in range(L):
        for k, g in names.items():
            t = hf[f"model.layers.{i}.{k}"]
            if k.startswith("self_attn.q_proj"):
                t = permute(t, HQ)
            elif k.startswith("self_attn.k_proj"):
                t = permute(t, HKV)
            w.add_tensor(f"blk.{i}.{g}", np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"model_oracle: seed {seed}, wrote {out}/hf and {out}/tiny-llama.gguf")


if __name__ == "__main__":
    main()
