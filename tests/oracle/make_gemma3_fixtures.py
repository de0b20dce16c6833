#!/usr/bin/env python3
# make_gemma3_fixtures.py - Gemma 3 (text) fixtures for oscar's CPU forward pass: tiny RANDOMLY INITIALISED
# models run by Hugging Face transformers (eager attention, fp32, CPU), the same weights as llama.cpp's
# converter writes them to GGUF, and a Gemma3ForConditionalGeneration-layout copy. No network: configs are
# built in code, weights come from fixed seeds.
#
# Run (on a machine with torch, transformers >= 5, gguf, safetensors, numpy; the CPU is enough):
#
#     python3 tests/oracle/make_gemma3_fixtures.py --out DIR
#
# then copy DIR/models/* to tests/fixtures/models/ and DIR/forward/* to tests/fixtures/forward/.
# Without torch, `--no-torch` builds the same layouts from numpy weights (no forward fixtures) and checks
# the GGUF writer against the safetensors through the numpy reference below (a check of the script only).
#
# What it writes (under DIR):
#   models/tiny-gemma3/{config.json,model.safetensors}   float32, config.json as transformers 5 saves it
#       (layer_types, rope_parameters per layer type). 4 layers [sliding, sliding, full, sliding],
#       hidden 64, 4 heads / 2 KV heads, head_dim 32 (!= hidden / heads = 16), query_pre_attn_scalar 24
#       (neither head_dim nor hidden / heads), sliding_window 8 (every sequence is longer), sliding layers
#       rope_theta 1e4, full layers rope_theta 1e6 with linear scaling factor 4, tied embeddings,
#       gelu_pytorch_tanh, norm weights w ~ 0.2 N(0,1) (applied as 1 + w), embeddings ~ 0.25 N(0,1).
#   models/tiny-gemma3-hub/{config.json,model.safetensors}   bfloat16, config.json in the Hub's format
#       (google/gemma-3-*: rope_theta, rope_local_base_freq, rope_scaling {linear, 8}, sliding_window_pattern
#       6 and no layer_types), checked to parse back to the same model by transformers. 6 layers (5 sliding
#       + 1 full, from the pattern), hidden 64, 4 heads / 1 KV head, head_dim 32, query_pre_attn_scalar 32
#       (= head_dim, what llama.cpp assumes for every size but the 27B), sliding_window 12. Weights are
#       rounded to bf16 before transformers runs them in fp32, so the fixtures are exact for the stored
#       weights; norm weights are multiples of 1/128 in (-0.5, 0.5), so w and 1 + w are both exact in bf16
#       (llama.cpp's converter adds the 1 in the checkpoint's dtype).
#   models/tiny-gemma3-hub.gguf   the hub model as llama.cpp's convert_hf_to_gguf.py (Gemma3Model) writes it:
#       arch gemma3, norms + 1 in F32, matrices BF16 (file_type MOSTLY_BF16), q/k not permuted (NEOX RoPE),
#       no output.weight (tied), keys context_length, embedding_length, block_count, feed_forward_length,
#       attention.head_count(_kv), attention.key_length / value_length, attention.layer_norm_rms_eps,
#       rope.freq_base (the full layers' 1e6), rope.scaling.type linear + factor 8, attention.sliding_window.
#       No query_pre_attn_scalar, no rope_local_base_freq, no pattern key: llama.cpp fixes pattern 6, the
#       sliding layers' base 1e4 and the scale 1/sqrt(head_dim) (1/sqrt(n_embd/n_head) for 62 layers).
#   models/tiny-gemma3-mm/{config.json,model.safetensors}   the hub model's weights in the
#       Gemma3ForConditionalGeneration layout of the Hub checkpoints: model_type gemma3 with the text model in
#       text_config, tensors language_model.model.*, plus a few vision_tower.* / multi_modal_projector.*
#       tensors a text-only loader must skip. Its forward fixture is tiny-gemma3-hub's.
#   forward/<name>/ for tiny-gemma3 and tiny-gemma3-hub: index.json + raw little-endian files, the format of
#       make_model_fixtures.py: tokens.i32 [T], seq_start.i32 [4], pos.i32 [T] (3 sequences of 40, 24, 33
#       tokens, each run by transformers separately), logits.f32 [T, V], q<l>.f32 [T, Hq, D] and
#       k<l>.f32 [T, Hkv, D] after q_norm / k_norm and RoPE (before the attention scale), v<l>.f32
#       [T, Hkv, D], for the layers listed in index.json.
#   The numpy reference (gemma3_forward below) recomputes every fixture from the written files: from
#   config.json + safetensors with transformers' rules, and from the GGUF with llama.cpp's rules; the script
#   fails if either misses transformers' logits by more than 1e-5 relative L2.
import argparse
import copy
import json
import math
import os
import sys

