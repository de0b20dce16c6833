#!/usr/bin/env python3
# compare-artifacts.py - two oscar artifacts of the same model and corpus (e.g. the CPU and
# the CUDA layer-major pass): eigenvalues (relative to each matrix's largest), clips, gate
# means, and max |R_a - R_b| for information (eigenvector signs are a free choice, so the
# rotations of two backends may differ by sign flips and are not asserted).
#
#   python3 tests/gpu/compare-artifacts.py A B [--eig-rtol 1e-4]
# Exit 1 if an eigenvalue differs by more than eig-rtol relative to the layer's largest.
import argparse
import json
import sys

import numpy as np
from safetensors.numpy import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--eig-rtol", type=float, default=1e-4)
    x = ap.parse_args()
    ta, tb = load_file(f"{x.a}/oscar.safetensors"), load_file(f"{x.b}/oscar.safetensors")
    worst, worst_name, rot = 0.0, "", 0.0
    for name in sorted(ta):
        if name not in tb or ta[name].shape != tb[name].shape:
            print(f"FAIL: {name} missing or of another shape in {x.b}")
            return 1
        a, b = ta[name].astype(np.float64), tb[name].astype(np.float64)
        if name.endswith("eigenvalues"):
            scale = np.abs(a).max(axis=-1, keepdims=True) + 1e-300
            d = float((np.abs(a - b) / scale).max())
            if d > worst:
                worst, worst_name = d, name
        elif name.endswith("rotation"):
            rot = max(rot, float(np.abs(a - b).max()))
    ja, jb = json.load(open(f"{x.a}/oscar.json")), json.load(open(f"{x.b}/oscar.json"))
    print(f"eigenvalues: max |a - b| / max|a| = {worst:.3g} ({worst_name}); rotations: max |a - b| = {rot:.3g} "
          f"(sign choices of the eigenvectors differ freely)")
    for key in ("oscar.gate", "oscar.k_clip_ratio", "oscar.v_clip_ratio", "oscar.capture_dtype"):
        print(f"{key}: {ja['metadata'].get(key)} vs {jb['metadata'].get(key)}")
    print(f"gate means: {ja['summary']['gate']['mean']} vs {jb['summary']['gate']['mean']}")
    if worst > x.eig_rtol:
        print(f"FAIL: eigenvalues differ by {worst:.3g} > {x.eig_rtol:g}")
        return 1
    print("compare-artifacts: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
