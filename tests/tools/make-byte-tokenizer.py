#!/usr/bin/env python3
"""A byte-level BPE tokenizer.json with no merges (token id = byte value), for the tiny model
fixtures, which ship no tokenizer. Uses GPT-2's byte-to-unicode table, as ByteLevel expects.

    make-byte-tokenizer.py OUT.json [--below N]   (--below: keep the bytes < N only, e.g. 128
                                                   for a model whose vocabulary is smaller than 256)
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--below", type=int, default=256)
a = ap.parse_args()
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
vocab = {chr(c): b for b, c in zip(bs, cs) if b < a.below}
with open(a.out, "w") as f:
    json.dump({"normalizer": None, "added_tokens": [],
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
               "model": {"type": "BPE", "vocab": vocab, "merges": []}}, f)