import numpy as np

SEQ_LENS = [40, 24, 33]
TOL = 1e-5  # numpy reference (float64) against transformers (fp32): expected ~1e-7

# ---- the models --------------------------------------------------------------------------------------
# transformers 5 Gemma3TextConfig arguments (v5 format: rope_parameters per layer type, layer_types).
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, hidden_activation="gelu_pytorch_tanh",
            max_position_embeddings=512, rms_norm_eps=1e-6, query_pre_attn_scalar=24, sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                             "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 4.0}},
            attn_logit_softcapping=None, final_logit_softcapping=None, tie_word_embeddings=True,
            pad_token_id=None, bos_token_id=2, eos_token_id=1)
# the Hub's (transformers 4.5x) keys for the same kind of model: no layer_types, a pattern instead
HUB = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
           num_key_value_heads=1, head_dim=32, hidden_activation="gelu_pytorch_tanh",
           max_position_embeddings=512, rms_norm_eps=1e-6, query_pre_attn_scalar=32, sliding_window=12,
           sliding_window_pattern=6, rope_theta=1000000.0, rope_local_base_freq=10000.0,
           rope_scaling={"rope_type": "linear", "factor": 8.0},
           attn_logit_softcapping=None, final_logit_softcapping=None, tie_word_embeddings=True,
           pad_token_id=None, bos_token_id=2, eos_token_id=1)
MODELS = {"tiny-gemma3": (TINY, 31, "float32", [0, 1, 2, 3]),
          "tiny-gemma3-hub": (HUB, 32, "bfloat16", [0, 1, 4, 5])}


def write_raw(path, arr, dtype):
    np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tofile(path)


def bf16_round(a):
    # round to nearest even, as torch's .to(bfloat16)
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32).reshape(np.shape(a))


def norm_names(sd):
    return [k for k in sd if k.endswith("norm.weight")]


# ---- config.json -> what the forward pass needs (both formats, as oscar must read them) ---------------
def text_config(cfg):
    if cfg.get("model_type") == "gemma3":
        cfg = cfg["text_config"]
    assert cfg["model_type"] == "gemma3_text", cfg.get("model_type")
    return cfg


