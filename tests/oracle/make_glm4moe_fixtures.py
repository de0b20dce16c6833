#!/usr/bin/env python3
# make_glm4moe_fixtures.py - GLM-4.x MoE (model_type glm4_moe, llama.cpp arch glm4moe) fixtures for oscar's
# CPU forward pass: a tiny RANDOMLY INITIALISED model run by Hugging Face transformers (eager attention, fp32,
# CPU), and the same weights as llama.cpp's converter (Glm4MoeModel) writes them to GGUF. No network: the
# config is built in code; weights and token sequences come from a fixed numpy seed, so `--no-torch` checks
# the very model (and routing decisions) the fixtures are made from.
#
# Run (on a machine with torch, transformers >= 5, gguf, safetensors, numpy; the CPU is enough):
#
#     python3 tests/oracle/make_glm4moe_fixtures.py --out DIR
#
# then copy DIR/models/* to tests/fixtures/models/ and DIR/forward/* to tests/fixtures/forward/.
# (The H200 machine: PYTHONPATH=.devcarry/py python3 tests/oracle/make_glm4moe_fixtures.py --out /tmp/g4.)
# Without torch, `--no-torch` writes the same model directory and GGUF from the numpy weights (no forward
# fixtures; with torch 2.15 + transformers 5.17 all three files came out byte-identical to the torch mode's),
# checks that the GGUF and the safetensors give the same numpy forward to 1e-10, that every GLM feature
# switched off moves the logits, and that no routing decision of the fixture sequences is within 1e-3 of a
# tie (a check of the script only).
#
# What it writes (under DIR):
#   models/tiny-glm4-moe/{config.json,model.safetensors}   float32, as transformers 5's Glm4MoeForCausalLM saves
#       it. 4 layers, hidden 64, 4 heads / 2 KV heads, head_dim 32 (!= hidden / heads = 16), partial_rotary_factor
#       0.5 (RoPE on the first 16 dims of each head, half-split pairs (i, i + 8), theta^(-2i/16); dims 16..31 pass
#       through), rope_theta 10000, use_qk_norm (RMS over head_dim), attention_bias (q/k/v biases, o without),
#       first_k_dense_replace 1 (layer 0: dense SwiGLU of intermediate_size 96), layers 1-3 MoE: 8 routed
#       experts of moe_intermediate_size 24, top-2, sigmoid scores + e_score_correction_bias (random, > 0) for
#       the choice only, n_group 2 / topk_group 1 (group score = sum of its top-2 biased scores), weights
#       = unbiased sigmoid of the chosen, normalised (norm_topk_prob), times routed_scaling_factor 2.5, plus one
#       shared expert (n_shared_experts 1, width 24) on the same input. Untied lm_head, vocab 160, rms eps 1e-5.
#   models/tiny-glm4-moe.gguf   the same weights as llama.cpp's convert_hf_to_gguf.py (Glm4MoeModel) writes them:
#       arch glm4moe, F32 (file_type ALL_F32), q/k NOT permuted (NEOX RoPE), experts stacked in
#       ffn_{gate,up,down}_exps [E, rows, cols], router ffn_gate_inp, correction bias blk.N.exp_probs_b.bias, shared
#       expert ffn_{gate,up,down}_shexp, the FFN pre-norm as post_attention_norm, keys rope.dimension_count 16
#       (head_dim * partial_rotary_factor), expert_count / _used_count / _feed_forward_length / _shared_count,
#       expert_group_count / _group_used_count, leading_dense_block_count, expert_gating_func 2 (sigmoid),
#       expert_weights_scale 2.5, expert_weights_norm, nextn_predict_layers 0, key_length / value_length 32.
#   forward/tiny-glm4-moe/: index.json + raw little-endian files, the format of make_model_fixtures.py:
#       tokens.i32 [T], seq_start.i32 [4], pos.i32 [T] (3 sequences of 40, 24, 33 tokens, each run by
#       transformers separately), logits.f32 [T, V], q<l>.f32 [T, Hq, D] and k<l>.f32 [T, Hkv, D] after the
#       q/k bias, q_norm / k_norm and partial RoPE (before the attention scale), v<l>.f32 [T, Hkv, D] (with
#       bias), for layers 0 (dense), 1 and 3 (MoE).
#   The numpy reference (glm4moe_forward below) recomputes every fixture from the written files: from
#   config.json + safetensors with transformers' rules, and from the GGUF with llama.cpp's rules (its keys and
#   defaults; the routing weights' sum clamped below instead of + 1e-20); the script fails if either misses
#   transformers' outputs by more than 1e-5 relative L2.
import argparse
import json
import math
import os
import sys

import numpy as np

