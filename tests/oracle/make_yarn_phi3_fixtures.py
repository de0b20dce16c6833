#!/usr/bin/env python3
# make_yarn_phi3_fixtures.py - fixtures for YaRN RoPE scaling (tiny-qwen3-yarn, config.json and GGUF) and for
# Phi-3 from GGUF (tiny-phi3.gguf, checked against the existing tiny-phi3 transformers fixture). Issue 14.
#
# The weights are made here with numpy (fixed seed), transformers only runs them:
#
#   1. python3 tests/oracle/make_yarn_phi3_fixtures.py weights --out DIR
#        DIR/models/tiny-qwen3-yarn/{config.json,model.safetensors}: qwen3, float32, hidden 64, 4 heads / 2 KV
#        heads, head_dim 32 (!= hidden / heads), 3 layers, vocab 128, tied, rope_theta 1e4 with rope_parameters
#        {rope_type yarn, factor 4, original_max_position_embeddings 64} and max_position_embeddings 256: with
#        beta_fast 32 / beta_slow 1 the correction range is dims [0, 5] of 16 frequencies (0 kept, 1-4 on the
#        ramp, 5-15 divided by 4) and cos/sin are scaled by 0.1 ln 4 + 1 = 1.1386. Sequences of 100, 40 and 80
#        tokens: two are longer than the original context, so the scaling matters.
#   2. on a machine with torch + transformers 5 (the GPU machine; its CPU is enough):
#      python3 tests/oracle/make_yarn_phi3_fixtures.py torch --out DIR --pack OUT/yarn-fixtures.npz
#        loads DIR/models/tiny-qwen3-yarn with transformers (eager attention, fp32), runs each sequence alone,
#        captures q/k (after q_norm/k_norm and RoPE, before the score scale) and v at layers 0, 1, 2 (the
#        module-level eager_attention_forward wrapped), checks the numpy reference below against them (rel-L2
#        < 1e-5) and that transformers' rotary embedding has the inverse frequencies and attention scaling of
#        the reference, re-saves config.json as transformers writes it, and packs everything into one .npz.
#   3. python3 tests/oracle/make_yarn_phi3_fixtures.py unpack --out DIR --pack yarn-fixtures.npz
#        writes DIR/forward/tiny-qwen3-yarn/ (make_model_fixtures.py's format: tokens.i32, seq_start.i32, pos.i32,
#        logits.f32 [T, V], q<l>.f32 [T, Hq, D], k<l>.f32 / v<l>.f32 [T, Hkv, D], index.json) and the config.
#   4. python3 tests/oracle/make_yarn_phi3_fixtures.py gguf --out DIR [--fixtures tests/fixtures]
#        DIR/models/tiny-qwen3-yarn.gguf as llama.cpp's converter writes qwen3 with YaRN (rope.scaling.type yarn,
#        rope.scaling.factor, rope.scaling.original_context_length; no beta / attention keys since the config
#        has none), and DIR/models/tiny-phi3.gguf from tests/fixtures/models/tiny-phi3 as the converter's
#        Phi3MiniModel writes it (attn_qkv and ffn_up = gate | up fused as stored, no q/k permutation, keys
#        rope.dimension_count = int(partial_rotary_factor * n_embd) // n_head, rope.scaling.original_context_length,
#        attention.sliding_window). Each GGUF is read back the way llama.cpp reads it and run through the numpy
#        reference against the transformers fixtures in --fixtures (rel-L2 < 1e-5); controls (the reference with
#        yarn's attention factor dropped, yarn as linear scaling, phi3's gate / up halves swapped) must miss.
#
# `gguf` needs the gguf package (pip install gguf); `weights`, `unpack` and `gguf` need numpy and safetensors
# only. Versions used are recorded in index.json.
import argparse
import json
import math
import os
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOL = 1e-5  # float64 reference vs transformers' fp32: expected ~1e-7
SEQ_LENS = [100, 40, 80]
LAYERS = [0, 1, 2]
NAME = "tiny-qwen3-yarn"
SEED = 41
YARN_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 128,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False,
    "hidden_act": "silu", "use_sliding_window": False, "sliding_window": None,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                        "original_max_position_embeddings": 64},
    "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "torch_dtype": "float32",
}