def spec_from_hf(cfg):
    cfg = text_config(cfg)
    L = cfg["num_hidden_layers"]
    types = cfg.get("layer_types")
    if types is None:
        pat = cfg.get("sliding_window_pattern", 6)
        types = ["sliding_attention" if (i + 1) % pat else "full_attention" for i in range(L)]
    rp = cfg.get("rope_parameters")
    if rp is None or "full_attention" not in rp:  # the Hub's keys
        full = {"rope_type": "default", "rope_theta": cfg.get("rope_theta", 1e6)}
        full.update(cfg.get("rope_scaling") or {})
        rp = {"full_attention": full,
              "sliding_attention": {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", 1e4)}}
    layers = []
    for t in types:
        p = rp[t]
        kind = p.get("rope_type", p.get("type", "default"))
        assert kind in ("default", "linear"), kind
        layers.append(dict(sliding=t == "sliding_attention", theta=p["rope_theta"],
                           factor=p.get("factor", 1.0) if kind == "linear" else 1.0))
    assert cfg.get("attn_logit_softcapping") is None and cfg.get("final_logit_softcapping") is None
    assert cfg.get("hidden_activation", "gelu_pytorch_tanh") == "gelu_pytorch_tanh"
    return dict(C=cfg["hidden_size"], Hq=cfg["num_attention_heads"], Hkv=cfg["num_key_value_heads"],
                D=cfg["head_dim"], eps=cfg["rms_norm_eps"], window=cfg["sliding_window"], layers=layers,
                scale=cfg.get("query_pre_attn_scalar", 256) ** -0.5, norm_offset=1.0)


def hf_tensors(sd, L):
    pre = "language_model.model." if "language_model.model.embed_tokens.weight" in sd else "model."
    g = lambda k: sd[pre + k].astype(np.float64)  # noqa: E731
    out = {"embed": g("embed_tokens.weight"), "norm": g("norm.weight"), "layers": []}
    for i in range(L):
        p = f"layers.{i}."
        out["layers"].append({n: g(p + k) for n, k in (
            ("attn_norm", "input_layernorm.weight"), ("q", "self_attn.q_proj.weight"),
            ("k", "self_attn.k_proj.weight"), ("v", "self_attn.v_proj.weight"), ("o", "self_attn.o_proj.weight"),
            ("q_norm", "self_attn.q_norm.weight"), ("k_norm", "self_attn.k_norm.weight"),
            ("post_attn_norm", "post_attention_layernorm.weight"), ("ffn_norm", "pre_feedforward_layernorm.weight"),
            ("post_ffn_norm", "post_feedforward_layernorm.weight"), ("gate", "mlp.gate_proj.weight"),
            ("up", "mlp.up_proj.weight"), ("down", "mlp.down_proj.weight"))})
    return out


# ---- GGUF, as llama.cpp's converter lays it out, and llama.cpp's reading of it ------------------------
GGUF_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
              "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
              "self_attn.k_norm.weight": "attn_k_norm.weight",
              "post_attention_layernorm.weight": "post_attention_norm.weight",
              "pre_feedforward_layernorm.weight": "ffn_norm.weight",
              "post_feedforward_layernorm.weight": "post_ffw_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
              "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def write_gguf(path, cfg, sd):
    import gguf
    cfg = text_config(cfg)
    L = cfg["num_hidden_layers"]
    # the converter's own mapping must agree with the table above
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, L)
    for k, g in GGUF_NAMES.items():
        got = tmap.get_name(f"model.layers.0.{k}", try_suffixes=(".weight",))
        assert got == f"blk.0.{g}", (k, got, g)
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_name(os.path.basename(path)[:-5])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_rope_freq_base(float(cfg["rope_theta"]))  # the full layers' base
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rs["factor"]))
    assert cfg.get("sliding_window_pattern") == 6  # what llama.cpp assumes for arch gemma3
    w.add_sliding_window(cfg["sliding_window"])

    def put(name, t, hf_name):
        t = np.ascontiguousarray(t, dtype=np.float32)
        if hf_name.endswith("norm.weight"):
            t = t + np.float32(1.0)  # Gemma3Model.norm_shift: GGUF norms are the (1 + w) HF multiplies by
        if t.ndim == 1:
            w.add_tensor(name, t)  # 1-D tensors stay F32
        else:
            w.add_tensor(name, gguf.quants.quantize(t, gguf.GGMLQuantizationType.BF16),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)

    put("token_embd.weight", sd["model.embed_tokens.weight"], "model.embed_tokens.weight")
    put("output_norm.weight", sd["model.norm.weight"], "model.norm.weight")
    for i in range(L):
        for k, g in GGUF_NAMES.items():
            put(f"blk.{i}.{g}", sd[f"model.layers.{i}.{k}"], k)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_gguf(path):
    """llama.cpp's view of the file: tensors (norms used as stored) and the spec its gemma3 graph runs."""
    import gguf
    r = gguf.GGUFReader(path)
    kv = {f.name: f for f in r.fields.values()}

    def val(key, default=None):
        f = kv.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v.tolist()[0]

    assert val("general.architecture") == "gemma3"
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).reshape([int(n) for n in x.shape[::-1]])
         .astype(np.float64) for x in r.tensors}
    L, C, Hq = val("gemma3.block_count"), val("gemma3.embedding_length"), val("gemma3.attention.head_count")
    D = val("gemma3.attention.key_length")
    n_swa = val("gemma3.attention.sliding_window", 0)
    base = val("gemma3.rope.freq_base", 10000.0)
    factor = val("gemma3.rope.scaling.factor", 1.0) if val("gemma3.rope.scaling.type") == "linear" else 1.0
    layers = []
    for i in range(L):
        swa = n_swa > 0 and i % 6 < 5  # set_swa_pattern(6): every 6th layer is full
        layers.append(dict(sliding=swa, theta=10000.0 if swa else base, factor=1.0 if swa else factor))
    spec = dict(C=C, Hq=Hq, Hkv=val("gemma3.attention.head_count_kv"), D=D,
                eps=val("gemma3.attention.layer_norm_rms_epsilon"), window=n_swa, layers=layers,
                scale=1.0 / math.sqrt(C / Hq if L == 62 else D), norm_offset=0.0)
    g = lambda n: t[n]  # noqa: E731
    out = {"embed": g("token_embd.weight"), "norm": g("output_norm.weight"), "layers": []}
    for i in range(L):
        out["layers"].append({n: g(f"blk.{i}.{k}") for n, k in (
            ("attn_norm", "attn_norm.weight"), ("q", "attn_q.weight"), ("k", "attn_k.weight"),
            ("v", "attn_v.weight"), ("o", "attn_output.weight"), ("q_norm", "attn_q_norm.weight"),
            ("k_norm", "attn_k_norm.weight"), ("post_attn_norm", "post_attention_norm.weight"),
            ("ffn_norm", "ffn_norm.weight"), ("post_ffn_norm", "post_ffw_norm.weight"),
            ("gate", "ffn_gate.weight"), ("up", "ffn_up.weight"), ("down", "ffn_down.weight"))})
    assert "output.weight" not in t
    return spec, out