NAME = "tiny-glm4-moe"
SEED = 45  # picked among 41..60: the only one whose closest routing decision is > 1e-3 from a tie (2.5e-3)
SEQ_LENS = [40, 24, 33]
LAYERS = [0, 1, 3]  # dense layer 0 and two MoE layers
TOL = 1e-5  # numpy reference (float64) against transformers (fp32): expected ~1e-7
MIN_MARGIN = 1e-3  # no routing decision of the fixtures may be closer to a tie than this

# transformers 5 Glm4MoeConfig arguments
TINY = dict(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, partial_rotary_factor=0.5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, hidden_act="silu",
            max_position_embeddings=256, rms_norm_eps=1e-5, use_qk_norm=True, attention_bias=True,
            first_k_dense_replace=1, moe_intermediate_size=24, n_shared_experts=1, n_routed_experts=8,
            num_experts_per_tok=2, n_group=2, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
            num_nextn_predict_layers=0, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
            pad_token_id=None)


def write_raw(path, arr, dtype):
    np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tofile(path)


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ---- the weights: the checkpoint layout of the Hub's GLM-4.5 (one tensor per expert) --------------------
def make_weights(kw, seed):
    rng = np.random.default_rng(seed)
    C, F, Fe, L, Hq, Hkv, D, V, E = (kw[k] for k in (
        "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "n_routed_experts"))
    lin = lambda o, i: rng.standard_normal((o, i)) / math.sqrt(i)  # noqa: E731  outputs O(1)
    vec = lambda n, s: s * rng.standard_normal(n)  # noqa: E731
    nrm = lambda n: 1.0 + vec(n, 0.2)  # noqa: E731
    sd = {"model.embed_tokens.weight": vec((V, C), 0.5), "model.norm.weight": nrm(C), "lm_head.weight": lin(V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": nrm(C), p + "post_attention_layernorm.weight": nrm(C),
                   p + "self_attn.q_proj.weight": lin(Hq * D, C), p + "self_attn.q_proj.bias": vec(Hq * D, 0.2),
                   p + "self_attn.k_proj.weight": lin(Hkv * D, C), p + "self_attn.k_proj.bias": vec(Hkv * D, 0.2),
                   p + "self_attn.v_proj.weight": lin(Hkv * D, C), p + "self_attn.v_proj.bias": vec(Hkv * D, 0.2),
                   p + "self_attn.o_proj.weight": lin(C, Hq * D), p + "self_attn.q_norm.weight": nrm(D),
                   p + "self_attn.k_norm.weight": nrm(D)})
        if i < kw["first_k_dense_replace"]:
            sd.update({p + "mlp.gate_proj.weight": lin(F, C), p + "mlp.up_proj.weight": lin(F, C),
                       p + "mlp.down_proj.weight": lin(C, F)})
            continue
        sd[p + "mlp.gate.weight"] = lin(E, C)
        # HF initialises the correction bias to 0; random and > 0 so it changes choices and every biased
        # score stays > 0 (then transformers' 0-fill of unchosen groups equals llama.cpp's exclusion)
        sd[p + "mlp.gate.e_score_correction_bias"] = rng.uniform(0.0, 0.3, E)
        for e in range(E):
            q = f"{p}mlp.experts.{e}."
            sd.update({q + "gate_proj.weight": lin(Fe, C), q + "up_proj.weight": lin(Fe, C),
                       q + "down_proj.weight": lin(C, Fe)})
        Fs = Fe * kw["n_shared_experts"]
        sd.update({p + "mlp.shared_experts.gate_proj.weight": lin(Fs, C),
                   p + "mlp.shared_experts.up_proj.weight": lin(Fs, C),
                   p + "mlp.shared_experts.down_proj.weight": lin(C, Fs)})
    sd = {k: np.asarray(v, np.float32) for k, v in sd.items()}
    seqs = [rng.integers(0, V, n).tolist() for n in SEQ_LENS]
    return sd, seqs


# ---- config.json -> what the forward pass needs (transformers' rules and defaults) ----------------------
def spec_from_hf(cfg):
    assert cfg["model_type"] == "glm4_moe", cfg.get("model_type")
    assert cfg.get("hidden_act", "silu") == "silu"
    rp = dict(cfg.get("rope_parameters") or {})
    rp.update({k: v for k, v in (cfg.get("rope_scaling") or {}).items() if k not in rp})
    assert rp.get("rope_type", rp.get("type", "default")) == "default", rp
    C, Hq = cfg["hidden_size"], cfg["num_attention_heads"]
    D = cfg.get("head_dim") or C // Hq
    # transformers 5 keeps partial_rotary_factor in rope_parameters; the Hub's configs have it top-level;
    # Glm4MoeConfig defaults it to 0.5
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.5))
    E, G = cfg.get("n_routed_experts", 128), cfg.get("n_group", 1)
    assert E % G == 0
    return dict(C=C, Hq=Hq, Hkv=cfg["num_key_value_heads"], D=D, n_rot=int(D * prf),
                theta=rp.get("rope_theta", cfg.get("rope_theta", 10000.0)), eps=cfg.get("rms_norm_eps", 1e-5),
                scale=D ** -0.5, dense_lead=cfg.get("first_k_dense_replace", 1), E=E,
                k=cfg.get("num_experts_per_tok", 8), groups=G, groups_used=cfg.get("topk_group", 1),
                norm_topk=cfg.get("norm_topk_prob", True), routed_scale=cfg.get("routed_scaling_factor", 1.0),
                rules="transformers")


