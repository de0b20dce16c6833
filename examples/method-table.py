#!/usr/bin/env python3
"""method-table.py - one table of perplexity ratios to bf16 and post-W_O errors, in and out of domain,
from oscar-verify --json reports (issue 15's tables; examples/issue15-tables.sh runs them).
  method-table.py ROW=REPORT_PREFIX:METHOD ... -- KIND:LABEL ...
A report is REPORT_PREFIX.LABEL.json, KIND is in|out; each report must hold bf16 (the reference,
scored on the same tokens) and METHOD. Ratio = ppl / ppl_bf16; +- is the standard error of
ln(ppl / ppl_bf16) over the scored positions (report's next_token.ln_ppl_ratio_stderr)."""
import json, math, sys

def main(argv):
    if "--" not in argv:
        sys.exit(__doc__)
    cut = argv.index("--")
    rows = [a.split("=", 1) for a in argv[:cut]]
    sets = [a.split(":", 1) for a in argv[cut + 1:]]
    if not rows or not sets or any(len(r) != 2 for r in rows) or any(len(s) != 2 or s[0] not in ("in", "out") for s in sets):
        sys.exit(__doc__)
    kinds = [k for k in ("in", "out") if any(s[0] == k for s in sets)]
    head = ["method", "bits/elem"] + ["%s (%s) ppl / bf16" % (l, k) for k, l in sets] \
        + (["mean out"] if "out" in kinds else []) + ["post-W_O %s%s" % (k, " (mean)" if k == "out" else "") for k in kinds]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    bf16 = {}
    for name, spec in rows:
        prefix, meth = spec.rsplit(":", 1)
        cells, ratio_out, err_in, err_out, bpe = [], [], [], [], None
        for kind, label in sets:
            path = "%s.%s.json" % (prefix, label)
            rep = json.load(open(path))
            ms = {m["name"]: m for m in rep["methods"]}
            if "bf16" not in ms or meth not in ms:
                sys.exit("%s: needs bf16 and %s" % (path, meth))
            ref = ms["bf16"]["ppl"]
            # bf16 must be the same in every report of a set: the same tokens were scored
            if bf16.setdefault(label, ref) != ref:
                sys.exit("%s: bf16 ppl %.6f, another report of %s has %.6f" % (path, ref, label, bf16[label]))
            m = ms[meth]
            bpe = m.get("bpe") if bpe is None else bpe
            r = m["ppl"] / ref
            nt = m.get("next_token") or {}
            se = nt.get("ln_ppl_ratio_stderr")
            cells.append("%.4f" % r + (" ± %.3f" % se if se is not None and meth != "bf16" else ""))
            (ratio_out if kind == "out" else []).append(r)
            (err_out if kind == "out" else err_in).append(m["mean"]["out_rel"])
        mean = lambda v: sum(v) / len(v) if v else float("nan")
        tail = (["%.4f" % mean(ratio_out)] if "out" in kinds else []) \
            + ["%.3e" % mean(err_in if k == "in" else err_out) for k in kinds]
        print("| %s | %.3f | %s | %s |" % (name, bpe, " | ".join(cells), " | ".join(tail)))
    print("\nbf16 perplexity: " + ", ".join("%s %.3f" % (l, bf16[l]) for _, l in sets))

if __name__ == "__main__":
    main(sys.argv[1:])
