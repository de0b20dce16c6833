#!/usr/bin/env python3
# make-seeds.py - writes the small seed and regression inputs of fuzz-model
# and fuzz-tokenizer-json into tests/fuzz/corpus/ (the files there are
# committed; rerun this only to change them). Needs numpy and gguf-py, e.g.
# the oracle venv:
#
#     ~/.cache/oscar/venv/bin/python tests/fuzz/make-seeds.py
#
# fuzz-model (see fuzz-model.c for the input layout):
#   tiny-gguf.gguf      2-layer llama, 4-wide, with a byte-level BPE tokenizer in its metadata
#   tiny-hf.bin         the same model as config.json \0 model.safetensors
#   reg-overflow.bin    issue 18 item 7: head counts whose products overflow int64
#   reg-layers.bin      issue 18 item 8: config with 1 layer over 2-layer weights
#   reg-wide.gguf       issue 18 item 9: embedding_length 2^18 over 4-wide tensors
# fuzz-pt (`make-seeds.py pt` writes only these; no gguf-py needed):
#   export-layer.pt / export-head.pt   formats/pt-writer.c's files (2 layers, D 4; per layer / per KV head),
#                       written by `oscar-zoo export` from build/bin/oscar-make-artifact artifacts
#   oracle-*.pt         tests/oracle/torch_pt_oracle.py: Python's pickler (hadamard: a shared tensor,
#                       small: deflated records, optr: per KV head with extra keys, k_mean)
#   reg-os-system.pt    a pickle calling os.system (must be refused)
#   reg-deflate-claim.pt  a fuzzer finding, kept by hand: a deflated record claiming 2.8 GB (was allocated up front)
# fuzz-layer-ckpt's seeds are not made here: the target writes them itself (see fuzz-layer-ckpt.c).
# fuzz-tokenizer-json:
#   tiny.json           BPE with NFC, Digits + ByteLevel, added tokens (+ \0 tokenizer_config.json)
#   reg-split-string.json  issue 18 item 12: Split with a String pattern
#   reg-no-byte-tokens.json  issue 18 item 7: no single-byte tokens, every piece encodes to nothing
#   reg-big-id.json     a 90-byte file with token id 2^30 - 1 (per-id tables of 9 GiB before)
import json
import os
import struct

import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")

# Model shape: llama, 2 layers, hidden 4, 2 query heads, 1 KV head, head_dim 2, ff 4, vocab 8.
L, C, H, HKV, D, F, V = 2, 4, 2, 1, 2, 4, 8
rng = np.random.default_rng(18)


def weights():
    w = {"embd": (V, C), "norm": (C,), "output": (V, C)}
    t = {k: rng.standard_normal(s).astype(np.float32) for k, s in w.items()}
    for i in range(L):
        for k, s in {"attn_norm": (C,), "q": (H * D, C), "k": (HKV * D, C), "v": (HKV * D, C),
                     "o": (C, H * D), "ffn_norm": (C,), "gate": (F, C), "up": (F, C), "down": (C, F)}.items():
            t[f"{i}.{k}"] = rng.standard_normal(s).astype(np.float32)
    return t


