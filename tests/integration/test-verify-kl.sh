#!/usr/bin/env bash
# test-verify-kl.sh - oscar-verify's next-token comparison and --score-from on SmolLM2-135M, tiny
# windows (2 x 128 tokens, sink 8 + recent 16; methods that need no artifact); 9 short runs, 1-4 min on 2 cores:
#  - report.json and --json carry ppl_stderr, nll_stderr, next_token per method and config.score_from;
#    bf16 against itself (the logits every method is compared with, recomputed from the hidden states
#    bf16 kept) has KL 0, same top-1 100 %, RMS Δp 0; the INT2 methods have KL > 0 with ordered
#    quantiles, top-1 < 100 %, and Δppl = ppl - ppl(bf16);
#  - the method order changes no number (bf16 runs first either way);
#  - --score-from 64 scores targets 64..127 of each window (n_scored 2 x 64) and moves the numbers;
#    --score-from >= --ctx and negative values are usage errors (exit 2) that say why;
#  - without bf16 the next_token fields are null, with a warning; the text table has the KL block;
#  - --recall 2: config.recall (depths 0 and 1, needle positions, answer lengths) and per method
#    exact / tokens_right per depth; --recall 0 and 17 are usage errors.
# Skips (77) without the model or corpus.
source "$(dirname "$0")/common.sh"
need_smollm2
V=$B/bin/oscar-verify
P=$AUSTEN/persuasion.txt
[ -f "$P" ] || skip "persuasion.txt missing"
PYTHON=$PY; [ -x "$PYTHON" ] || PYTHON=python3
head -c 20000 "$P" > "$T/c.txt"
SMALL=(--model "$MODEL" --corpus "$T/c.txt" --ctx 128 --tokens 256 --sink 8 --recent 16 --metric-tokens 64 --threads 2)
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }

"$V" "${SMALL[@]}" --methods naive,bf16,kivi --report "$T/rep" --quiet 2>"$T/err" || fail "report run: $(cat "$T/err")"
"$V" "${SMALL[@]}" --methods bf16,kivi,naive --json >"$T/order.json" 2>"$T/err" || fail "json run: $(cat "$T/err")"
"$PYTHON" - "$T/rep/report.json" "$T/order.json" <<'PY' || fail "next-token fields"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["config"]["score_from"] == 0, a["config"]
m = {x["name"]: x for x in a["methods"]}
for x in a["methods"]:
    t = x["next_token"]
    assert t["reference"] == "bf16" and t["n"] == x["n_scored"] == 2 * 127, (x["name"], t["n"], x["n_scored"])
    assert x["ppl_stderr"] > 0 and x["nll_stderr"] > 0, x["name"]
    assert abs(t["dppl"] - (x["ppl"] - m["bf16"]["ppl"])) < 1e-9 * x["ppl"], x["name"]
bt = m["bf16"]["next_token"]
assert bt["kl_mean"] == 0 and bt["kl_max"] == 0 and bt["same_top1"] == 1 and bt["dp_rms"] == 0, bt
for k in ("naive", "kivi"):
    t = m[k]["next_token"]
    assert t["kl_mean"] > 0 and t["kl_stderr"] > 0 and 0 < t["same_top1"] < 1 and t["dp_rms"] > 0, (k, t)
    assert t["kl_median"] <= t["kl_p90"] <= t["kl_p95"] <= t["kl_p99"] <= t["kl_max"], (k, t)
    print(f"{k}: ppl {m[k]['ppl']:.3f} +- {m[k]['ppl_stderr']:.3f}, KL {t['kl_mean']:.4f} +- {t['kl_stderr']:.4f} "
          f"p99 {t['kl_p99']:.3f}, top-1 {100 * t['same_top1']:.1f} %")
# naive INT2 with no rotation hurts more than KIVI
assert m["naive"]["next_token"]["kl_mean"] > m["kivi"]["next_token"]["kl_mean"]
mb = {x["name"]: x for x in b["methods"]}
assert [x["name"] for x in b["methods"]] == ["bf16", "kivi", "naive"]
for k in m:
    for f in ("ppl", "nll_sum", "ppl_stderr", "next_token", "mean", "layers"):
        assert m[k][f] == mb[k][f], (k, f)
PY
ok "report.json / --json: ppl_stderr and next_token per method; bf16 vs itself KL 0 and top-1 100 %; order-free"

