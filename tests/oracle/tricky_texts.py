#!/usr/bin/env python3
"""tricky_texts.py OUTDIR [SEED] - writes edge-case documents (UTF-8 files) for
the tokenizer oracle test: special and added tokens, NFC-sensitive text,
digits in several scripts, whitespace runs, contractions, control bytes that
SmolLM2 has no token for, very long words and seeded random Unicode.
The seed is printed; pass it back to reproduce a failure."""
import os
import random
import sys

out = sys.argv[1]
seed = int(sys.argv[2]) if len(sys.argv) > 2 else random.SystemRandom().randrange(1 << 31)
print(f"tricky_texts seed {seed}", file=sys.stderr)
rng = random.Random(seed)
docs = [
    "",
    "\n",
    "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<think>\nhm</think>ok<|endoftext|>",
    "abc<|endoftext|>def <|im_start|><|im_start|> <|im_start <|im_end|x <tool_call></tool_call>",
    "Caf\u00e9 Cafe\u0301 na\u0131ve n\u0308 \u212b \u00c5 A\u030a \uac00 \u1100\u1161 ﬁ \u2126",
    "12345 3.14159 1,000,000 007 x2y3 \u0661\u0662\u0663 \u2460\u2461 \u00bd \u2163 \uff11\uff12",
    "a  b   c\t\td \n\n\n  e \r\n f\u00a0g\u3000h \u2028 i\u0085j   ",
    "I'm you'll they'd IT'S We'LL don't 's 'S 'Ll '' 're've'm'd",
    "a\x04b\x06c\x13d\x14e\x16f\x1dg \x00 \x7f \x1b[0m",
    "\U0001F600\U0001F44D\U0001F3FD \U0001F1FA\U0001F1F8 \u2764\ufe0f \u65e5\u672c\u8a9e \u0420\u0443\u0441 \u0639\u0631\u0628\u064a",
    "a" * 5000 + " " + "xyz" * 3000 + " " + "9" * 2000 + " " + "!?" * 1500,
    "def foo(x):\n    return x ** 2  # comment\n\n\tif x:\n\t\tpass\n",
    "   leading\n\n\n\ntrailing    ",
]
pools = [(0x20, 0x7f), (0xa0, 0x250), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff), (0x900, 0x97f),
         (0x3040, 0x30ff), (0x4e00, 0x4fff), (0xac00, 0xad00), (0x2000, 0x206f), (0x1f300, 0x1f64f), (0x300, 0x36f)]
for _ in range(30):
    chars = []
    for _ in range(rng.randrange(1, 400)):
        if rng.random() < 0.25:
            chars.append(rng.choice(" \n\t\r  0123456789'"))
        else:
            lo, hi = rng.choice(pools)
            c = rng.randrange(lo, hi)
            if 0xd800 <= c <= 0xdfff:
                c = 0x41
            chars.append(chr(c))
    docs.append("".join(chars))
os.makedirs(out, exist_ok=True)
for i, d in enumerate(docs):
    with open(os.path.join(out, f"t{i:03d}.txt"), "wb") as f:
        f.write(d.encode("utf-8"))