def hf_tensors(sd, cfg):
    """config.json + safetensors -> the reference's tensors (per-expert or fused expert layouts)."""
    g = lambda k: sd[k].astype(np.float64) if k in sd else None  # noqa: E731
    L, E = cfg["num_hidden_layers"], cfg.get("n_routed_experts", 128)
    tied = cfg.get("tie_word_embeddings", False)
    out = {"embed": g("model.embed_tokens.weight"), "norm": g("model.norm.weight"),
           "output": g("model.embed_tokens.weight") if tied else g("lm_head.weight"), "layers": []}
    for i in range(L):
        p = f"model.layers.{i}."
        lw = {n: g(p + k) for n, k in (
            ("attn_norm", "input_layernorm.weight"), ("ffn_norm", "post_attention_layernorm.weight"),
            ("q", "self_attn.q_proj.weight"), ("q_b", "self_attn.q_proj.bias"), ("k", "self_attn.k_proj.weight"),
            ("k_b", "self_attn.k_proj.bias"), ("v", "self_attn.v_proj.weight"), ("v_b", "self_attn.v_proj.bias"),
            ("o", "self_attn.o_proj.weight"), ("q_norm", "self_attn.q_norm.weight"),
            ("k_norm", "self_attn.k_norm.weight"))}
        if i < cfg.get("first_k_dense_replace", 1):
            lw.update(gate=g(p + "mlp.gate_proj.weight"), up=g(p + "mlp.up_proj.weight"),
                      down=g(p + "mlp.down_proj.weight"))
        else:
            lw.update(router=g(p + "mlp.gate.weight"), corr=g(p + "mlp.gate.e_score_correction_bias"),
                      sh_gate=g(p + "mlp.shared_experts.gate_proj.weight"),
                      sh_up=g(p + "mlp.shared_experts.up_proj.weight"),
                      sh_down=g(p + "mlp.shared_experts.down_proj.weight"))
            if p + "mlp.experts.gate_up_proj" in sd:  # transformers 5's in-memory layout, if ever saved so
                gu, dn = g(p + "mlp.experts.gate_up_proj"), g(p + "mlp.experts.down_proj")
                lw["gate_exps"], lw["up_exps"] = np.split(gu, 2, axis=1)
                lw["down_exps"] = dn
            else:
                for n in ("gate", "up", "down"):
                    lw[n + "_exps"] = np.stack([g(f"{p}mlp.experts.{e}.{n}_proj.weight") for e in range(E)])
            if lw["corr"] is None:
                lw["corr"] = np.zeros(E)  # transformers' buffer default
        out["layers"].append(lw)
    return out


def per_expert(sd, cfg):
    """A checkpoint with one tensor per expert (the converter's input) from either layout."""
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj") or k.endswith("mlp.experts.down_proj"):
            pre = k.rsplit("experts.", 1)[0] + "experts."
            parts = np.split(v, 2, axis=1) if k.endswith("gate_up_proj") else [v]
            for n, a in zip(("gate", "up") if len(parts) == 2 else ("down",), parts):
                for e in range(a.shape[0]):
                    out[f"{pre}{e}.{n}_proj.weight"] = a[e]
        else:
            out[k] = v
    if cfg.get("tie_word_embeddings", False):
        out.setdefault("lm_head.weight", out["model.embed_tokens.weight"])
    return out


# ---- GGUF, as llama.cpp's converter lays it out, and llama.cpp's reading of it ------------------------
ATTN_NAMES = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
              "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
              "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
              "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
              "self_attn.k_norm.weight": "attn_k_norm.weight"}
DENSE_NAMES = {"mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
               "mlp.down_proj.weight": "ffn_down.weight"}
MOE_NAMES = {"mlp.gate.weight": "ffn_gate_inp.weight",
             # the converter renames e_score_correction_bias to e_score_correction.bias before mapping
             "mlp.gate.e_score_correction.bias": "exp_probs_b.bias",
             "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
             "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
             "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
             "mlp.experts.gate_proj.weight": "ffn_gate_exps.weight", "mlp.experts.up_proj.weight": "ffn_up_exps.weight",
             "mlp.experts.down_proj.weight": "ffn_down_exps.weight"}