"$V" "${SMALL[@]}" --methods bf16,naive --score-from 64 --json >"$T/sf.json" 2>"$T/err" || fail "score-from: $(cat "$T/err")"
"$PYTHON" - "$T/sf.json" "$T/rep/report.json" <<'PY' || fail "--score-from"
import json, sys
s, a = (json.load(open(f)) for f in sys.argv[1:])
assert s["config"]["score_from"] == 64
ms, ma = ({x["name"]: x for x in r["methods"]} for r in (s, a))
for k in ("bf16", "naive"):
    assert ms[k]["n_scored"] == ms[k]["next_token"]["n"] == 2 * 64, (k, ms[k]["n_scored"])
    assert ms[k]["nll_sum"] != ma[k]["nll_sum"]
assert ms["bf16"]["next_token"]["kl_mean"] == 0 and ms["naive"]["next_token"]["kl_mean"] > 0
PY
want2() { # want2 GREP args...: exit 2 with GREP on stderr
    local pat=$1; shift
    "$V" "$@" >"$T/out" 2>"$T/err"; local rc=$?
    [ $rc = 2 ] || fail "$* -> exit $rc, want 2: $(head -3 "$T/err")"
    grep -q -- "$pat" "$T/err" || fail "$*: stderr lacks '$pat': $(head -3 "$T/err")"
}
want2 "score-from 128 must be < --ctx 128" "${SMALL[@]}" --methods bf16 --score-from 128
want2 "score-from 4096 must be < --ctx 2048" --model "$MODEL" --corpus "$T/c.txt" --score-from 4096
want2 "score-from" "${SMALL[@]}" --methods bf16 --score-from -1
want2 "score-from" "${SMALL[@]}" --methods bf16 --score-from 12x
ok "--score-from 64 scores targets 64..127; >= --ctx, negative or non-numeric values exit 2"

"$V" "${SMALL[@]}" --methods naive --json >"$T/nobf.json" 2>"$T/err" || fail "no bf16: $(cat "$T/err")"
"$V" "${SMALL[@]}" --methods naive >"$T/nobf.txt" 2>"$T/err2" || fail "no bf16 table"
grep -q "bf16 is not in --methods" "$T/err2" || fail "no warning without bf16: $(cat "$T/err2")"
grep -q "next-token KL: not computed" "$T/nobf.txt" || fail "table without bf16: $(cat "$T/nobf.txt")"
"$PYTHON" -c "import json,sys; m=json.load(open(sys.argv[1]))['methods'][0]; \
assert m['next_token'] is None and m['ppl_stderr'] > 0, m" "$T/nobf.json" || fail "next_token without bf16"
"$V" "${SMALL[@]}" --methods bf16,naive >"$T/tab.txt" 2>/dev/null || fail "table run"
grep -q "^next token vs bf16, 254 positions per method" "$T/tab.txt" && grep -q "^naive .*+/-" "$T/tab.txt" \
    || fail "table: $(cat "$T/tab.txt")"
ok "without bf16: next_token null and a warning; the text table's next-token block"
"$V" "${SMALL[@]}" --methods bf16,naive --recall 2 --json >"$T/rec.json" 2>"$T/err" || fail "recall: $(cat "$T/err")"
"$PYTHON" - "$T/rec.json" "$T/rep/report.json" <<'PY' || fail "--recall fields"
import json, sys
r, a = (json.load(open(f)) for f in sys.argv[1:])
c = r["config"]["recall"]
assert c["depths"] == [0.0, 1.0] and c["needle_positions"][0] == 0 and c["needle_positions"][1] > 64, c
assert all(n >= 2 for n in c["answer_tokens"]), c   # a space and digits
ma = {x["name"]: x for x in a["methods"]}
for x in r["methods"]:
    rc = x["recall"]
    assert len(rc["exact"]) == len(rc["tokens_right"]) == 2, rc
    assert all(0 <= t <= n for t, n in zip(rc["tokens_right"], c["answer_tokens"])), rc
    assert rc["exact"] == [t == n for t, n in zip(rc["tokens_right"], c["answer_tokens"])], rc
    assert rc["exact_fraction"] == sum(rc["exact"]) / 2
    assert x["nll_sum"] == ma[x["name"]]["nll_sum"], x["name"]   # the probes leave the perplexity alone
    print(x["name"], "recall", rc)
assert a["config"]["recall"] is None and ma["bf16"]["recall"] is None
PY
want2 "recall" "${SMALL[@]}" --methods bf16 --recall 0
want2 "recall" "${SMALL[@]}" --methods bf16 --recall 17
ok "--recall 2: per-depth exact / tokens right in report.json; out-of-range counts exit 2"
echo "test-verify-kl: $n checks passed"
