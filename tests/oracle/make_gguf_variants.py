#!/usr/bin/env python3
# make_gguf_variants.py - GGUF variants of the dense forward fixtures tiny-llama, tiny-qwen2, tiny-qwen3 (issue 14),
# written from the committed tests/fixtures/models/<name>/{config.json,model.safetensors} the way llama.cpp's
# convert_hf_to_gguf.py writes that architecture, and checked against the committed transformers fixtures.
#
# How it was run (from the repository root, numpy 2.4.6, safetensors 0.8.0, gguf 0.19.0; no torch needed):
#
#     ~/.cache/oscar/venv/bin/python tests/oracle/make_gguf_variants.py --out tests/fixtures/models
#
# The converter's rules followed (TextModel / LlamaModel / Qwen2Model / Qwen3Model):
#   keys   <arch>.block_count, context_length (max_position_embeddings), embedding_length, feed_forward_length,
#          attention.head_count, attention.head_count_kv, rope.freq_base (rope_parameters.rope_theta),
#          attention.layer_norm_rms_epsilon, attention.key_length / value_length only when config.json has
#          head_dim, general.file_type 0 (all f32); llama also vocab_size and rope.dimension_count (head_dim,
#          else hidden / heads); qwen2 / qwen3 write no rope.dimension_count (llama.cpp takes the head size).
#   llama  arch "llama": the q / k rows of each head permuted from HF's half-split order to ggml's adjacent
#          pairs (llama.cpp runs normal, not NEOX, RoPE for llama), q with n_head, k with n_head_kv.
#   qwen2  arch "qwen2": q / k / v biases (attn_{q,k,v}.bias) kept f32, weights as stored (NEOX RoPE).
#   qwen3  arch "qwen3": attn_q_norm / attn_k_norm, as stored (NEOX RoPE).
#   tied embeddings (tiny-llama, tiny-qwen3): no output.weight, llama.cpp reuses token_embd.
# No tokenizer is written: the fixtures are random-init models without one.
#
# Check: each file is read back as llama.cpp reads it (ggml RoPE style from the arch, head size from key_length)
# and run through a float64 numpy forward against tests/fixtures/forward/<name> (logits and q/k/v at the
# captured layers, rel-L2 < 1e-5). Controls that must miss: llama with the permutation left out, qwen2 with its
# biases zeroed, qwen3 without its q / k norm weights.
import argparse
import json
import math
import os
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
NAMES = ("tiny-llama", "tiny-qwen2", "tiny-qwen3")
TOL = 1e-5  # float64 reference vs transformers' fp32: expected ~1e-7
ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}
LAYER_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
               "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
               "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
               "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
               "self_attn.k_norm.weight": "attn_k_norm.weight", "self_attn.o_proj.weight": "attn_output.weight",
               "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
               "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def ggml_permute(w, n_head):
    # rows of each head from HF's (2, D/2) half-split order to ggml's (D/2, 2) adjacent pairs
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def ggml_unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# ---- writing, as convert_hf_to_gguf.py does ---------------------------------------------------------------
def write_gguf(path, name, cfg, sd, arch):
    import gguf
    tmap = gguf.get_tensor_name_map({"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2,
                                     "qwen3": gguf.MODEL_ARCH.QWEN3}[arch], cfg["num_hidden_layers"])
    C, Hq, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(C)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(Hq)
    w.add_head_count_kv(Hkv)
    w.add_rope_freq_base(float(cfg["rope_parameters"]["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    if cfg.get("head_dim") is not None:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(cfg.get("head_dim") or C // Hq)
    rp = cfg["rope_parameters"]
    if rp.get("rope_type", "default") != "default" or cfg.get("sliding_window") or cfg.get("use_sliding_window"):
        sys.exit(f"{name}: config.json has RoPE scaling or a window; this script writes plain dense models only")
    used = set()

    def put(gname, hf):
        t = sd[hf]
        if t.dtype != np.float32:
            sys.exit(f"{name}: {hf} is {t.dtype}, expected float32")
        used.add(hf)
        w.add_tensor(gname, np.ascontiguousarray(t))
    put("token_embd.weight", "model.embed_tokens.weight")
    put("output_norm.weight", "model.norm.weight")
    if not cfg.get("tie_word_embeddings"):
        put("output.weight", "lm_head.weight")
    for i in range(cfg["num_hidden_layers"]):
        for k, g in LAYER_NAMES.items():
            hf = f"model.layers.{i}.{k}"
            if hf not in sd:
                continue
            base, suffix = hf.rsplit(".", 1)
            mapped = tmap.get_name(base)
            if f"{mapped}.{suffix}" != f"blk.{i}.{g}":  # our table agrees with gguf-py's
                sys.exit(f"{name}: {hf} maps to {mapped}.{suffix} in gguf-py, expected blk.{i}.{g}")
            t = sd[hf]
            if arch == "llama" and k.startswith("self_attn.q_proj"):
                t = ggml_permute(t, Hq)
            elif arch == "llama" and k.startswith("self_attn.k_proj"):
                t = ggml_permute(t, Hkv)
            used.add(hf)
            w.add_tensor(f"blk.{i}.{g}", np.ascontiguousarray(t, np.float32))
    left = sorted(set(sd) - used)
    if left:
        sys.exit(f"{name}: tensors not converted: {left}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- reading back, as llama.cpp does, and a float64 forward in ggml's RoPE convention ---------------------
def read_gguf(path):
    import gguf
    r = gguf.GGUFReader(path)

    def val(key, default=None):
        f = r.fields.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v.tolist()[0]
    arch = val("general.architecture")
    t = {x.name: np.asarray(x.data, np.float64).reshape([int(n) for n in x.shape[::-1]]) for x in r.tensors}
    C, Hq, Hkv = (val(f"{arch}.{k}") for k in ("embedding_length", "attention.head_count", "attention.head_count_kv"))
    D = val(f"{arch}.attention.key_length", C // Hq)
    spec = dict(arch=arch, Hq=Hq, Hkv=Hkv, D=D, R=val(f"{arch}.rope.dimension_count", D),
                base=val(f"{arch}.rope.freq_base"), eps=val(f"{arch}.attention.layer_norm_rms_epsilon"),
                neox=arch != "llama")
    w = {"embed": t["token_embd.weight"], "norm": t["output_norm.weight"], "layers": []}
    w["head"] = t.get("output.weight", w["embed"])
    for i in range(val(f"{arch}.block_count")):
        # keys: the ggml names without ".weight" (attn_q, ...), biases as "attn_q.bias"
        w["layers"].append({g.removesuffix(".weight"): t[f"blk.{i}.{g}"] for g in
                            ("attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias",
                             "attn_k.bias", "attn_v.bias", "attn_q_norm.weight", "attn_k_norm.weight",
                             "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
                             "ffn_down.weight") if f"blk.{i}.{g}" in t})
    return spec, w


def forward(spec, w, tokens):
    Hq, Hkv, D, R, eps = spec["Hq"], spec["Hkv"], spec["D"], spec["R"], spec["eps"]
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    ang = pos[:, None] * (spec["base"] ** (-np.arange(0, R, 2, dtype=np.float64) / R))[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(a):
        if spec["neox"]:  # pairs (i, i + R/2)
            a1, a2 = a[..., : R // 2], a[..., R // 2: R]
            return np.concatenate([a1 * cos - a2 * sin, a2 * cos + a1 * sin, a[..., R:]], axis=-1)
        out = a.copy()  # ggml's normal mode: adjacent pairs (2i, 2i + 1)
        a1, a2 = a[..., 0:R:2], a[..., 1:R:2]
        out[..., 0:R:2], out[..., 1:R:2] = a1 * cos - a2 * sin, a2 * cos + a1 * sin
        return out
    x = w["embed"][tokens]
    qkv = {}
    for i, lw in enumerate(w["layers"]):
        h = rms(x, lw["attn_norm"])
        q, k, v = ((h @ lw[f"attn_{n}"].T + lw.get(f"attn_{n}.bias", 0.0)).reshape(T, -1, D) for n in "qkv")
        if "attn_q_norm" in lw:
            q, k = rms(q, lw["attn_q_norm"]), rms(k, lw["attn_k_norm"])
        q, k = rope(q), rope(k)
        qkv[i] = (q, k, v)
        rep = Hq // Hkv
        s = np.einsum("thd,shd->hts", q, np.repeat(k, rep, axis=1)) / math.sqrt(D)
        s = np.where((pos[:, None] >= pos[None, :])[None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", p, np.repeat(v, rep, axis=1)).reshape(T, Hq * D) @ lw["attn_output"].T
        h = rms(x, lw["ffn_norm"])
        g = h @ lw["ffn_gate"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ lw["ffn_up"].T)) @ lw["ffn_down"].T
    return rms(x, w["norm"]) @ w["head"].T, qkv


def load_fixture(fdir, V):
    rd = lambda n, dt: np.fromfile(os.path.join(fdir, n), dtype=np.dtype(dt).newbyteorder("<"))  # noqa: E731
    starts, toks = rd("seq_start.i32", np.int32), rd("tokens.i32", np.int32)
    seqs = [toks[starts[s]:starts[s + 1]] for s in range(len(starts) - 1)]
    with open(os.path.join(fdir, "index.json")) as f:
        layers = json.load(f)["layers"]
    T = len(toks)
    qkv = {l: tuple(rd(f"{c}{l}.f32", np.float32).reshape(T, -1) for c in "qkv") for l in layers}
    return seqs, rd("logits.f32", np.float32).reshape(T, V), qkv


def run(spec, w, seqs):
    outs = [forward(spec, w, s) for s in seqs]
    logits = np.concatenate([o[0] for o in outs])
    qkv = {l: tuple(np.concatenate([o[1][l][j] for o in outs]) for j in range(3)) for l in outs[0][1]}
    return logits, qkv


def check(name, spec, w, fixture):
    seqs, logits, ref = fixture
    lg, qkv = run(spec, w, seqs)
    e = rel_l2(lg, logits)
    eq = 0.0
    for l, (q, k, v) in ref.items():
        gq, gk, gv = qkv[l]
        if not spec["neox"]:  # ggml's pair order back to HF's, as the fixture captured it
            gq = gq.reshape(len(q), spec["Hq"], spec["D"] // 2, 2).swapaxes(2, 3)
            gk = gk.reshape(len(k), spec["Hkv"], spec["D"] // 2, 2).swapaxes(2, 3)
        eq = max(eq, *(rel_l2(np.reshape(a, b.shape), b) for a, b in ((gq, q), (gk, k), (gv, v))))
    print(f"{name}: numpy forward logits rel-L2 {e:.2e}, q/k/v max {eq:.2e}", file=sys.stderr)
    if not (e < TOL and eq < TOL):
        sys.exit(f"{name}: does not match tests/fixtures/forward (logits {e:.2e}, q/k/v {eq:.2e}, tolerance {TOL})")


def must_miss(name, what, spec, w, fixture):
    e = rel_l2(run(spec, w, fixture[0])[0], fixture[1])
    print(f"{name} {what}: logits rel-L2 {e:.2e} (must miss)", file=sys.stderr)
    if not e > 100 * TOL:
        sys.exit(f"{name} {what}: the control matches the fixture (rel-L2 {e:.2e})")


def main():
    ap = argparse.ArgumentParser(description="GGUF variants of tiny-llama / tiny-qwen2 / tiny-qwen3 (see the header)")
    ap.add_argument("--out", required=True, help="folder for <name>.gguf (tests/fixtures/models to refresh them)")
    ap.add_argument("--fixtures", default=FIX, help="models/ and forward/ to read (default tests/fixtures)")
    a = ap.parse_args()
    from safetensors.numpy import load_file
    os.makedirs(a.out, exist_ok=True)
    for name in NAMES:
        mdir = os.path.join(a.fixtures, "models", name)
        with open(os.path.join(mdir, "config.json")) as f:
            cfg = json.load(f)
        arch = ARCH.get(cfg["model_type"])
        if arch is None:
            sys.exit(f"{mdir}/config.json: model_type {cfg['model_type']!r} is not llama, qwen2 or qwen3")
        sd = load_file(os.path.join(mdir, "model.safetensors"))
        path = os.path.join(a.out, name + ".gguf")
        write_gguf(path, name, cfg, sd, arch)
        fixture = load_fixture(os.path.join(a.fixtures, "forward", name), cfg["vocab_size"])
        spec, w = read_gguf(path)
        check(name + ".gguf", spec, w, fixture)
        if arch == "llama":  # q / k stored in HF order under a llama arch: the pairs rotated are wrong
            bad = [dict(lw, attn_q=ggml_unpermute(lw["attn_q"], spec["Hq"]),
                        attn_k=ggml_unpermute(lw["attn_k"], spec["Hkv"])) for lw in w["layers"]]
            must_miss(name + ".gguf", "with the q / k permutation left out", spec, dict(w, layers=bad), fixture)
        if arch == "qwen2":
            bad = [{k: v for k, v in lw.items() if not k.endswith(".bias")} for lw in w["layers"]]
            must_miss(name + ".gguf", "with the q / k / v biases zeroed", spec, dict(w, layers=bad), fixture)
        if arch == "qwen3":
            bad = [dict(lw, attn_q_norm=np.ones_like(lw["attn_q_norm"]), attn_k_norm=np.ones_like(lw["attn_k_norm"]))
                   for lw in w["layers"]]
            must_miss(name + ".gguf", "with unit q / k norm weights", spec, dict(w, layers=bad), fixture)
        print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