def write_gguf(path, cfg, sd):
    import gguf
    L, E = cfg["num_hidden_layers"], cfg["n_routed_experts"]
    # the converter's own mapping must agree with the tables above
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GLM4_MOE, L)
    for k, g in {**ATTN_NAMES, **DENSE_NAMES, **MOE_NAMES}.items():
        got = tmap.get_name(f"model.layers.0.{k}", try_suffixes=(".weight", ".bias"))
        assert got == f"blk.0.{g}", (k, got, g)
    for k, g in (("model.embed_tokens.weight", "token_embd.weight"), ("model.norm.weight", "output_norm.weight"),
                 ("lm_head.weight", "output.weight")):
        assert tmap.get_name(k, try_suffixes=(".weight",)) == g
    spec = spec_from_hf(cfg)
    w = gguf.GGUFWriter(path, "glm4moe")
    w.add_name(os.path.basename(path)[:-5])
    w.add_block_count(L)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(float(spec["theta"]))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_group_count(cfg["n_group"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_key_length(spec["D"])
    w.add_value_length(spec["D"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_rope_dimension_count(spec["n_rot"])  # head_dim * partial_rotary_factor
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(float(cfg["routed_scaling_factor"]))
    w.add_expert_weights_norm(bool(cfg["norm_topk_prob"]))
    w.add_nextn_predict_layers(cfg.get("num_nextn_predict_layers", 0))

    def put(name, t):
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"])
    put("output.weight", sd["lm_head.weight"])
    for i in range(L):
        p = f"model.layers.{i}."
        for k, g in ATTN_NAMES.items():
            put(f"blk.{i}.{g}", sd[p + k])
        if i < cfg["first_k_dense_replace"]:
            for k, g in DENSE_NAMES.items():
                put(f"blk.{i}.{g}", sd[p + k])
            continue
        for k, g in MOE_NAMES.items():
            if ".experts." in k:  # stacked: [E, rows, cols] (ggml ne = [cols, rows, E])
                n = k.split(".")[2]
                put(f"blk.{i}.{g}", np.stack([sd[f"{p}mlp.experts.{e}.{n}.weight"] for e in range(E)]))
            else:
                put(f"blk.{i}.{g}", sd[p + k.replace("e_score_correction.bias", "e_score_correction_bias")])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_gguf(path):
    """llama.cpp's view of the file (llama_model_glm4_moe): tensors and the spec its graph runs."""
    import gguf
    r = gguf.GGUFReader(path)
    kv = {f.name: f for f in r.fields.values()}

    def val(key, default=None):
        f = kv.get("glm4moe." + key) if not key.startswith("general.") else kv.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v.tolist()[0]

    assert val("general.architecture") == "glm4moe"
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).reshape([int(n) for n in x.shape[::-1]])
         .astype(np.float64) for x in r.tensors}
    C, Hq, L = val("embedding_length"), val("attention.head_count"), val("block_count")
    D = val("attention.key_length", C // Hq)
    assert val("attention.value_length", D) == D
    gating = val("expert_gating_func", 0)
    assert gating in (0, 2), gating  # none -> sigmoid for glm4moe
    ws = val("expert_weights_scale", 0.0)
    spec = dict(C=C, Hq=Hq, Hkv=val("attention.head_count_kv", Hq), D=D, n_rot=val("rope.dimension_count", D),
                theta=val("rope.freq_base", 10000.0), eps=val("attention.layer_norm_rms_epsilon"),
                scale=1.0 / math.sqrt(D), dense_lead=val("leading_dense_block_count", 0), E=val("expert_count"),
                k=val("expert_used_count"), groups=max(val("expert_group_count", 0), 1),
                groups_used=val("expert_group_used_count", 0), norm_topk=bool(val("expert_weights_norm", False)),
                routed_scale=ws if ws != 0.0 else 1.0, rules="llama.cpp")
    n_shared = val("expert_shared_count")
    g = lambda n: t.get(n)  # noqa: E731  optional tensors are None
    out = {"embed": t["token_embd.weight"], "norm": t["output_norm.weight"],
           "output": t.get("output.weight", t["token_embd.weight"]), "layers": []}
    for i in range(L):
        b = f"blk.{i}."
        lw = {n: g(b + k) for n, k in (
            ("attn_norm", "attn_norm.weight"), ("ffn_norm", "post_attention_norm.weight"), ("q", "attn_q.weight"),
            ("q_b", "attn_q.bias"), ("k", "attn_k.weight"), ("k_b", "attn_k.bias"), ("v", "attn_v.weight"),
            ("v_b", "attn_v.bias"), ("o", "attn_output.weight"), ("q_norm", "attn_q_norm.weight"),
            ("k_norm", "attn_k_norm.weight"))}
        if i < spec["dense_lead"]:
            lw.update(gate=t[b + "ffn_gate.weight"], up=t[b + "ffn_up.weight"], down=t[b + "ffn_down.weight"])
        else:
            lw.update(router=t[b + "ffn_gate_inp.weight"], corr=t[b + "exp_probs_b.bias"],
                      gate_exps=t[b + "ffn_gate_exps.weight"], up_exps=t[b + "ffn_up_exps.weight"],
                      down_exps=t[b + "ffn_down_exps.weight"], sh_gate=None, sh_up=None, sh_down=None)
            if n_shared:
                lw.update(sh_gate=t[b + "ffn_gate_shexp.weight"], sh_up=t[b + "ffn_up_shexp.weight"],
                          sh_down=t[b + "ffn_down_shexp.weight"])
        out["layers"].append(lw)
    return spec, out


# ---- numpy reference forward (float64) -----------------------------------------------------------------
def silu(x):
    return x / (1.0 + np.exp(-x))


def route(spec, lw, h):
    """Expert ids [T, k], weights [T, k] and the smallest margin of a routing decision."""
    T, E, k, G = h.shape[0], spec["E"], spec["k"], spec["groups"]
    scores = 1.0 / (1.0 + np.exp(-(h @ lw["router"].T)))  # sigmoid
    choice = scores + lw["corr"][None, :]  # the bias only steers the choice
    margin = np.inf
    if G > 1:
        grp = choice.reshape(T, G, E // G)
        gscore = np.sort(grp, axis=-1)[..., -2:].sum(-1)  # sum of each group's top-2
        order = np.argsort(-gscore, axis=-1, kind="stable")
        gs = np.take_along_axis(gscore, order, -1)
        margin = min(margin, float((gs[:, spec["groups_used"] - 1] - gs[:, spec["groups_used"]]).min()))
        keep = np.zeros((T, G), bool)
        np.put_along_axis(keep, order[:, :spec["groups_used"]], True, -1)
        keep = np.repeat(keep, E // G, axis=1)
        # transformers 5.17 fills the other groups with -inf, llama.cpp picks among the chosen groups only: the
        # same; transformers before 5 filled with 0.0, the same only while every biased score is > 0
        assert (choice > 0).all()
        choice = np.where(keep, choice, -np.inf)
    idx = np.argsort(-choice, axis=-1, kind="stable")
    cs = np.take_along_axis(choice, idx, -1)
    if k < E:
        margin = min(margin, float((cs[:, k - 1] - cs[:, k]).min()))
    idx = idx[:, :k]
    wts = np.take_along_axis(scores, idx, -1)
    if spec["norm_topk"]:
        s = wts.sum(-1, keepdims=True)
        wts = wts / (s + 1e-20 if spec["rules"] == "transformers" else np.maximum(s, 6.103515625e-5))
    return idx, wts * spec["routed_scale"], margin


def glm4moe_forward(spec, w, tokens):
    """One sequence (positions 0..T-1): logits [T, V], {layer: (q, k, v)}, smallest routing margin."""
    Hq, Hkv, D, R, eps = spec["Hq"], spec["Hkv"], spec["D"], spec["n_rot"], spec["eps"]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    inv = spec["theta"] ** (-np.arange(0, R, 2, dtype=np.float64) / R)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(a):  # NEOX / rotate_half on the first R dims: pairs (i, i + R/2); the rest passes through
        a1, a2, rest = a[..., : R // 2], a[..., R // 2: R], a[..., R:]
        return np.concatenate([a1 * cos - a2 * sin, a2 * cos + a1 * sin, rest], axis=-1)

    def lin(x, wt, b):
        return x @ wt.T + (b if b is not None else 0.0)

    x = w["embed"][tokens]
    qkv, margin = {}, np.inf
    for i, lw in enumerate(w["layers"]):
        h = rms(x, lw["attn_norm"])
        q = lin(h, lw["q"], lw["q_b"]).reshape(T, Hq, D)
        k = lin(h, lw["k"], lw["k_b"]).reshape(T, Hkv, D)
        v = lin(h, lw["v"], lw["v_b"]).reshape(T, Hkv, D)
        if lw["q_norm"] is not None:
            q = rms(q, lw["q_norm"])
        if lw["k_norm"] is not None:
            k = rms(k, lw["k_norm"])
        q, k = rope(q), rope(k)
        qkv[i] = (q, k, v)
        rep = Hq // Hkv
        s = np.einsum("thd,shd->hts", q, np.repeat(k, rep, axis=1)) * spec["scale"]
        s = np.where((pos[:, None] >= pos[None, :])[None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", p, np.repeat(v, rep, axis=1)).reshape(T, Hq * D)
        x = x + o @ lw["o"].T
        h = rms(x, lw["ffn_norm"])
        if i < spec["dense_lead"]:
            x = x + (silu(h @ lw["gate"].T) * (h @ lw["up"].T)) @ lw["down"].T
            continue
        idx, wts, m = route(spec, lw, h)
        margin = min(margin, m)
        y = np.zeros_like(h)
        for t in range(T):
            for j in range(idx.shape[1]):
                e = idx[t, j]
                y[t] += wts[t, j] * ((silu(lw["gate_exps"][e] @ h[t]) * (lw["up_exps"][e] @ h[t])) @ lw["down_exps"][e].T)
        if lw["sh_gate"] is not None:
            y = y + (silu(h @ lw["sh_gate"].T) * (h @ lw["sh_up"].T)) @ lw["sh_down"].T
        x = x + y
    return rms(x, w["norm"]) @ w["output"].T, qkv, margin


def reference(spec, w, seqs):
    outs = [glm4moe_forward(spec, w, np.asarray(s)) for s in seqs]
    logits = np.concatenate([o[0] for o in outs])
    qkv = {l: tuple(np.concatenate([o[1][l][j] for o in outs]) for j in range(3)) for l in outs[0][1]}
    return logits, qkv, min(o[2] for o in outs)


def check(name, spec, w, seqs, logits, qkv, tol=TOL):
    lg, ref_qkv, margin = reference(spec, w, seqs)
    e = rel_l2(lg, logits)
    eq = max(max(rel_l2(ref_qkv[l][j], qkv[l][j]) for j in range(3)) for l in qkv)
    print(f"{name}: numpy reference logits rel-L2 {e:.2e}, q/k/v max {eq:.2e}, min routing margin {margin:.2e}",
          file=sys.stderr)
    assert e < tol and eq < tol, (name, e, eq)
    assert margin > MIN_MARGIN, (name, "a routing decision is too close to a tie", margin)
    return margin


def hf_config(kw):
    """config.json as transformers 5.17 saves this config (the --no-torch stand-in; torch mode saves its own and
    reports any difference): partial_rotary_factor both top-level and in rope_parameters."""
    cfg = dict(kw, rope_parameters=dict(kw["rope_parameters"], partial_rotary_factor=kw["partial_rotary_factor"]))
    cfg.update(architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe", attention_dropout=0.0,
               initializer_range=0.02, use_cache=True, dtype="float32", transformers_version="5.17.0")
    return dict(sorted(cfg.items()))


# ---- with transformers ---------------------------------------------------------------------------------
CAPTURED = {}


def model_state(model_sd, sd):
    """Our per-expert checkpoint -> the model's own state dict (transformers 5 fuses experts in memory)."""
    import torch
    out, used = {}, set()
    for key, ref in model_sd.items():
        if key in sd:
            a = sd[key]
            used.add(key)
        elif key.endswith("mlp.experts.gate_up_proj") or key.endswith("mlp.experts.down_proj"):
            pre, E = key.rsplit("experts.", 1)[0] + "experts.", TINY["n_routed_experts"]
            parts = ("gate", "up") if key.endswith("gate_up_proj") else ("down",)
            names = [[f"{pre}{e}.{n}_proj.weight" for n in parts] for e in range(E)]
            a = np.stack([np.concatenate([sd[n] for n in ns], axis=0) for ns in names])
            used.update(n for ns in names for n in ns)
            if tuple(ref.shape) != a.shape and tuple(ref.shape) == (a.shape[0], a.shape[2], a.shape[1]):
                a = a.transpose(0, 2, 1)  # a layout of [E, in, out]
        else:
            raise KeyError(f"model tensor {key} has no counterpart in the generated weights")
        assert tuple(ref.shape) == a.shape, (key, tuple(ref.shape), a.shape)
        out[key] = torch.from_numpy(np.ascontiguousarray(a)).to(ref.dtype)
    left = set(sd) - used
    assert not left, f"generated weights the model does not have: {sorted(left)[:5]}"
    return out


def make_with_torch(out):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, Glm4MoeConfig
    import transformers.models.glm4_moe.modeling_glm4_moe as m_glm4moe
    from safetensors.numpy import load_file

    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "transformers": transformers.__version__, "numpy": np.__version__}
    try:
        from importlib.metadata import version as _v
        versions["gguf"] = _v("gguf")
        versions["safetensors"] = _v("safetensors")
    except Exception:  # noqa: BLE001
        pass
    print(json.dumps(versions), file=sys.stderr)
    torch.set_num_threads(4)

    orig = m_glm4moe.eager_attention_forward

    def capture(module, query, key, value, attention_mask, *args, **kwargs):
        # query [B, Hq, T, D] after bias, q_norm and partial RoPE, before the scale; key / value [B, Hkv, T, D]
        CAPTURED[module.layer_idx] = tuple(t[0].transpose(0, 1).detach().float().numpy().copy()
                                           for t in (query, key, value))
        return orig(module, query, key, value, attention_mask, *args, **kwargs)

    m_glm4moe.eager_attention_forward = capture

    def run(model, seqs):
        logits, qkv = [], {l: ([], [], []) for l in LAYERS}
        for s in seqs:
            CAPTURED.clear()
            with torch.no_grad():
                o = model(input_ids=torch.tensor([s], dtype=torch.long), use_cache=False)
            logits.append(o.logits[0].float().numpy())
            for l in LAYERS:
                for j in range(3):
                    qkv[l][j].append(CAPTURED[l][j])
        return np.concatenate(logits), {l: tuple(np.concatenate(x) for x in qkv[l]) for l in LAYERS}

    sd, seqs = make_weights(TINY, SEED)
    cfg = Glm4MoeConfig(**TINY)
    try:  # the plain per-expert loop where this transformers has a choice of expert kernels
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", experts_implementation="eager",
                                                 dtype=torch.float32).eval()
    except (TypeError, ValueError) as e:
        print(f"experts_implementation not taken ({e}); the default", file=sys.stderr)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32).eval()
    assert type(model).__name__ == "Glm4MoeForCausalLM", type(model)
    assert type(model.model.layers[0].mlp).__name__ == "Glm4MoeMLP", type(model.model.layers[0].mlp)
    assert type(model.model.layers[1].mlp).__name__ == "Glm4MoeMoE", type(model.model.layers[1].mlp)
    model.load_state_dict(model_state(model.state_dict(), sd), strict=True)
    mdir = os.path.join(out, "models", NAME)
    model.save_pretrained(mdir, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(mdir, extra)):
            os.remove(os.path.join(mdir, extra))
    with open(os.path.join(mdir, "config.json")) as f:
        saved = json.load(f)
    want = hf_config(TINY)
    diff = {k: (saved.get(k), want.get(k)) for k in saved.keys() | want.keys() if saved.get(k) != want.get(k)}
    print(f"config.json differences from the --no-torch stand-in: {diff or 'none'}", file=sys.stderr)
    logits, qkv = run(model, seqs)
    # the saved directory reproduces them
    again = AutoModelForCausalLM.from_pretrained(mdir, attn_implementation="eager", dtype=torch.float32).eval()
    lg2, _ = run(again, seqs)
    assert rel_l2(lg2, logits) < 1e-6, rel_l2(lg2, logits)

    fdir = os.path.join(out, "forward", NAME)
    os.makedirs(fdir, exist_ok=True)
    write_raw(os.path.join(fdir, "tokens.i32"), np.concatenate(seqs), np.int32)
    write_raw(os.path.join(fdir, "seq_start.i32"), np.cumsum([0] + SEQ_LENS), np.int32)
    write_raw(os.path.join(fdir, "pos.i32"), np.concatenate([np.arange(n) for n in SEQ_LENS]), np.int32)
    write_raw(os.path.join(fdir, "logits.f32"), logits, np.float32)
    for l in LAYERS:
        for j, c in enumerate("qkv"):
            write_raw(os.path.join(fdir, f"{c}{l}.f32"), qkv[l][j], np.float32)

    # what oscar will read: the saved files, through transformers' rules and (GGUF) llama.cpp's, against the
    # fixture files as written
    rd = lambda n, shape: np.fromfile(os.path.join(fdir, n), "<f4").reshape(shape)  # noqa: E731
    T, Hq, Hkv, D = sum(SEQ_LENS), TINY["num_attention_heads"], TINY["num_key_value_heads"], TINY["head_dim"]
    logits = rd("logits.f32", (T, TINY["vocab_size"]))
    qkv = {l: (rd(f"q{l}.f32", (T, Hq, D)), rd(f"k{l}.f32", (T, Hkv, D)), rd(f"v{l}.f32", (T, Hkv, D)))
           for l in LAYERS}
    ssd = load_file(os.path.join(mdir, "model.safetensors"))
    spec = spec_from_hf(saved)
    assert (spec["D"], spec["n_rot"], spec["groups"], spec["routed_scale"]) == (32, 16, 2, 2.5), spec
    margin = check(NAME, spec, hf_tensors(ssd, saved), seqs, logits, qkv)
    gpath = os.path.join(out, "models", NAME + ".gguf")
    write_gguf(gpath, saved, per_expert(ssd, saved))
    gspec, gw = read_gguf(gpath)
    check(NAME + ".gguf", gspec, gw, seqs, logits, qkv)
    index = {"n_tokens": int(sum(SEQ_LENS)), "n_seq": len(SEQ_LENS), "layers": LAYERS,
             "logits_shape": list(logits.shape), "versions": versions, "model": f"tests/fixtures/models/{NAME}",
             "seed": SEED, "weights_dtype": "float32", "same_weights": [f"tests/fixtures/models/{NAME}.gguf"],
             "min_routing_margin": margin}
    with open(os.path.join(fdir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print(f"{NAME}: {sum(p.numel() for p in model.parameters())} params, T={sum(SEQ_LENS)}", file=sys.stderr)


# ---- without torch: the same files from the same numpy weights (checks the writers and the readers) ----
def make_without_torch(out):
    from safetensors.numpy import load_file, save_file
    sd, seqs = make_weights(TINY, SEED)
    cfg = hf_config(TINY)
    mdir = os.path.join(out, "models", NAME)
    os.makedirs(mdir, exist_ok=True)
    save_file(sd, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)  # as transformers writes it
        f.write("\n")
    back = load_file(os.path.join(mdir, "model.safetensors"))
    assert back.keys() == sd.keys() and all(np.array_equal(back[k], sd[k]) for k in sd)
    gpath = os.path.join(out, "models", NAME + ".gguf")
    write_gguf(gpath, cfg, back)
    spec = spec_from_hf(cfg)
    assert (spec["D"], spec["n_rot"], spec["groups"], spec["groups_used"], spec["routed_scale"]) == (32, 16, 2, 1, 2.5)
    w = hf_tensors(back, cfg)
    lg, qkv, margin = reference(spec, w, seqs)
    gspec, gw = read_gguf(gpath)
    # the GGUF stores eps as f32 (llama.cpp computes in f32 anyway): floats agree to f32 precision
    same = lambda a, b: a == b if not isinstance(a, float) else abs(a - b) <= 1e-7 * abs(b)  # noqa: E731
    assert gspec.keys() == spec.keys() and all(same(gspec[k], spec[k]) for k in spec if k != "rules"), (gspec, spec)
    check(NAME + ".gguf (numpy)", gspec, gw, seqs, lg, qkv, tol=1e-10)
    print(f"min routing margin {margin:.2e} (fixture sequences; must exceed {MIN_MARGIN:g})", file=sys.stderr)
    assert margin > MIN_MARGIN, margin
    # the reference must see each GLM feature: switching one off moves the logits
    no = lambda names: [{**lw, **{n: None for n in names if n in lw}} for lw in w["layers"]]  # noqa: E731
    alts = (("correction bias", spec, dict(w, layers=[dict(lw, corr=0 * lw["corr"]) if "corr" in lw else lw
                                                      for lw in w["layers"]])),
            ("grouped top-k", dict(spec, groups=1), w), ("routed scaling", dict(spec, routed_scale=1.0), w),
            ("norm_topk_prob", dict(spec, norm_topk=False), w),
            ("shared expert", spec, dict(w, layers=no(["sh_gate"]))),
            ("partial rotary (full instead)", dict(spec, n_rot=spec["D"]), w),
            ("qk-norm", spec, dict(w, layers=no(["q_norm", "k_norm"]))),
            ("attention bias", spec, dict(w, layers=no(["q_b", "k_b", "v_b"]))))
    for what, s2, w2 in alts:
        e = rel_l2(reference(s2, w2, seqs)[0], lg)
        print(f"numpy reference without {what}: logits rel-L2 {e:.2e}", file=sys.stderr)
        assert e > 1e3 * TOL, what
    # a checkpoint with transformers 5's fused in-memory expert layout reads as the same model
    fused = {k: v for k, v in back.items() if ".experts." not in k}
    for i in range(TINY["first_k_dense_replace"], TINY["num_hidden_layers"]):
        p = f"model.layers.{i}.mlp.experts."
        ex = lambda n: np.stack([back[f"{p}{e}.{n}_proj.weight"] for e in range(TINY["n_routed_experts"])])  # noqa: E731
        fused[p + "gate_up_proj"] = np.concatenate([ex("gate"), ex("up")], axis=1)
        fused[p + "down_proj"] = ex("down")
    wf = hf_tensors(fused, cfg)
    assert all(np.array_equal(wf["layers"][i][n], w["layers"][i][n]) for i in range(1, 4)
               for n in ("gate_exps", "up_exps", "down_exps"))
    pe = per_expert(fused, cfg)
    assert pe.keys() == back.keys() and all(np.array_equal(pe[k], back[k]) for k in back)
    # the Hub's keys (top-level rope_theta / partial_rotary_factor) give the same spec
    hub = {k: v for k, v in cfg.items() if k != "rope_parameters"}
    hub.update(rope_theta=10000.0, partial_rotary_factor=0.5)
    assert spec_from_hf(hub) == spec
    assert spec_from_hf({k: v for k, v in hub.items() if k != "partial_rotary_factor"})["n_rot"] == 16  # default 0.5
    print(f"--no-torch: wrote {mdir} and {gpath} (no forward fixtures)", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description="GLM-4.x MoE fixtures (see the header)")
    ap.add_argument("--out", required=True, help="output folder: models/ and forward/ are made in it")
    ap.add_argument("--no-torch", action="store_true", help="check the writers with numpy weights only")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.no_torch:
        make_without_torch(a.out)
    else:
        try:
            import torch, transformers  # noqa: E401, F401
        except ImportError as e:
            sys.exit(f"make_glm4moe_fixtures.py: the torch mode needs torch and transformers ({e}); "
                     "without them run it with --no-torch")
        make_with_torch(a.out)


if __name__ == "__main__":
    main()
