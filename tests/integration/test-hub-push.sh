#!/usr/bin/env bash
# test-hub-push.sh - oscar-zoo push against the local Hub emulator: model-card
# checks, multipart LFS uploads, no-op pushes, retries on 500/429, a
# parentCommit race (412), symlinks (followed only to files inside the folder),
# private repos and the token sources, ls/info --json, usage errors (exit 2).
source "$(dirname "$0")/hub-lib.sh"
start_emulator --multipart-threshold 100000 --chunk-size 65536
P=smollm2-135m/austen-t20000-g64
make_artifact "$T/art" 300000
commits() { emu_log | python3 -c 'import json,sys; print(sum(1 for e in json.load(sys.stdin) if "/commit/" in e["path"]))'; }

# usage errors -> 2
$ZOO 2>/dev/null; [ $? = 2 ] || fail "no args: want exit 2"
$ZOO push "$T/art" 2>/dev/null; [ $? = 2 ] || fail "push without --repo: want exit 2"
$ZOO frobnicate x 2>/dev/null; [ $? = 2 ] || fail "unknown command: want exit 2"
# (issue 20) an unknown command is named as one, not as a repo-id problem
$ZOO lst me/x 2>"$T/err"; [ $? = 2 ] && grep -q "unknown command 'lst'" "$T/err" || fail "lst: $(head -2 "$T/err")"
$ZOO pull a/b --bogus 2>/dev/null; [ $? = 2 ] || fail "unknown option: want exit 2"
$ZOO pull 'bad id/x/y' 2>/dev/null; [ $? = 2 ] || fail "bad repo id: want exit 2"

# model card: missing, broken YAML -> refused before any network write
cp -r "$T/art" "$T/nocard" && rm "$T/nocard/README.md"
$ZOO push "$T/nocard" --repo me/zoo --quiet 2>"$T/err" && fail "push without a model card"
grep -q "README.md" "$T/err" || fail "card error: $(cat "$T/err")"
cp -r "$T/art" "$T/badcard" && printf -- '---\nlicense: [apache-2.0\n---\n' > "$T/badcard/README.md"
$ZOO push "$T/badcard" --repo me/zoo --quiet 2>"$T/err" && fail "push with broken YAML"
grep -q "README.md:2" "$T/err" || fail "YAML error without line: $(cat "$T/err")"
[ "$(commits)" = 0 ] || fail "a refused push reached the Hub"

# push with 500 on preupload and 429 on the commit: retried; the 300 kB file goes multipart
emu_fault '{"method":"POST","path_re":"/preupload/","kind":"500","count":1}'
emu_fault '{"method":"POST","path_re":"/commit/","kind":"429","retry_after":0,"count":1}'
$ZOO push "$T/art" --repo me/zoo --path-in-repo $P --private --json > "$T/push.json" || fail "push"
python3 - "$T/push.json" <<'PY' || fail "push --json"
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["commit"]) == 40 and j["lfs"] == 1 and j["regular"] == 2 and j["unchanged"] == 0, j
PY
emu_log | python3 -c '
import json, sys
log = json.load(sys.stdin)
parts = [e for e in log if e["method"] == "PUT" and e["path"].startswith("/part/")]
assert len(parts) == 5, len(parts)                 # ceil(300000 / 65536)
assert any(e["path"].startswith("/lfs-complete/") for e in log)
assert any(e["path"].startswith("/lfs-verify/") for e in log)
assert not any(e["auth"] for e in log if e["cdn"]), "token sent to the upload host"' || fail "multipart upload"
out=$($ZOO pull me/zoo --path $P --quiet) || fail "pull after multipart push"
cmp "$out/$P/oscar.safetensors" "$T/art/oscar.safetensors" || fail "multipart round trip differs"

# same content again -> no commit
emu_post /_emu/clear_log '{}'
$ZOO push "$T/art" --repo me/zoo --path-in-repo $P --quiet > "$T/out" || fail "no-op push"
grep -q "no changes" "$T/out" && [ "$(commits)" = 0 ] || fail "no-op push committed"

