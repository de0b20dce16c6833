#!/usr/bin/env python3
# gguf_model_check.py - every tensor of a GGUF file dequantized by oscar
# (oscar-gguf-dump --dequant-all, streamed over a pipe) against
# gguf.quants.dequantize. Prints per-type max |diff| and mismatching value
# counts; exits 1 on any difference (the two evaluate the same float32
# expressions in the same order, so they must agree bit for bit).
#   usage: gguf_model_check.py OSCAR_GGUF_DUMP MODEL.gguf
import subprocess
import sys

import numpy as np
import gguf


def main():
    dump, path = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(path)
    p = subprocess.Popen([dump, "--dequant-all", path], stdout=subprocess.PIPE)
    stats, bad = {}, 0
    for t in r.tensors:
        n = int(np.prod(t.shape))
        buf = p.stdout.read(4 * n)
        if len(buf) != 4 * n:
            print(f"{t.name}: short read from oscar-gguf-dump")
            return 1
        ours = np.frombuffer(buf, dtype=np.float32)
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
        nbad = int(np.count_nonzero(ours.view(np.uint32) != ref.view(np.uint32)))
        s = stats.setdefault(t.tensor_type.name, [0, 0, 0.0, 0])
        s[0] += 1
        s[1] += n
        s[2] = max(s[2], float(diff.max()) if n else 0.0)
        s[3] += nbad
        bad += nbad
    rc = p.wait()
    for name, (nt, ne, mx, nb) in sorted(stats.items()):
        print(f"{name:6s} tensors {nt:4d} values {ne:10d} max|diff| {mx:.3g} bit-mismatches {nb}")
    print(f"total tensors {len(r.tensors)}, mismatching values {bad}, dump rc {rc}")
    return 0 if bad == 0 and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
