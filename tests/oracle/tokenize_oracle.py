#!/usr/bin/env python3
"""tokenize_oracle.py - reference token ids from Hugging Face `tokenizers`.

Prints one line per input file: the ids, space-separated (the same format as
build/bin/oscar-tokenize), so the two outputs can be compared line by line.

  tokenize_oracle.py --tokenizer-json .../qwen3/tokenizer.json FILE...
  tokenize_oracle.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf FILE...
  tokenize_oracle.py --compare A.ids B.ids --names FILELIST   (diff helper)

Run with $OSCAR_CACHE/venv/bin/python (numpy, gguf, tokenizers). Files are
read as bytes and decoded as strict UTF-8 (no newline translation).

--gguf builds the oracle independently of oscar's C code: the vocabulary and
merges are read with the `gguf` Python package and handed to
tokenizers.models.BPE; the pre-tokenizer is fixed from tokenizer.ggml.pre.
For "smollm" it is Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, use_regex=True)] with no normalizer, which
is exactly the pre_tokenizer / normalizer of the official
HuggingFaceTB/SmolLM2-135M-Instruct tokenizer.json (its model is BPE with
unk_token null, byte_fallback false, ignore_merges false; its 17 added tokens
ids 0..16 are special, which is what token_type CONTROL marks in the GGUF).
llama.cpp's LLAMA_VOCAB_PRE_TYPE_SMOLLM uses the same two regexes
("\\p{N}", then the GPT-2 pattern). So this tokenizer equals the official one
on any text.
"""
import argparse
import sys


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8")


def tokenizer_from_gguf(path):
    import gguf
    from tokenizers import Tokenizer, AddedToken, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(path)

    def field(name):
        f = r.fields.get(name)
        return None if f is None else f.contents()

    if field("tokenizer.ggml.model") != "gpt2":
        raise SystemExit("oracle: only gpt2 (byte-level BPE) GGUF tokenizers")
    pre = field("tokenizer.ggml.pre") or "default"
    tokens = field("tokenizer.ggml.tokens")
    types = field("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in field("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    model = models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(model)
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder"):
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
    elif pre in ("gpt2", "default"):
        tok.pre_tokenizer = bl
    else:
        raise SystemExit(f"oracle: tokenizer.ggml.pre {pre!r} not handled")
    tok.decoder = decoders.ByteLevel()
    added = [AddedToken(tokens[i], special=(types[i] == 3), normalized=False)
             for i in range(len(tokens)) if types[i] in (3, 4)]
    # add_tokens / add_special_tokens keep the ids: the contents are in vocab
    tok.add_special_tokens([a for a in added if a.special])
    tok.add_tokens([a for a in added if not a.special])
    for a in added:
        assert tok.token_to_id(a.content) == vocab[a.content]
    return tok


def compare(a_path, b_path, names):
    with open(a_path) as fa, open(b_path) as fb:
        a, b = fa.read().splitlines(), fb.read().splitlines()
    bad = 0
    if len(a) != len(b):
        print(f"document count differs: {len(a)} vs {len(b)}")
        return 1
    total = 0
    for i, (la, lb) in enumerate(zip(a, b)):
        ia, ib = la.split(), lb.split()
        total += len(ia)
        if ia != ib:
            bad += 1
            k = next((j for j in range(min(len(ia), len(ib))) if ia[j] != ib[j]), min(len(ia), len(ib)))
            name = names[i] if i < len(names) else f"#{i}"
            print(f"MISMATCH {name}: first difference at token {k}: "
                  f"oscar {ia[max(0, k - 3):k + 4]} vs oracle {ib[max(0, k - 3):k + 4]} "
                  f"(lengths {len(ia)} vs {len(ib)})")
    print(f"{len(a) - bad}/{len(a)} documents identical, {total} tokens")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-json")
    ap.add_argument("--gguf")
    ap.add_argument("--no-special", action="store_true")
    ap.add_argument("--compare", nargs=2)
    ap.add_argument("--names")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    if args.compare:
        names = open(args.names).read().splitlines() if args.names else []
        sys.exit(compare(args.compare[0], args.compare[1], names))
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args.tokenizer_json) if args.tokenizer_json else tokenizer_from_gguf(args.gguf)
    tok.encode_special_tokens = args.no_special
    texts = [read_text(p) for p in args.files]
    out = sys.stdout
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        out.write(" ".join(map(str, enc.ids)) + "\n")


if __name__ == "__main__":
    main()
