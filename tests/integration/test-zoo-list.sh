#!/usr/bin/env bash
# test-zoo-list.sh - oscar-zoo list / search / push --revision NEW against the Hub emulator,
# cross-checked with the huggingface_hub client where it has the same call:
#   1. subcommands: their own --help, global options before or after, unknown commands (exit 2)
#   2. list: two artifacts in one repo with base model (id when recorded) and gate; --json fields;
#      a repo without artifacts (note on stderr, exit 0); malformed oscar.json files (warned, rest
#      listed, exit 1)
#   3. search: by base model through the card's tags, not another base model nor a non-oscar repo;
#      --author, --limit, pagination, private repos, --details; same repos as HfApi.list_models
#   4. push --revision NEW: the branch is made from main's head, then committed to; pullable there,
#      absent on main; HfApi.create_branch and oscar-zoo agree on the emulator's branch endpoint
source "$(dirname "$0")/hub-lib.sh"
MK="$BUILD/bin/oscar-make-artifact"
[ -x "$MK" ] || { echo "skip: $MK not built"; exit 77; }
start_emulator --page-size 2   # small pages: the tree and model listings paginate
SMOL=HuggingFaceTB/SmolLM2-135M-Instruct
QWEN=Qwen/Qwen3-0.6B
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }

# mk_art DIR PER_HEAD SEED BASE_NAME BASE_ID|- GATE|- TOKENS [GROUPING_LAYERS]: a synthetic artifact whose
# oscar.json records the given provenance (BASE_ID and GATE '-': left out, as in artifacts older than
# them) and --rotation-grouping auto's per-layer words when given
mk_art() {
    "$MK" "$1" 2 4 2 8 "$2" "$3" llama 2>/dev/null || fail "make artifact $1"
    python3 - "$@" <<'PY' || fail "edit artifact $1"
import json, sys
d, _, _, name, bid, gate, tokens = sys.argv[1:8]
j = json.load(open(d + "/oscar.json"))
md = j["metadata"]
md["oscar.base_model"], md["oscar.calib_tokens"] = name, tokens
if len(sys.argv) > 8: md["oscar.grouping_layers"] = sys.argv[8]
if bid != "-": md["oscar.base_model_id"] = bid
if gate != "-": md["oscar.gate"] = gate
json.dump(j, open(d + "/oscar.json", "w"), indent=2)
PY
}
# mk_card DIR LIBRARY BASE_ID: a folder with only a root model card
mk_card() {
    mkdir -p "$1"
    printf -- '---\nlicense: apache-2.0\nlibrary_name: %s\ntags:\n- %s\n- kv-cache\nbase_model:\n- %s\n---\n# rotations\n' \
        "$2" "$2" "$3" > "$1/README.md"
}
push() { $ZOO push "$@" --quiet >/dev/null || fail "push $*"; }

# ---- 1. subcommands -------------------------------------------------------------------------
$ZOO push --help > "$T/help" || fail "push --help exit"
grep -q "^Usage: oscar-zoo push DIR --repo ID" "$T/help" && grep -q -- "--path-in-repo" "$T/help" \
    && ! grep -q -- "--format" "$T/help" || fail "push --help: $(head -3 "$T/help")"
$ZOO --help list > "$T/help2" && cmp -s "$T/help2" <($ZOO list --help) || fail "--help before the command"
grep -q "exit status is 1" "$T/help2" || fail "list --help does not document the exit status for bad oscar.json"
$ZOO --help | grep -q "^  search  BASE_MODEL" || fail "overview lacks search"
$ZOO frobnicate me/x 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "^oscar-zoo: unknown command 'frobnicate'" "$T/err" && grep -q "push pull ls list search info export" "$T/err" \
    || fail "unknown command: rc $rc: $(cat "$T/err")"
$ZOO push "$T" --repo me/x --format pt 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "oscar-zoo push: unrecognized option '--format'" "$T/err" || fail "export option on push: rc $rc $(cat "$T/err")"
$ZOO list --version | grep -q "^oscar-zoo " || fail "--version after the command"
ok "subcommands: own --help, global options before and after, unknown command and option (exit 2)"

