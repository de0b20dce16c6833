#!/usr/bin/env python3
# make-hf-checkpoint.py - a random-init Qwen3 checkpoint directory as transformers saves it
# (bf16 safetensors shards, config.json) with the repo's Qwen3 tokenizer, for the GPU
# end-to-end runs of oscar-calibrate on a real checkpoint directory (issue 13).
#
#   python3 tests/gpu/make-hf-checkpoint.py OUT [--shape qwen3-8b|small|small-moe] [--seed 0]
#
# qwen3-8b: the Qwen3-8B shape (36 layers, 4096, 32/8 heads of 128, ff 12288, untied), 16 GB.
# small: 8 layers, 512, 8/4 heads of 64, ff 1536 (the CPU-vs-CUDA agreement check).
# small-moe: Qwen3-MoE, 4 layers, 512, 8/4 heads of 64, 16 experts of 256, top-4 renormalised (the
# CPU-vs-CUDA agreement of the MoE layers, issue 14).
# Needs torch, transformers and the zstd tool (tests/gpu/gpu-deps.sh); runs on the GPU if present.
import argparse
import os
import shutil
import subprocess
import sys
import time

import torch
import transformers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOK = os.path.join(ROOT, "data", "tokenizers", "qwen3")

SHAPES = {
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128),
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=4, head_dim=64),
    "small-moe": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=4, head_dim=64, num_experts=16, num_experts_per_tok=4,
                      moe_intermediate_size=256, norm_topk_prob=True, decoder_sparse_step=1),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", default="qwen3-8b", choices=sorted(SHAPES))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    moe = a.shape.endswith("-moe")
    make_cfg = transformers.Qwen3MoeConfig if moe else transformers.Qwen3Config
    cfg = make_cfg(vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                                   rms_norm_eps=1e-6, tie_word_embeddings=False, **SHAPES[a.shape])
    torch.manual_seed(a.seed)
    t0 = time.time()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(dev):
        model = (transformers.Qwen3MoeForCausalLM if moe else transformers.Qwen3ForCausalLM)(cfg).to(torch.bfloat16)
    t1 = time.time()
    model.save_pretrained(a.out, safe_serialization=True, max_shard_size="5GB")
    t2 = time.time()
    subprocess.run(["zstd", "-q", "-d", "-f", os.path.join(TOK, "tokenizer.json.zst"), "-o",
                    os.path.join(a.out, "tokenizer.json")], check=True)
    shutil.copy(os.path.join(TOK, "tokenizer_config.json"), a.out)
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print(f"make-hf-checkpoint: {a.shape} on {dev}, torch {torch.__version__}, transformers {transformers.__version__}:"
          f" init {t1 - t0:.1f} s, save {t2 - t1:.1f} s, {size / 1e9:.2f} GB in {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