# ---- numpy reference forward (float64) -----------------------------------------------------------------
def gemma3_forward(spec, w, tokens):
    """One sequence (positions 0..T-1); returns logits [T, V] and {layer: (q, k, v)} after norm + RoPE."""
    C, Hq, Hkv, D, eps, off = spec["C"], spec["Hq"], spec["Hkv"], spec["D"], spec["eps"], spec["norm_offset"]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (off + g)  # noqa: E731
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    x = w["embed"][tokens] * math.sqrt(C)
    qkv = {}
    for i, (ly, lw) in enumerate(zip(spec["layers"], w["layers"])):
        h = rms(x, lw["attn_norm"])
        q = rms((h @ lw["q"].T).reshape(T, Hq, D), lw["q_norm"])
        k = rms((h @ lw["k"].T).reshape(T, Hkv, D), lw["k_norm"])
        v = (h @ lw["v"].T).reshape(T, Hkv, D)
        inv = ly["theta"] ** (-np.arange(0, D, 2, dtype=np.float64) / D)
        ang = (pos / ly["factor"])[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rope(a):  # half-split pairs (i, i + D/2)
            a1, a2 = a[..., : D // 2], a[..., D // 2:]
            return np.concatenate([a1 * cos - a2 * sin, a2 * cos + a1 * sin], axis=-1)
        q, k = rope(q), rope(k)
        qkv[i] = (q, k, v)
        rep = Hq // Hkv
        s = np.einsum("thd,shd->hts", q, np.repeat(k, rep, axis=1)) * spec["scale"]
        dq = pos[:, None] - pos[None, :]
        allowed = (dq >= 0) & ((dq < spec["window"]) if ly["sliding"] else True)
        s = np.where(allowed[None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", p, np.repeat(v, rep, axis=1)).reshape(T, Hq * D)
        x = x + rms(o @ lw["o"].T, lw["post_attn_norm"])
        h = rms(x, lw["ffn_norm"])
        gt = h @ lw["gate"].T
        gelu = 0.5 * gt * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (gt + 0.044715 * gt ** 3)))
        x = x + rms((gelu * (h @ lw["up"].T)) @ lw["down"].T, lw["post_ffn_norm"])
    return rms(x, w["norm"]) @ w["embed"].T, qkv


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def reference(spec, w, seqs):
    outs = [gemma3_forward(spec, w, np.asarray(s)) for s in seqs]
    logits = np.concatenate([o[0] for o in outs])
    qkv = {l: tuple(np.concatenate([o[1][l][j] for o in outs]) for j in range(3)) for l in outs[0][1]}
    return logits, qkv


# ---- the Gemma3ForConditionalGeneration layout ---------------------------------------------------------
def write_mm(mdir, cfg, sd):
    os.makedirs(mdir, exist_ok=True)
    text = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "dtype",
                                                       "torch_dtype")}
    mm = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16, "intermediate_size": 32,
                            "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 16, "patch_size": 4,
                            "vision_use_head": False},
          "mm_tokens_per_image": 4, "boi_token_index": 300, "eoi_token_index": 301, "image_token_index": 302,
          "initializer_range": 0.02, "torch_dtype": "bfloat16"}
    rng = np.random.default_rng(7)
    out = {"language_model." + k: v for k, v in sd.items() if k.startswith("model.")}  # -> language_model.model.*
    out["vision_tower.vision_model.embeddings.patch_embedding.weight"] = rng.standard_normal((16, 3, 4, 4))
    out["vision_tower.vision_model.post_layernorm.weight"] = rng.standard_normal(16)
    out["multi_modal_projector.mm_input_projection_weight"] = rng.standard_normal((16, cfg["hidden_size"]))
    out["multi_modal_projector.mm_soft_emb_norm.weight"] = rng.standard_normal(16)
    save_st(os.path.join(mdir, "model.safetensors"), out)
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump(mm, f, indent=2)
        f.write("\n")
    return mm