# ---- 2. list --------------------------------------------------------------------------------
mk_card "$T/card" oscar "$SMOL"
mk_art "$T/a" 0 1 SmolLM2-135M-Instruct "$SMOL" pass 20000
mk_art "$T/b" 1 2 SmolLM2-135M-Instruct - - 4000
mk_art "$T/c" 1 3 SmolLM2-135M-Instruct "$SMOL" pass 8192 kv_head,layer
push "$T/card" --repo me/zoo
push "$T/a" --repo me/zoo --path-in-repo smollm2-135m/austen-t20000
push "$T/b" --repo me/zoo --path-in-repo smollm2-135m/brown-t4000-head
push "$T/c" --repo me/zoo --path-in-repo smollm2-135m/zz-auto
$ZOO list me/zoo > "$T/list" 2>"$T/err" || fail "list: $(cat "$T/err")"
[ "$(wc -l < "$T/list")" = 4 ] || fail "list: want a header and 3 lines: $(cat "$T/list")"
grep -Eq "^smollm2-135m/austen-t20000 +$SMOL +llama +layer +20000 +pass$" "$T/list" \
    || fail "list: artifact a: $(cat "$T/list")"
grep -Eq "^smollm2-135m/brown-t4000-head +SmolLM2-135M-Instruct +llama +kv_head +4000 +-$" "$T/list" \
    || fail "list: artifact b (no id, no gate): $(cat "$T/list")"
grep -Eq "^smollm2-135m/zz-auto +$SMOL +llama +auto 1/2 +8192 +pass$" "$T/list" \
    || fail "list: artifact c (--rotation-grouping auto, 1 of 2 layers per KV head): $(cat "$T/list")"
ok "list: the artifacts with base model (id when recorded), grouping (auto: layers per KV head), tokens and gate"
$ZOO -q list me/zoo --json > "$T/list.json" || fail "list --json"
python3 - "$T/list.json" "$SMOL" <<'PY' || fail "list --json fields"
import json, sys
arts = json.load(open(sys.argv[1]))
assert [a["path"] for a in arts] == ["smollm2-135m/austen-t20000", "smollm2-135m/brown-t4000-head",
                                     "smollm2-135m/zz-auto"], arts
a, b, c = arts
want = {"path", "base_model", "base_model_id", "architecture", "grouping", "calib_tag", "calib_tokens", "gate"}
assert set(a) == want and set(b) == want, (set(a) ^ want, set(b) ^ want)
assert a["base_model_id"] == sys.argv[2] and a["base_model"] == "SmolLM2-135M-Instruct" and a["gate"] == "pass", a
assert a["calib_tokens"] == 20000 and a["grouping"] == "layer" and a["architecture"] == "llama", a
assert b["base_model_id"] is None and b["gate"] is None and b["grouping"] == "kv_head" and b["calib_tokens"] == 4000, b
assert a["calib_tag"] == "seq0_prompt0_group64", a
assert c["grouping"] == "kv_head" and c["grouping_auto"] == {"layers": 2, "kv_head_layers": 1}, c
PY
emu_post /_emu/clear_log '{}'
$ZOO list me/zoo --quiet >/dev/null || fail "list again"
emu_log | python3 -c '
import json, sys
gets = [e["path"] for e in json.load(sys.stdin) if "/resolve/" in e["path"]]
assert gets and all(p.endswith("/oscar.json") for p in gets), gets' || fail "list downloaded more than the oscar.json files"
ok "list --json has the fields; only oscar.json files are fetched"

mk_card "$T/plain" transformers "$SMOL"
push "$T/plain" --repo me/plain
$ZOO list me/plain > "$T/out" 2>"$T/err" || fail "list of a repo without artifacts: exit $?"
[ ! -s "$T/out" ] && grep -q "no oscar artifacts" "$T/err" || fail "empty list: stdout '$(cat "$T/out")' stderr '$(cat "$T/err")'"
[ "$($ZOO list me/plain --json -q)" = "[]" ] || fail "empty list --json"
ok "a repo without artifacts: nothing on stdout, a note on stderr, exit 0"

mkdir -p "$T/broken/bad-json" "$T/broken/bad-gate"
cp -r "$T/a" "$T/broken/good"
cp "$T/card/README.md" "$T/broken/README.md"
printf '{"metadata": {"oscar.base_model": "x"' > "$T/broken/bad-json/oscar.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["metadata"]["oscar.gate"]=1; json.dump(j,open(sys.argv[2],"w"))' \
    "$T/a/oscar.json" "$T/broken/bad-gate/oscar.json"
push "$T/broken" --repo me/broken
$ZOO list me/broken > "$T/out" 2>"$T/err"; rc=$?
[ $rc = 1 ] || fail "list with malformed oscar.json: want exit 1, got $rc"
grep -q "^good " "$T/out" && [ "$(wc -l < "$T/out")" = 2 ] || fail "list with malformed files: $(cat "$T/out")"
grep -q "warning: me/broken: bad-json/oscar.json: not valid JSON" "$T/err" \
    && grep -q "warning: me/broken: bad-gate/oscar.json: metadata \"oscar.gate\" is not a string" "$T/err" \
    && grep -q "oscar-zoo list: 2 of 3 oscar.json files could not be read" "$T/err" || fail "malformed warnings: $(cat "$T/err")"