# someone else commits between our preupload and our commit -> 412, exit 1
echo changed >> "$T/art/oscar.json"
emu_fault '{"method":"POST","path_re":"/preupload/","kind":"advance","repo":"me/zoo","count":1}'
$ZOO push "$T/art" --repo me/zoo --path-in-repo $P --quiet 2>"$T/err" && fail "stale parentCommit accepted"
grep -q "412" "$T/err" || fail "race error: $(cat "$T/err")"
$ZOO push "$T/art" --repo me/zoo --path-in-repo $P --quiet >/dev/null || fail "push after the race"

# symlinks: a link to a file inside the folder is pushed as that file's bytes; a link leaving the
# folder (file or directory), a link to a folder, and a loop are refused before any upload, naming the link
printf 'outside secret\n' > "$T/outside.txt"
mkdir -p "$T/outdir" && printf 'x\n' > "$T/outdir/f.txt"
for case in "leak.txt:$T/outside.txt" "outdir:$T/outdir" "up:.." "self:." "loop:loop"; do
    name=${case%%:*}; target=${case#*:}
    rm -rf "$T/lnk" && cp -r "$T/art" "$T/lnk" && ln -s "$target" "$T/lnk/$name"
    emu_post /_emu/clear_log '{}'
    timeout 60 $ZOO push "$T/lnk" --repo me/zoo --path-in-repo links --quiet 2>"$T/err"; rc=$?
    [ $rc = 1 ] || fail "symlink $name -> $target: want exit 1, got $rc: $(cat "$T/err")"
    grep -q "$T/lnk/$name" "$T/err" || fail "symlink $name: error does not name the link: $(cat "$T/err")"
    [ "$(emu_log | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = 1 ] \
        || fail "symlink $name: the refused push reached the Hub"   # the one entry: /_emu/log itself
done
rm -rf "$T/lnk" && cp -r "$T/art" "$T/lnk" && ln -s oscar.json "$T/lnk/alias.json"
$ZOO push "$T/lnk" --repo me/links --path-in-repo links --quiet >/dev/null || fail "push with a link inside the folder"
$ZOO ls me/links --path links --json | python3 -c '
import json, os, sys
ls = {e["path"]: e for e in json.load(sys.stdin)}
assert ls["links/alias.json"]["size"] == os.path.getsize(sys.argv[1]), ls' "$T/art/oscar.json" || fail "inside link content"

# private repo: anonymous -> refused; token from $HF_HOME/token and HF_TOKEN_PATH -> fine
$ZOO info me/zoo -q > /dev/null 2>"$T/err" && [ ! -s "$T/err" ] || fail "info -q: $(head -2 "$T/err")"
$ZOO info me/zoo --json | python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["private"] is True and j["files"] == 4, j' \
    || fail "info --json"
$ZOO ls me/zoo --json | python3 -c '
import json, sys
ls = {e["path"]: e for e in json.load(sys.stdin)}
f = ls["smollm2-135m/austen-t20000-g64/oscar.safetensors"]
assert f["size"] == 300000 and len(f["lfs_oid"]) == 64 and ls["smollm2-135m"]["type"] == "directory", ls' || fail "ls --json"
(unset HF_TOKEN; $ZOO info me/zoo --quiet 2>"$T/err") && fail "anonymous read of a private repo"
grep -q "RepoNotFound" "$T/err" || fail "anonymous error: $(cat "$T/err")"
mkdir -p "$HF_HOME" && printf '  hf_emulator_token\n' > "$HF_HOME/token"
(unset HF_TOKEN; $ZOO info me/zoo --quiet >/dev/null) || fail "token from \$HF_HOME/token"
printf 'hf_emulator_token\r\n' > "$T/tok"
(unset HF_TOKEN; rm "$HF_HOME/token"; HF_TOKEN_PATH="$T/tok" $ZOO info me/zoo --quiet >/dev/null) || fail "HF_TOKEN_PATH"
echo ok