def save_st(path, sd, dtype="BF16"):
    # safetensors.numpy has no bfloat16: the file is written here (8-byte header length, JSON header, data)
    hdr, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, v in sd.items():
        v = np.asarray(v, np.float32)
        b = ((bf16_round(v).view(np.uint32) >> 16).astype("<u2") if dtype == "BF16" else v.astype("<f4")).tobytes()
        hdr[k] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_st(path):
    """A safetensors file's F32 / F16 / BF16 tensors as float32 (read here: numpy has no bfloat16)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, t in hdr.items():
        if k == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[b:e]
        if t["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float32)
        else:
            assert t["dtype"] == "F32", (path, k, t["dtype"])
            a = np.frombuffer(raw, "<f4").astype(np.float32)
        out[k] = a.reshape(t["shape"])
    return out


# ---- with transformers ---------------------------------------------------------------------------------
CAPTURED = {}


def make_with_torch(out):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, Gemma3TextConfig
    import transformers.models.gemma3.modeling_gemma3 as m_gemma3

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

    orig = m_gemma3.eager_attention_forward

    def capture(module, query, key, value, attention_mask, *args, **kwargs):
        # query [B, Hq, T, D] after q_norm and RoPE, before the scale; key / value [B, Hkv, T, D]
        CAPTURED[module.layer_idx] = tuple(t[0].transpose(0, 1).detach().float().numpy().copy()
                                           for t in (query, key, value))
        return orig(module, query, key, value, attention_mask, *args, **kwargs)

    m_gemma3.eager_attention_forward = capture

    def run(model, seqs, layers):
        logits, qkv = [], {l: ([], [], []) for l in layers}
        for s in seqs:
            CAPTURED.clear()
            with torch.no_grad():
                o = model(input_ids=torch.tensor([s], dtype=torch.long), use_cache=False)
            logits.append(o.logits[0].float().numpy())
            for l in layers:
                for j in range(3):
                    qkv[l][j].append(CAPTURED[l][j])
        return np.concatenate(logits), {l: tuple(np.concatenate(x) for x in qkv[l]) for l in layers}

    for name, (kw, seed, dtype, layers) in MODELS.items():
        torch.manual_seed(seed)
        cfg = Gemma3TextConfig(**kw)
        # the config transformers built must be the model meant (the Hub keys go through its conversion)
        spec_kw = spec_from_hf(dict(kw, model_type="gemma3_text"))
        want_types = ["sliding_attention" if l["sliding"] else "full_attention" for l in spec_kw["layers"]]
        assert list(cfg.layer_types) == want_types, (name, cfg.layer_types)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32).eval()
        assert type(model).__name__ == "Gemma3ForCausalLM", type(model)
        bf16 = dtype == "bfloat16"
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):  # HF initialises them to 0 (applied as 1 + w)
                    p.copy_(0.2 * torch.randn_like(p))
                    if bf16:  # multiples of 1/128 in (-0.5, 0.5): w and 1 + w exact in bf16
                        p.copy_(torch.clamp(torch.round(p * 128), -63, 63) / 128)
                elif "embed_tokens" in pname:
                    p.copy_(0.25 * torch.randn_like(p))
                if bf16:
                    p.copy_(p.to(torch.bfloat16).float())
        mdir = os.path.join(out, "models", name)
        if bf16:  # a copy: bfloat16 would also round the fp32 model's RoPE buffers
            copy.deepcopy(model).to(torch.bfloat16).save_pretrained(mdir, safe_serialization=True)
        else:
            model.save_pretrained(mdir, safe_serialization=True)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(mdir, extra)):
                os.remove(os.path.join(mdir, extra))
        with open(os.path.join(mdir, "config.json")) as f:
            saved = json.load(f)
        if name == "tiny-gemma3-hub":  # rewrite in the Hub's keys; transformers must read back the same model
            for k in ("layer_types", "rope_parameters", "rope_scaling", "rope_theta", "rope_local_base_freq"):
                saved.pop(k, None)
            saved.update({k: kw[k] for k in ("rope_theta", "rope_local_base_freq", "rope_scaling",
                                             "sliding_window_pattern")})
            with open(os.path.join(mdir, "config.json"), "w") as f:
                json.dump(saved, f, indent=2)
                f.write("\n")
            back = AutoConfig.from_pretrained(mdir)
            assert list(back.layer_types) == list(cfg.layer_types), back.layer_types
            assert back.rope_parameters == cfg.rope_parameters, (back.rope_parameters, cfg.rope_parameters)
        g = torch.Generator().manual_seed(100 + seed)
        seqs = [torch.randint(0, cfg.vocab_size, (n,), generator=g).tolist() for n in SEQ_LENS]
        logits, qkv = run(model, seqs, layers)
        # the saved directory reproduces them
        again = AutoModelForCausalLM.from_pretrained(mdir, attn_implementation="eager", dtype=torch.float32).eval()
        lg2, _ = run(again, seqs, layers)
        assert rel_l2(lg2, logits) < 1e-6, rel_l2(lg2, logits)

        fdir = os.path.join(out, "forward", name)
        os.makedirs(fdir, exist_ok=True)
        write_raw(os.path.join(fdir, "tokens.i32"), np.concatenate(seqs), np.int32)
        write_raw(os.path.join(fdir, "seq_start.i32"), np.cumsum([0] + SEQ_LENS), np.int32)
        write_raw(os.path.join(fdir, "pos.i32"), np.concatenate([np.arange(n) for n in SEQ_LENS]), np.int32)
        write_raw(os.path.join(fdir, "logits.f32"), logits, np.float32)
        for l in layers:
            for j, c in enumerate("qkv"):
                write_raw(os.path.join(fdir, f"{c}{l}.f32"), qkv[l][j], np.float32)
        index = {"n_tokens": int(sum(SEQ_LENS)), "n_seq": len(SEQ_LENS), "layers": layers,
                 "logits_shape": list(logits.shape), "versions": versions,
                 "model": f"tests/fixtures/models/{name}", "seed": seed, "weights_dtype": dtype}
        if name == "tiny-gemma3-hub":
            index["same_weights"] = ["tests/fixtures/models/tiny-gemma3-hub.gguf", "tests/fixtures/models/tiny-gemma3-mm"]
        with open(os.path.join(fdir, "index.json"), "w") as f:
            json.dump(index, f, indent=1)
            f.write("\n")

        sd = read_st(os.path.join(mdir, "model.safetensors"))  # what oscar will read
        check(name, spec_from_hf(saved), hf_tensors(sd, cfg.num_hidden_layers), seqs, logits, qkv)
        if name == "tiny-gemma3-hub":
            gpath = os.path.join(out, "models", name + ".gguf")
            write_gguf(gpath, saved, sd)
            spec, w = read_gguf(gpath)
            check(name + ".gguf", spec, w, seqs, logits, qkv)
            mm = write_mm(os.path.join(out, "models", "tiny-gemma3-mm"), saved, sd)
            mcfg = AutoConfig.from_pretrained(os.path.join(out, "models", "tiny-gemma3-mm"))
            assert mcfg.model_type == "gemma3" and list(mcfg.text_config.layer_types) == list(cfg.layer_types)
            assert mcfg.text_config.rope_parameters == cfg.rope_parameters
            msd = read_st(os.path.join(out, "models", "tiny-gemma3-mm", "model.safetensors"))
            check("tiny-gemma3-mm", spec_from_hf(mm), hf_tensors(msd, cfg.num_hidden_layers), seqs, logits, qkv)
        print(f"{name}: {sum(p.numel() for p in model.parameters())} params, T={sum(SEQ_LENS)}", file=sys.stderr)


def check(name, spec, w, seqs, logits, qkv):
    lg, ref_qkv = reference(spec, w, seqs)
    e = rel_l2(lg, logits)
    eq = max(max(rel_l2(ref_qkv[l][j], qkv[l][j]) for j in range(3)) for l in qkv)
    print(f"{name}: numpy reference logits rel-L2 {e:.2e}, q/k/v max {eq:.2e}", file=sys.stderr)
    assert e < TOL and eq < TOL, (name, e, eq)


# ---- without torch: the same files from numpy weights (checks the writers and the readers) -------------
def make_without_torch(out):
    name, (kw, seed, _, _) = "tiny-gemma3-hub", MODELS["tiny-gemma3-hub"]
    rng = np.random.default_rng(seed)
    C, F, L, Hq, Hkv, D, V = (kw[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                               "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"))
    r = lambda *s: bf16_round(0.02 * rng.standard_normal(s))  # noqa: E731
    nrm = lambda n: np.clip(np.round(0.2 * rng.standard_normal(n) * 128), -63, 63) / 128  # noqa: E731
    sd = {"model.embed_tokens.weight": bf16_round(0.25 * rng.standard_normal((V, C))), "model.norm.weight": nrm(C)}
    for i in range(L):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": nrm(C), p + "self_attn.q_proj.weight": r(Hq * D, C),
                   p + "self_attn.k_proj.weight": r(Hkv * D, C), p + "self_attn.v_proj.weight": r(Hkv * D, C),
                   p + "self_attn.o_proj.weight": r(C, Hq * D), p + "self_attn.q_norm.weight": nrm(D),
                   p + "self_attn.k_norm.weight": nrm(D), p + "post_attention_layernorm.weight": nrm(C),
                   p + "pre_feedforward_layernorm.weight": nrm(C), p + "post_feedforward_layernorm.weight": nrm(C),
                   p + "mlp.gate_proj.weight": r(F, C), p + "mlp.up_proj.weight": r(F, C),
                   p + "mlp.down_proj.weight": r(C, F)})
    sd = {k: np.asarray(v, np.float32) for k, v in sd.items()}
    cfg = dict(kw, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text")
    mdir = os.path.join(out, "models", name)
    os.makedirs(mdir, exist_ok=True)
    save_st(os.path.join(mdir, "model.safetensors"), sd)
    with open(os.path.join(mdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    back = read_st(os.path.join(mdir, "model.safetensors"))
    assert all(np.array_equal(back[k], sd[k]) for k in sd)
    gpath = os.path.join(out, "models", name + ".gguf")
    write_gguf(gpath, cfg, sd)
    mm = write_mm(os.path.join(out, "models", "tiny-gemma3-mm"), cfg, sd)
    seqs = [rng.integers(0, V, n).tolist() for n in SEQ_LENS]
    lg, qkv = reference(spec_from_hf(cfg), hf_tensors(sd, L), seqs)
    spec, w = read_gguf(gpath)
    assert all(spec["layers"][i]["sliding"] == (i != 5) for i in range(L))
    check(name + ".gguf (numpy)", spec, w, seqs, lg, qkv)
    msd = read_st(os.path.join(out, "models", "tiny-gemma3-mm", "model.safetensors"))
    check("tiny-gemma3-mm (numpy)", spec_from_hf(mm), hf_tensors(msd, L), seqs, lg, qkv)
    # the reference must see each feature: switching one off moves the logits
    base = spec_from_hf(cfg)
    for what, alt in (("norm offset", dict(base, norm_offset=0.0)), ("scale", dict(base, scale=0.5 * base["scale"])),
                      ("window", dict(base, window=10 ** 6)),
                      ("local base", dict(base, layers=[dict(l, theta=1e6) for l in base["layers"]]))):
        e = rel_l2(reference(alt, hf_tensors(sd, L), seqs)[0], lg)
        print(f"numpy reference without {what}: rel-L2 {e:.2e}", file=sys.stderr)
        assert e > 100 * TOL, what
    t = spec_from_hf(dict(TINY, model_type="gemma3_text"))  # the transformers 5 keys
    assert [l["sliding"] for l in t["layers"]] == [True, True, False, True]
    assert [(l["theta"], l["factor"]) for l in t["layers"]][1:3] == [(1e4, 1.0), (1e6, 4.0)]
    assert abs(t["scale"] - 24 ** -0.5) < 1e-15
    print(f"--no-torch: wrote {mdir}, {gpath} and tiny-gemma3-mm (no forward fixtures)", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description="Gemma 3 text fixtures (see the header)")
    ap.add_argument("--out", required=True, help="output folder: models/ and forward/ are made in it")
    ap.add_argument("--no-torch", action="store_true", help="check the writers with numpy weights only")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.no_torch:
        make_without_torch(a.out)
    else:
        make_with_torch(a.out)


if __name__ == "__main__":
    main()