def write_raw(path, arr, dtype):
    np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tofile(path)


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ---- RoPE as transformers 5 computes it (modeling_rope_utils), in float64 --------------------------------
def yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_tables(rp, R, max_pos):
    """inv_freq [R/2] and the cos/sin factor of a rope_parameters dict (default, linear, yarn)."""
    base = rp["rope_theta"]
    pos_freqs = base ** (np.arange(0, R, 2, dtype=np.float64) / R)
    kind = rp.get("rope_type", "default")
    if kind == "default":
        return 1.0 / pos_freqs, 1.0
    factor = rp["factor"]
    if kind == "linear":
        return 1.0 / pos_freqs / factor, 1.0
    assert kind == "yarn", kind
    orig = rp.get("original_max_position_embeddings", max_pos)
    att = rp.get("attention_factor")
    if att is None:
        ms, ms_all = rp.get("mscale"), rp.get("mscale_all_dim")
        att = yarn_mscale(factor, ms) / yarn_mscale(factor, ms_all) if ms and ms_all else yarn_mscale(factor)
    fast, slow = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

    def corr_dim(n_rot):  # the dim at which a frequency turns n_rot times over the original context
        return R * math.log(orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = corr_dim(fast), corr_dim(slow)
    if rp.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, R - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(R // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrap = 1.0 - ramp  # weight of the unscaled frequency
    return (1.0 / (factor * pos_freqs)) * (1 - extrap) + (1.0 / pos_freqs) * extrap, att


# ---- numpy reference forward (float64): qwen3 (q/k norms) and phi3 (fused, partial rotary, window) ------
def forward(spec, w, tokens):
    C, Hq, Hkv, D, R, eps = spec["C"], spec["Hq"], spec["Hkv"], spec["D"], spec["R"], spec["eps"]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    ang = pos[:, None] * spec["inv_freq"][None, :]
    cos, sin = (np.cos(ang) * spec["att"])[:, None, :], (np.sin(ang) * spec["att"])[:, None, :]

    def rope(a):  # half-split pairs (i, i + R/2) over the first R dims, the rest passes
        a1, a2, rest = a[..., : R // 2], a[..., R // 2: R], a[..., R:]
        return np.concatenate([a1 * cos - a2 * sin, a2 * cos + a1 * sin, rest], axis=-1)
    x = w["embed"][tokens]
    qkv = {}
    for i, lw in enumerate(w["layers"]):
        h = rms(x, lw["attn_norm"])
        q, k, v = ((h @ lw[n].T).reshape(T, -1, D) for n in "qkv")
        if "q_norm" in lw:
            q, k = rms(q, lw["q_norm"]), rms(k, lw["k_norm"])
        q, k = rope(q), rope(k)
        qkv[i] = (q, k, v)
        rep = Hq // Hkv
        s = np.einsum("thd,shd->hts", q, np.repeat(k, rep, axis=1)) / math.sqrt(D)
        dq = pos[:, None] - pos[None, :]
        allowed = (dq >= 0) & ((dq < spec["window"]) if spec["window"] else True)
        s = np.where(allowed[None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", p, np.repeat(v, rep, axis=1)).reshape(T, Hq * D)
        x = x + o @ lw["o"].T
        h = rms(x, lw["ffn_norm"])
        g = h @ lw["gate"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ lw["up"].T)) @ lw["down"].T
    return rms(x, w["norm"]) @ w["head"].T, qkv


def reference(spec, w, seqs):
    outs = [forward(spec, w, np.asarray(s)) for s in seqs]
    logits = np.concatenate([o[0] for o in outs])
    qkv = {l: tuple(np.concatenate([o[1][l][j] for o in outs]) for j in range(3)) for l in outs[0][1]}
    return logits, qkv


def check(name, spec, w, seqs, logits, qkv):
    lg, ref = reference(spec, w, seqs)
    e = rel_l2(lg, logits)
    eq = max(max(rel_l2(ref[l][j], qkv[l][j]) for j in range(3)) for l in qkv)
    print(f"{name}: numpy reference logits rel-L2 {e:.2e}, q/k/v max {eq:.2e}", file=sys.stderr)
    assert e < TOL and eq < TOL, (name, e, eq)


def must_miss(name, what, spec, w, seqs, logits):
    e = rel_l2(reference(spec, w, seqs)[0], logits)
    print(f"{name} {what}: numpy reference logits rel-L2 {e:.2e} (must miss)", file=sys.stderr)
    assert e > 100 * TOL, (name, what, e)


# ---- config.json / safetensors -> spec and weights, as transformers reads them -------------------------
def hf_spec(cfg):
    mt = cfg["model_type"]
    C, Hq = cfg["hidden_size"], cfg["num_attention_heads"]
    D = cfg.get("head_dim") or C // Hq
    rp = dict(cfg.get("rope_parameters") or {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 1e4)})
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    R = int(D * prf)
    if "original_max_position_embeddings" in cfg:  # transformers: the top-level key wins (phi3)
        rp["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    inv, att = rope_tables(rp, R, cfg["max_position_embeddings"])
    return dict(arch=mt, C=C, Hq=Hq, Hkv=cfg["num_key_value_heads"], D=D, R=R, eps=cfg["rms_norm_eps"],
                window=cfg.get("sliding_window") or 0 if mt == "phi3" else 0, inv_freq=inv, att=att)


def hf_weights(cfg, sd):
    g = lambda k: sd[k].astype(np.float64)  # noqa: E731
    C, Hq = cfg["hidden_size"], cfg["num_attention_heads"]
    D = cfg.get("head_dim") or C // Hq
    Q, KV, F = Hq * D, cfg["num_key_value_heads"] * D, cfg["intermediate_size"]
    out = {"embed": g("model.embed_tokens.weight"), "norm": g("model.norm.weight"), "layers": []}
    out["head"] = out["embed"] if cfg.get("tie_word_embeddings") else g("lm_head.weight")
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        lw = {"attn_norm": g(p + "input_layernorm.weight"), "o": g(p + "self_attn.o_proj.weight"),
              "ffn_norm": g(p + "post_attention_layernorm.weight"), "down": g(p + "mlp.down_proj.weight")}
        if cfg["model_type"] == "phi3":  # Phi3Attention / Phi3MLP slice the fused projections
            qkv, gu = g(p + "self_attn.qkv_proj.weight"), g(p + "mlp.gate_up_proj.weight")
            lw.update(q=qkv[:Q], k=qkv[Q:Q + KV], v=qkv[Q + KV:], gate=gu[:F], up=gu[F:])
        else:
            lw.update({n: g(p + f"self_attn.{n}_proj.weight") for n in "qkv"})
            lw.update(gate=g(p + "mlp.gate_proj.weight"), up=g(p + "mlp.up_proj.weight"))
            lw.update(q_norm=g(p + "self_attn.q_norm.weight"), k_norm=g(p + "self_attn.k_norm.weight"))
        out["layers"].append(lw)
    return out


def make_weights(out):
    from safetensors.numpy import save_file
    cfg = YARN_CONFIG
    rng = np.random.default_rng(SEED)
    C, F, L, V, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"], \
        cfg["head_dim"]
    Q, KV = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    r = lambda *s: (0.08 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    nrm = lambda n: (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)  # noqa: E731
    sd = {"model.embed_tokens.weight": (0.5 * rng.standard_normal((V, C))).astype(np.float32),
          "model.norm.weight": nrm(C)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": nrm(C), p + "self_attn.q_proj.weight": r(Q, C),
                   p + "self_attn.k_proj.weight": r(KV, C), p + "self_attn.v_proj.weight": r(KV, C),
                   p + "self_attn.o_proj.weight": r(C, Q), p + "self_attn.q_norm.weight": nrm(D),
                   p + "self_attn.k_norm.weight": nrm(D), p + "post_attention_layernorm.weight": nrm(C),
                   p + "mlp.gate_proj.weight": r(F, C), p + "mlp.up_proj.weight": r(F, C),
                   p + "mlp.down_proj.weight": r(C, F)})
    mdir = os.path.join(out, "models", NAME)
    os.makedirs(mdir, exist_ok=True)
    save_file(sd, os.path.join(mdir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    seqs = [rng.integers(0, V, n).tolist() for n in SEQ_LENS]
    with open(os.path.join(mdir, "..", NAME + ".tokens.json"), "w") as f:
        json.dump(seqs, f)
    spec = hf_spec(cfg)
    print(f"{NAME}: inv_freq {np.array2string(spec['inv_freq'], precision=4)}, attention factor {spec['att']:.6f}",
          file=sys.stderr)
    print(f"wrote {mdir}", file=sys.stderr)


# ---- transformers (the GPU machine) ---------------------------------------------------------------------
CAPTURED = {}


def run_torch(out, pack):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    import transformers.models.qwen3.modeling_qwen3 as m_qwen3
    from safetensors.numpy import load_file

    versions = {"python": sys.version.split()[0], "torch": torch.__version__,
                "transformers": transformers.__version__, "numpy": np.__version__}
    print(json.dumps(versions), file=sys.stderr)
    torch.set_num_threads(4)
    orig = m_qwen3.eager_attention_forward

    def capture(module, query, key, value, attention_mask, *args, **kwargs):
        # query [B, Hq, T, D] after q_norm and RoPE, before the scale; key / value [B, Hkv, T, D]
        CAPTURED[module.layer_idx] = tuple(t[0].transpose(0, 1).detach().float().numpy().copy()
                                           for t in (query, key, value))
        return orig(module, query, key, value, attention_mask, *args, **kwargs)
    m_qwen3.eager_attention_forward = capture

    mdir = os.path.join(out, "models", NAME)
    with open(os.path.join(out, "models", NAME + ".tokens.json")) as f:
        seqs = json.load(f)
    cfg = AutoConfig.from_pretrained(mdir)
    rp = cfg.rope_parameters
    print(f"transformers rope_parameters: {rp}", file=sys.stderr)
    assert rp["rope_type"] == "yarn" and rp["factor"] == 4.0 and rp["original_max_position_embeddings"] == 64, rp
    model = AutoModelForCausalLM.from_pretrained(mdir, attn_implementation="eager", dtype=torch.float32).eval()
    assert type(model).__name__ == "Qwen3ForCausalLM", type(model)
    rot = model.model.rotary_emb
    with open(os.path.join(mdir, "config.json")) as f:
        spec = hf_spec(json.load(f))
    inv = rot.inv_freq.detach().double().numpy()
    print(f"transformers inv_freq {np.array2string(inv, precision=4)}, attention_scaling {rot.attention_scaling}",
          file=sys.stderr)
    assert np.allclose(inv, spec["inv_freq"], rtol=1e-6, atol=0), (inv, spec["inv_freq"])
    assert abs(rot.attention_scaling - spec["att"]) < 1e-12, (rot.attention_scaling, spec["att"])
    logits, qkv = [], {l: ([], [], []) for l in LAYERS}
    for s in seqs:
        CAPTURED.clear()
        with torch.no_grad():
            o = model(input_ids=torch.tensor([s], dtype=torch.long), use_cache=False)
        logits.append(o.logits[0].float().numpy())
        for l in LAYERS:
            for j in range(3):
                qkv[l][j].append(CAPTURED[l][j])
    logits = np.concatenate(logits)
    qkv = {l: tuple(np.concatenate(x) for x in qkv[l]) for l in LAYERS}
    with open(os.path.join(mdir, "config.json")) as f:
        check(NAME, hf_spec(json.load(f)), hf_weights(YARN_CONFIG, load_file(os.path.join(mdir, "model.safetensors"))),
              seqs, logits, qkv)
    saved = os.path.join(out, "resaved")
    cfg.save_pretrained(saved)  # config.json as transformers 5 writes it
    with open(os.path.join(saved, "config.json")) as f:
        cfg_text = f.read()
    arrays = {"logits": logits, "versions": json.dumps(versions), "config": cfg_text,
              "seqs": json.dumps(seqs)}
    for l in LAYERS:
        for j, c in enumerate("qkv"):
            arrays[f"{c}{l}"] = qkv[l][j]
    np.savez(pack, **arrays)
    print(f"packed {pack}", file=sys.stderr)


def unpack(out, pack):
    z = np.load(pack)
    seqs = json.loads(str(z["seqs"]))
    assert [len(s) for s in seqs] == SEQ_LENS
    fdir = os.path.join(out, "forward", NAME)
    os.makedirs(fdir, exist_ok=True)
    write_raw(os.path.join(fdir, "tokens.i32"), np.concatenate(seqs), np.int32)
    write_raw(os.path.join(fdir, "seq_start.i32"), np.cumsum([0] + SEQ_LENS), np.int32)
    write_raw(os.path.join(fdir, "pos.i32"), np.concatenate([np.arange(n) for n in SEQ_LENS]), np.int32)
    write_raw(os.path.join(fdir, "logits.f32"), z["logits"], np.float32)
    for l in LAYERS:
        for c in "qkv":
            write_raw(os.path.join(fdir, f"{c}{l}.f32"), z[f"{c}{l}"], np.float32)
    index = {"n_tokens": int(sum(SEQ_LENS)), "n_seq": len(SEQ_LENS), "layers": LAYERS,
             "logits_shape": list(z["logits"].shape), "versions": json.loads(str(z["versions"])),
             "model": f"tests/fixtures/models/{NAME}", "seed": SEED,
             "same_weights": [f"tests/fixtures/models/{NAME}.gguf"]}
    with open(os.path.join(fdir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    mdir = os.path.join(out, "models", NAME)
    os.makedirs(mdir, exist_ok=True)
    with open(os.path.join(mdir, "config.json"), "w") as f:
        f.write(str(z["config"]))
    print(f"wrote {fdir} and {mdir}/config.json", file=sys.stderr)


# ---- GGUF, as llama.cpp's converter writes it and llama.cpp reads it --------------------------------------
def gguf_writer(path, arch, cfg, n_rot):
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_name(os.path.basename(path)[:-5])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_dimension_count(n_rot)
    w.add_rope_freq_base(float(cfg["rope_parameters"]["rope_theta"]))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    return w


def close_gguf(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_names(arch, table, hf_prefix="model.layers.0."):
    import gguf
    tmap = gguf.get_tensor_name_map(arch, 1)
    for k, g in table.items():
        got = tmap.get_name(hf_prefix + k, try_suffixes=(".weight",))
        assert got == f"blk.0.{g}", (k, got, g)


QWEN3_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
               "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
               "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
               "self_attn.k_norm.weight": "attn_k_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
               "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
               "mlp.down_proj.weight": "ffn_down.weight"}
PHI3_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.qkv_proj.weight": "attn_qkv.weight",
              "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "mlp.gate_up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def write_yarn_gguf(path, cfg, sd):
    import gguf
    check_names(gguf.MODEL_ARCH.QWEN3, QWEN3_NAMES)
    w = gguf_writer(path, "qwen3", cfg, cfg["head_dim"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    rp = cfg["rope_parameters"]  # convert_hf_to_gguf.py's TextModel: rope_type yarn
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rp["factor"])
    w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
    for k, f in (("attention_factor", w.add_rope_scaling_yarn_attn_factor), ("beta_fast", w.add_rope_scaling_yarn_beta_fast),
                 ("beta_slow", w.add_rope_scaling_yarn_beta_slow)):
        if rp.get(k) is not None:
            f(rp[k])
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    for i in range(cfg["num_hidden_layers"]):
        for k, g in QWEN3_NAMES.items():
            w.add_tensor(f"blk.{i}.{g}", np.ascontiguousarray(sd[f"model.layers.{i}.{k}"], np.float32))
    close_gguf(w)


def write_phi3_gguf(path, cfg, sd):
    import gguf
    check_names(gguf.MODEL_ARCH.PHI3, PHI3_NAMES)
    C, Hq = cfg["hidden_size"], cfg["num_attention_heads"]
    rp = cfg["rope_parameters"]
    w = gguf_writer(path, "phi3", cfg, int(rp.get("partial_rotary_factor", 1.0) * C) // Hq)
    w.add_rope_scaling_orig_ctx_len(cfg.get("original_max_position_embeddings", rp.get("original_max_position_embeddings")))
    w.add_sliding_window(cfg.get("sliding_window") or 0)  # Phi3MiniModel: 0 when there is none
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    if not cfg.get("tie_word_embeddings"):
        w.add_tensor("output.weight", sd["lm_head.weight"])
    for i in range(cfg["num_hidden_layers"]):
        for k, g in PHI3_NAMES.items():
            w.add_tensor(f"blk.{i}.{g}", np.ascontiguousarray(sd[f"model.layers.{i}.{k}"], np.float32))
    close_gguf(w)


def read_gguf(path):
    """llama.cpp's reading of a qwen3 / phi3 file: the spec its graph runs and the tensors."""
    import gguf
    r = gguf.GGUFReader(path)
    kv = {f.name: f for f in r.fields.values()}

    def val(key, default=None):
        f = kv.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v.tolist()[0]
    arch = val("general.architecture")
    assert arch in ("qwen3", "phi3"), arch
    t = {x.name: np.asarray(x.data, np.float64).reshape([int(n) for n in x.shape[::-1]]) for x in r.tensors}
    C, Hq, Hkv = (val(f"{arch}.{k}") for k in ("embedding_length", "attention.head_count", "attention.head_count_kv"))
    D = val(f"{arch}.attention.key_length", C // Hq)
    R, base, ctx = val(f"{arch}.rope.dimension_count", D), val(f"{arch}.rope.freq_base"), val(f"{arch}.context_length")
    rp = {"rope_type": "default", "rope_theta": base}
    if val(f"{arch}.rope.scaling.type") == "yarn":
        # llama.cpp: beta 32 / 1 and cos/sin x (0.1 ln factor + 1) for these archs (the context's defaults)
        rp = {"rope_type": "yarn", "rope_theta": base, "factor": val(f"{arch}.rope.scaling.factor"),
              "original_max_position_embeddings": val(f"{arch}.rope.scaling.original_context_length", ctx)}
    inv, att = rope_tables(rp, R, ctx)
    # phi3's window applied as transformers does (llama.cpp's phi3 loader currently disables it)
    spec = dict(arch=arch, C=C, Hq=Hq, Hkv=Hkv, D=D, R=R, eps=val(f"{arch}.attention.layer_norm_rms_epsilon"),
                window=val(f"{arch}.attention.sliding_window", 0), inv_freq=inv, att=att)
    Q, KV, F = Hq * D, Hkv * D, val(f"{arch}.feed_forward_length")
    out = {"embed": t["token_embd.weight"], "norm": t["output_norm.weight"], "layers": []}
    out["head"] = t.get("output.weight", out["embed"])
    for i in range(val(f"{arch}.block_count")):
        g = lambda n: t[f"blk.{i}.{n}.weight"]  # noqa: E731
        lw = {"attn_norm": g("attn_norm"), "o": g("attn_output"), "ffn_norm": g("ffn_norm"), "down": g("ffn_down")}
        if arch == "phi3":  # llama.cpp: build_qkv splits attn_qkv; ggml_swiglu gates with ffn_up's first half
            qkv, up = g("attn_qkv"), g("ffn_up")
            lw.update(q=qkv[:Q], k=qkv[Q:Q + KV], v=qkv[Q + KV:], gate=up[:F], up=up[F:])
        else:
            lw.update(q=g("attn_q"), k=g("attn_k"), v=g("attn_v"), q_norm=g("attn_q_norm"), k_norm=g("attn_k_norm"),
                      gate=g("ffn_gate"), up=g("ffn_up"))
        out["layers"].append(lw)
    return spec, out


def load_fixture(fdir, V):
    rd = lambda n, dt: np.fromfile(os.path.join(fdir, n), dtype=np.dtype(dt).newbyteorder("<"))  # noqa: E731
    starts = rd("seq_start.i32", np.int32)
    toks = rd("tokens.i32", np.int32)
    seqs = [toks[starts[s]:starts[s + 1]].tolist() for s in range(len(starts) - 1)]
    T = len(toks)
    logits = rd("logits.f32", np.float32).reshape(T, V)
    with open(os.path.join(fdir, "index.json")) as f:
        layers = json.load(f)["layers"]
    qkv = {l: tuple(rd(f"{c}{l}.f32", np.float32).reshape(T, -1) for c in "qkv") for l in layers}
    return seqs, logits, qkv


def make_gguf(out, fixtures):
    from safetensors.numpy import load_file
    os.makedirs(os.path.join(out, "models"), exist_ok=True)
    # tiny-phi3: the existing transformers fixture
    mdir = os.path.join(fixtures, "models", "tiny-phi3")
    with open(os.path.join(mdir, "config.json")) as f:
        cfg = json.load(f)
    sd = load_file(os.path.join(mdir, "model.safetensors"))
    seqs, logits, qkv = load_fixture(os.path.join(fixtures, "forward", "tiny-phi3"), cfg["vocab_size"])
    check("tiny-phi3 (config.json)", hf_spec(cfg), hf_weights(cfg, sd), seqs, logits, qkv)
    path = os.path.join(out, "models", "tiny-phi3.gguf")
    write_phi3_gguf(path, cfg, sd)
    spec, w = read_gguf(path)
    assert spec["R"] == 8 and spec["window"] == 20, spec
    check("tiny-phi3.gguf", spec, w, seqs, logits, qkv)
    swapped = dict(w, layers=[dict(lw, gate=lw["up"], up=lw["gate"]) for lw in w["layers"]])
    must_miss("tiny-phi3.gguf", "with ffn_up's gate / up halves swapped", spec, swapped, seqs, logits)
    must_miss("tiny-phi3.gguf", "without the window", dict(spec, window=0), w, seqs, logits)
    print(f"wrote {path}", file=sys.stderr)
    # tiny-qwen3-yarn: its transformers fixture when made, else the reference from config.json
    mdir = os.path.join(fixtures, "models", NAME)
    with open(os.path.join(mdir, "config.json")) as f:
        cfg = json.load(f)
    sd = load_file(os.path.join(mdir, "model.safetensors"))
    hspec, hw = hf_spec(cfg), hf_weights(cfg, sd)
    fdir = os.path.join(fixtures, "forward", NAME)
    if os.path.exists(os.path.join(fdir, "logits.f32")):
        seqs, logits, qkv = load_fixture(fdir, cfg["vocab_size"])
        check(NAME + " (config.json)", hspec, hw, seqs, logits, qkv)
    else:
        with open(os.path.join(mdir, "..", NAME + ".tokens.json")) as f:
            seqs = json.load(f)
        logits, qkv = reference(hspec, hw, seqs)
        print(f"{NAME}: no transformers fixture in {fdir}: the GGUF is checked against the reference only",
              file=sys.stderr)
    path = os.path.join(out, "models", NAME + ".gguf")
    write_yarn_gguf(path, cfg, sd)
    spec, w = read_gguf(path)
    check(NAME + ".gguf", spec, w, seqs, logits, qkv)
    must_miss(NAME, "without the attention factor", dict(hspec, att=1.0), hw, seqs, logits)
    linear, _ = rope_tables(dict(cfg["rope_parameters"], rope_type="linear"), hspec["R"], 256)
    must_miss(NAME, "as linear scaling", dict(hspec, inv_freq=linear), hw, seqs, logits)
    must_miss(NAME, "unscaled", dict(hspec, inv_freq=rope_tables({"rope_theta": 1e4}, hspec["R"], 256)[0], att=1.0),
              hw, seqs, logits)
    print(f"wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description="YaRN and Phi-3 GGUF fixtures (see the header)")
    ap.add_argument("step", choices=("weights", "torch", "unpack", "gguf"))
    ap.add_argument("--out", required=True, help="output folder (models/ and forward/ are made in it)")
    ap.add_argument("--pack", help="the .npz of the torch step")
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "fixtures"),
                    help="models/ and forward/ the gguf step reads (default tests/fixtures)")
    a = ap.parse_args()
    if a.step == "weights":
        make_weights(a.out)
    elif a.step == "torch":
        run_torch(a.out, a.pack)
    elif a.step == "unpack":
        unpack(a.out, a.pack)
    else:
        make_gguf(a.out, a.fixtures)


if __name__ == "__main__":
    main()