$ZOO list me/broken --json 2>/dev/null > "$T/out"; rc=$?
[ $rc = 1 ] && python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); assert [x["path"] for x in a] == ["good"], a' "$T/out" \
    || fail "list --json with malformed files: rc $rc: $(cat "$T/out")"
ok "malformed oscar.json: warned naming the file, the rest listed, exit 1"
$ZOO list me/nope --quiet 2>"$T/err"; rc=$?
[ $rc = 1 ] && grep -q "RepoNotFound" "$T/err" || fail "list of a missing repo: rc $rc: $(cat "$T/err")"

# ---- 3. search ------------------------------------------------------------------------------
mk_art "$T/q" 0 3 Qwen3-0.6B "$QWEN" fail 8000
mk_card "$T/q" oscar "$QWEN"   # the card of an artifact without a known Hub id names no base_model
push "$T/q" --repo me/qwen-zoo
mk_card "$T/other" oscar "$SMOL"
push "$T/other" --repo team/smol-rot
push "$T/other" --repo me/secret --private
$ZOO search $SMOL > "$T/out" 2>"$T/err" || fail "search: $(cat "$T/err")"
[ "$(awk '{print $1}' "$T/out" | sort | tr '\n' ' ')" = "me/broken me/secret me/zoo team/smol-rot " ] \
    || fail "search $SMOL: $(cat "$T/out")"
grep -Eq "^me/zoo +20[0-9]{2}-[0-9]{2}-[0-9]{2}T" "$T/out" || fail "search: no last modified: $(cat "$T/out")"
[ "$($ZOO search $QWEN -q | awk '{print $1}')" = "me/qwen-zoo" ] || fail "search $QWEN"
(unset HF_TOKEN; $ZOO search $SMOL -q | grep -q "me/secret") && fail "anonymous search shows a private repo"
ok "search finds the repos of a base model (4, over 2 pages), not another base model's nor a non-oscar repo"
[ "$($ZOO search $SMOL --author team -q | awk '{print $1}')" = "team/smol-rot" ] || fail "search --author"
[ "$($ZOO search $SMOL --limit 3 -q | wc -l)" = 3 ] || fail "search --limit 3"
$ZOO search Qwen/Nothing > "$T/out" 2>"$T/err" && [ ! -s "$T/out" ] && grep -q "no repos of oscar artifacts" "$T/err" \
    || fail "search without a match: $(cat "$T/out" "$T/err")"
$ZOO search 'bad id/x' -q 2>/dev/null; [ $? = 2 ] || fail "search with a bad id: want exit 2"
$ZOO search $SMOL --limit 0 2>"$T/err"; [ $? = 2 ] && grep -q -- "--limit: 0 is out of range" "$T/err" \
    || fail "search --limit 0: want exit 2 naming the option: $(cat "$T/err")"
ok "search --author, --limit, no match (note, exit 0), bad id (exit 2)"
$ZOO search $SMOL --author me --details --json > "$T/out" 2>"$T/err"; rc=$?
[ $rc = 1 ] || fail "search --details with a broken repo: want exit 1, got $rc"
python3 - "$T/out" <<'PY' || fail "search --details --json"
import json, sys
found = {r["id"]: r for r in json.load(open(sys.argv[1]))}
assert sorted(found) == ["me/broken", "me/secret", "me/zoo"], found
assert [a["path"] for a in found["me/zoo"]["artifacts"]] == ["smollm2-135m/austen-t20000", "smollm2-135m/brown-t4000-head",
                                                            "smollm2-135m/zz-auto"]
assert [a["path"] for a in found["me/broken"]["artifacts"]] == ["good"] and found["me/secret"]["artifacts"] == []
assert found["me/secret"]["private"] is True and found["me/zoo"]["lastModified"].startswith("20"), found
PY
$ZOO search $SMOL --author me --details 2>/dev/null > "$T/out"
grep -A3 "^me/zoo " "$T/out" | grep -q "^    smollm2-135m/brown-t4000-head " && grep -A1 "^me/zoo " "$T/out" | grep -q "^    PATH " \
    || fail "search --details lines: $(cat "$T/out")"
ok "search --details lists the artifacts in each repo (--json too); malformed ones make it exit 1"

if have_hf_python; then
    "$VENV_PY" - "$SMOL" "$(for id in $($ZOO search $SMOL -q | awk '{print $1}'); do printf '%s,' "$id"; done)" <<'PY' \
        || fail "huggingface_hub list_models against the emulator"