GGUF_NAMES = {"attn_norm": "attn_norm", "q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output",
              "ffn_norm": "ffn_norm", "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
HF_NAMES = {"attn_norm": "input_layernorm", "q": "self_attn.q_proj", "k": "self_attn.k_proj",
            "v": "self_attn.v_proj", "o": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
            "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def write_gguf(path, t, embedding_length=C):
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("fuzz-tiny")
    w.add_block_count(L)
    w.add_context_length(64)
    w.add_embedding_length(embedding_length)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    tokens = ["<|endoftext|>", "H", "e", "l", "o", "\u0120", "He", "ll"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] + [1] * (len(tokens) - 1))
    w.add_token_merges(["H e", "l l"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_tensor("token_embd.weight", t["embd"])
    w.add_tensor("output_norm.weight", t["norm"])
    w.add_tensor("output.weight", t["output"])
    for i in range(L):
        for k, n in GGUF_NAMES.items():
            w.add_tensor(f"blk.{i}.{n}.weight", t[f"{i}.{k}"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def safetensors_bytes(t):
    named = {"model.embed_tokens.weight": t["embd"], "model.norm.weight": t["norm"], "lm_head.weight": t["output"]}
    for i in range(L):
        for k, n in HF_NAMES.items():
            named[f"model.layers.{i}.{n}.weight"] = t[f"{i}.{k}"]
    header, off, data = {}, 0, b""
    for name in sorted(named):
        a = named[name]
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        data += a.tobytes()
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def config(**over):
    c = {"model_type": "llama", "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": H,
         "num_key_value_heads": HKV, "intermediate_size": F, "vocab_size": V, "tie_word_embeddings": False}
    c.update(over)
    return json.dumps(c, separators=(",", ":")).encode()


def put(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def byte_level(b):
    vis = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = [x for x in range(256) if x not in vis]
    return chr(b) if b in vis else chr(256 + extra.index(b))


def main():
    os.makedirs(os.path.join(CORPUS, "fuzz-model"), exist_ok=True)
    t = weights()
    write_gguf(os.path.join(CORPUS, "fuzz-model", "tiny-gguf.gguf"), t)
    write_gguf(os.path.join(CORPUS, "fuzz-model", "reg-wide.gguf"), t, embedding_length=1 << 18)
    st = safetensors_bytes(t)
    put("fuzz-model", "tiny-hf.bin", config() + b"\0" + st)
    put("fuzz-model", "reg-layers.bin", config(num_hidden_layers=1) + b"\0" + st)
    put("fuzz-model", "reg-overflow.bin", config(hidden_size=1 << 30, num_attention_heads=1 << 30,
                                                 num_key_value_heads=1, head_dim=1 << 30) + b"\0")

    vocab = {byte_level(b): b for b in range(256)}
    for i, tok in enumerate(["he", "ll", "hell", "hello", "\u0120h"]):
        vocab[tok] = 256 + i
    merges = ["h e", "l l", "he ll", "hell o", "\u0120 h"]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    tiny = {"normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True}, bl]},
            "added_tokens": [{"id": 300, "content": "<|im_start|>", "special": True, "normalized": False},
                             {"id": 301, "content": "<u>", "special": False, "normalized": True}],
            "model": {"type": "BPE", "vocab": vocab, "merges": merges}}
    cfg = {"bos_token": None, "eos_token": "<|im_start|>", "add_bos_token": False}
    put("fuzz-tokenizer-json", "tiny.json", json.dumps(tiny).encode() + b"\0" + json.dumps(cfg).encode())
    split = dict(tiny, normalizer=None, pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "l+"}, "behavior": "Isolated", "invert": False}, bl]})
    put("fuzz-tokenizer-json", "reg-split-string.json", json.dumps(split).encode())
    empty = {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "use_regex": False}]},
             "added_tokens": [{"id": 0, "content": "<s>", "special": True}],
             "model": {"vocab": {}, "merges": []}}
    put("fuzz-tokenizer-json", "reg-no-byte-tokens.json", json.dumps(empty).encode())
    big = {"pre_tokenizer": bl, "model": {"vocab": {"a": (1 << 30) - 1}, "merges": []}}
    put("fuzz-tokenizer-json", "reg-big-id.json", json.dumps(big).encode())


def main_pt():
    build = os.environ.get("OSCAR_BUILD", os.path.join(ROOT, "build"))
    ora = os.path.join(ROOT, "tests", "oracle", "torch_pt_oracle.py")
    with tempfile.TemporaryDirectory() as t:
        for name, per_head in (("export-layer.pt", "0"), ("export-head.pt", "1")):
            art, out = os.path.join(t, "art" + per_head), os.path.join(t, "pt" + per_head)
            subprocess.run([os.path.join(build, "bin", "oscar-make-artifact"), art, "2", "2", "2", "4", per_head, "3"],
                           check=True, capture_output=True)
            subprocess.run([os.path.join(build, "bin", "oscar-zoo"), "export", art, "--format", "pt", "--out", out, "-q"],
                           check=True, capture_output=True)
            put("fuzz-pt", name, open(os.path.join(out, "k_rotation_qqt_r_h_pbr.pt"), "rb").read())
        for variant, files in (("hadamard", ["k_rotation_hadamard.pt"]), ("small", ["k_rotation_qqt_r_h_pbr.pt"]),
                               ("optr", ["k_rotation.pt", "k_mean_decode.pt"])):
            d = os.path.join(t, variant)
            subprocess.run([sys.executable, ora, "write", variant, d], check=True)
            for f in files:
                put("fuzz-pt", f"oracle-{variant}-{f}", open(os.path.join(d, f), "rb").read())
        subprocess.run([sys.executable, ora, "hostile", os.path.join(t, "evil.pt"), "/nonexistent/pwned"], check=True)
        put("fuzz-pt", "reg-os-system.pt", open(os.path.join(t, "evil.pt"), "rb").read())


if __name__ == "__main__":
    if sys.argv[1:] == ["pt"]:
        main_pt()
    else:
        import gguf  # noqa: F401 (the model seeds need it)
        main()
