#!/usr/bin/env python3
"""bake-qwen3-smollm2.py - a Qwen3-architecture GGUF made from SmolLM2-135M, for the served-engine check.

usage: bake-qwen3-smollm2.py SMOLLM2.gguf OUT.gguf

The OSCAR llama.cpp fork applies its rotations in the qwen3 graph only, and its Q2_0 cache centres
128-element groups, so the check needs a qwen3 model with head_dim 128 (SmolLM2 has llama, D = 64).
This keeps SmolLM2's weights, tokenizer (gpt2 BPE, pre "smollm", no BOS) and shapes (30 layers,
576 wide, 9 query / 3 KV heads) and widens each head to 128 without changing what RoPE does:
 - Q/K: in the llama GGUF the rows of a head are in ggml's interleaved order, pair j = rows
   (2j, 2j+1) rotating at base^(-2j/64). Qwen3 uses NEOX RoPE, pair m = rows (m, m+64) at
   base^(-2m/128), so pair j goes to m = 2j (rows 2j and 2j+64); the odd pairs are zero rows.
 - V: rows 0..63 of each 128-wide head; O: the matching input columns (the rest zero).
 - q_norm / k_norm (Qwen3 has them, SmolLM2 does not): constant w per layer with
   sqrt(128)·w² = E|q|·E|k| / 8, so the scores' scale is SmolLM2's; E|q|² is estimated from the
   weights as sum over a head's rows of (W·diag(attn_norm))², i.e. for unit-variance normed inputs.
   This is a different model from SmolLM2 (per-head normalised q and k), only shaped like it.
Q, K, V and O are stored F16; every other tensor is copied through unchanged (Q4_1 / Q8_0 / F32).
Deterministic: the same input gives the same bytes.
"""
import sys

import numpy as np
import gguf
from gguf.quants import dequantize

D_OLD, D_NEW = 64, 128


def main(src, out):
    r = gguf.GGUFReader(src)
    f = {k: v for k, v in r.fields.items()}

    def val(k):
        return f[k].contents()

    if val("general.architecture") != "llama" or int(val("llama.rope.dimension_count")) != D_OLD:
        sys.exit(f"{src}: want a llama GGUF with head_dim {D_OLD} (SmolLM2-135M)")
    L = int(val("llama.block_count"))
    n_head, n_kv = int(val("llama.attention.head_count")), int(val("llama.attention.head_count_kv"))
    eps = float(val("llama.attention.layer_norm_rms_epsilon"))
    t = {x.name: x for x in r.tensors}

    def deq(name):
        x = t[name]
        return dequantize(x.data, x.tensor_type).reshape(int(x.shape[1]), int(x.shape[0])).astype(np.float64)

    w = gguf.GGUFWriter(out, "qwen3")
    w.add_name("SmolLM2-135M as qwen3 (head_dim 128, oscar served-engine check)")
    w.add_block_count(L)
    w.add_context_length(int(val("llama.context_length")))
    w.add_embedding_length(int(val("llama.embedding_length")))
    w.add_feed_forward_length(int(val("llama.feed_forward_length")))
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(D_NEW)
    w.add_value_length(D_NEW)
    w.add_rope_dimension_count(D_NEW)
    w.add_rope_freq_base(float(val("llama.rope.freq_base")))
    w.add_layer_norm_rms_eps(eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for k, fld in f.items():  # the tokenizer as it is
        if not k.startswith("tokenizer."):
            continue
        vt = fld.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_array(k, fld.contents())
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(k, fld.contents())
        elif vt == gguf.GGUFValueType.BOOL:
            w.add_bool(k, bool(fld.contents()))
        else:
            w.add_uint32(k, int(fld.contents()))

    # new row of old row: pair j (2j, 2j+1) -> (2j, 2j+64)
    qk_map = np.zeros(D_OLD, dtype=np.int64)
    qk_map[0::2] = np.arange(0, D_OLD, 2)
    qk_map[1::2] = np.arange(0, D_OLD, 2) + D_NEW // 2

    def widen_qk(m, heads):
        n_in = m.shape[1]
        o = np.zeros((heads * D_NEW, n_in))
        for h in range(heads):
            o[h * D_NEW + qk_map] = m[h * D_OLD:(h + 1) * D_OLD]
        return o

    def head_energy(m, g, heads):  # mean over heads of E|W_h x|^2 for x = g * (unit-variance iid)
        e = (m * g[None, :]) ** 2
        return float(np.mean([e[h * D_OLD:(h + 1) * D_OLD].sum() for h in range(heads)]))

    for x in r.tensors:
        name = x.name
        if not name.startswith("blk.") or name.split(".")[2] not in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(name, x.data, raw_shape=x.data.shape, raw_dtype=x.tensor_type)
            continue
        i, kind = int(name.split(".")[1]), name.split(".")[2]
        m = deq(name)
        if kind == "attn_q":
            nw = widen_qk(m, n_head)
        elif kind == "attn_k":
            nw = widen_qk(m, n_kv)
        elif kind == "attn_v":
            nw = np.zeros((n_kv * D_NEW, m.shape[1]))
            for h in range(n_kv):
                nw[h * D_NEW:h * D_NEW + D_OLD] = m[h * D_OLD:(h + 1) * D_OLD]
        else:
            nw = np.zeros((m.shape[0], n_head * D_NEW))
            for h in range(n_head):
                nw[:, h * D_NEW:h * D_NEW + D_OLD] = m[:, h * D_OLD:(h + 1) * D_OLD]
        w.add_tensor(name, nw.astype(np.float16))
        if kind == "attn_k":  # norms after K: Q of this layer was seen first (GGUF order), recompute both
            g = dequantize(t[f"blk.{i}.attn_norm.weight"].data, t[f"blk.{i}.attn_norm.weight"].tensor_type)
            g = np.asarray(g, dtype=np.float64).reshape(-1)
            q2 = head_energy(deq(f"blk.{i}.attn_q.weight"), g, n_head)
            k2 = head_energy(m, g, n_kv)
            s = np.sqrt(np.sqrt(q2 * k2) / (8.0 * np.sqrt(D_NEW)))
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", np.full(D_NEW, s, dtype=np.float32))
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", np.full(D_NEW, s, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