import sys
from huggingface_hub import HfApi
base, ours = sys.argv[1], sorted(x for x in sys.argv[2].split(",") if x)
api = HfApi()
got = sorted(m.id for m in api.list_models(filter=["oscar", "base_model:" + base]))
assert got == ours, (got, ours)
assert [m.id for m in api.list_models(filter="oscar", author="team")] == ["team/smol-rot"]
assert len(list(api.list_models(filter="oscar", limit=3))) == 3
m = next(iter(api.list_models(search="qwen-zoo", expand=["lastModified", "tags"])))
assert m.id == "me/qwen-zoo" and m.last_modified is not None and "base_model:Qwen/Qwen3-0.6B" in m.tags, m
PY
    ok "HfApi.list_models through the emulator finds the same repos as oscar-zoo search"
fi

# ---- 4. push --revision NEW -------------------------------------------------------------------
main_head=$($ZOO info me/zoo --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha"])')
mk_art "$T/n" 0 4 SmolLM2-135M-Instruct "$SMOL" pass 1000
emu_post /_emu/clear_log '{}'
$ZOO push "$T/n" --repo me/zoo --path-in-repo exp/new --revision exp/try-1 --json > "$T/push.json" 2>"$T/err" \
    || fail "push to a new branch: $(cat "$T/err")"
emu_log | python3 -c '
import json, sys
posts = [e["path"] for e in json.load(sys.stdin) if e["method"] == "POST"]
assert "/api/models/me/zoo/branch/exp%2Ftry-1" in posts, posts
assert posts.index("/api/models/me/zoo/branch/exp%2Ftry-1") < [i for i, p in enumerate(posts) if "/commit/" in p][0], posts' \
    || fail "no branch creation before the commit"
[ "$($ZOO info me/zoo --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sha"])')" = "$main_head" ] \
    || fail "push to a new branch moved main"
out=$($ZOO pull me/zoo --revision exp/try-1 --path exp/new --quiet) || fail "pull at the new branch"
cmp "$out/exp/new/oscar.safetensors" "$T/n/oscar.safetensors" || fail "new branch content differs"
[ "$($ZOO list me/zoo --revision exp/try-1 -q | grep -c "^exp/new ")" = 1 ] || fail "list --revision on the new branch"
$ZOO pull me/zoo --path exp/new --quiet 2>/dev/null && fail "the new branch's file is on main"
ok "push --revision NEW creates the branch from main's head, commits there, main unchanged"
$ZOO push "$T/n" --repo me/zoo --path-in-repo exp/new --revision exp/try-1 -q | grep -q "no changes" || fail "second push to the branch"
$ZOO push "$T/n" --repo me/zoo --revision refs/pr/9 -q 2>/dev/null; rc=$?
[ $rc = 1 ] || fail "push to a missing refs/pr: want exit 1, got $rc"
if have_hf_python; then
    "$VENV_PY" - "$main_head" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["commit"])' "$T/push.json")" <<'PY' \
        || fail "huggingface_hub view of the branch"
import sys
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError
main_head, commit = sys.argv[1:]
api = HfApi()
refs = {b.name: b.target_commit for b in api.list_repo_refs("me/zoo").branches}
assert refs["exp/try-1"] == commit and refs["main"] == main_head, refs
hf_hub_download("me/zoo", "exp/new/oscar.json", revision="exp/try-1")
api.create_branch("me/zoo", branch="py-branch")                 # the same endpoint from the other client
api.create_branch("me/zoo", branch="py-branch", exist_ok=True)  # 409 taken as success
try:
    api.create_branch("me/zoo", branch="py-branch")
except HfHubHTTPError as e:
    assert e.response.status_code == 409, e
else:
    raise SystemExit("second create_branch accepted")
assert {b.name: b.target_commit for b in api.list_repo_refs("me/zoo").branches}["py-branch"] == main_head
PY
    $ZOO push "$T/n" --repo me/zoo --path-in-repo py --revision py-branch -q >/dev/null || fail "push to the python-made branch"
    "$VENV_PY" - "$main_head" <<'PY' || fail "commit on the python-made branch"
import sys
from huggingface_hub import HfApi, hf_hub_download
refs = {b.name: b.target_commit for b in HfApi().list_repo_refs("me/zoo").branches}
assert refs["py-branch"] not in (sys.argv[1], refs["exp/try-1"]), refs
hf_hub_download("me/zoo", "py/oscar.json", revision="py-branch")
PY
    ok "huggingface_hub sees oscar-zoo's branch; HfApi.create_branch makes one oscar-zoo pushes to"
fi
echo "ok: $n checks"
