#!/usr/bin/env bash
# test-hub-faults.sh - oscar-zoo pull under injected faults (local Hub emulator):
# connection dropped mid-body (resume with Range), 500 and dropped headers
# (retry), 429 + Retry-After (waits), persistent truncation and wrong hashes
# (clear error, nothing in blobs/ or snapshots/), a full disk, 404 (.no_exist),
# bad token (X-Error-Code + request id), the token never reaching the CDN host,
# redirects to other protocols, revisions and repo ids that would leave the cache,
# the overall deadline and low-speed limit, an unreachable endpoint, and repo files
# that would overwrite --local-dir metadata.
source "$(dirname "$0")/hub-lib.sh"
start_emulator
P=m/calib
make_artifact "$T/art" 300000
$ZOO push "$T/art" --repo me/zoo --path-in-repo $P --quiet >/dev/null || fail "push"
SHA=$(sha256sum "$T/art/oscar.safetensors" | cut -d' ' -f1)
REPO="$HF_HUB_CACHE/models--me--zoo"
fresh() { rm -rf "$HF_HUB_CACHE"; emu_post /_emu/clear_log '{}'; }
no_entry() { # nothing half-written may be visible in the cache
    [ ! -e "$REPO/blobs/$SHA" ] || fail "$1: corrupt blob entered the cache"
    [ -z "$(find "$REPO/snapshots" -name oscar.safetensors 2>/dev/null)" ] || fail "$1: snapshot link exists"
}

# 1. dropped mid-body -> resumed with Range, verified
fresh
emu_fault '{"method":"GET","path_re":"^/lfs/","kind":"drop","count":1}'
out=$($ZOO pull me/zoo --quiet) || fail "pull after a drop"
cmp "$out/$P/oscar.safetensors" "$T/art/oscar.safetensors" || fail "resumed file differs"
emu_log | python3 -c '
import json, sys
log = [e for e in json.load(sys.stdin) if e["path"].startswith("/lfs/")]
assert len(log) == 2 and log[0]["range"] is None and log[1]["range"].startswith("bytes=") \
    and int(log[1]["range"][6:-1]) > 0, log
' || fail "no Range resume"

# 2. 500 on HEAD and a connection closed before the headers -> retried
fresh
emu_fault '{"method":"HEAD","path_re":"oscar.json$","kind":"500","count":2}'
emu_fault '{"method":"GET","path_re":"/tree/","kind":"drop_headers","count":1}'
$ZOO pull me/zoo --quiet >/dev/null || fail "pull with 500s"
n=$(emu_log | python3 -c 'import json,sys; print(sum(1 for e in json.load(sys.stdin) if e["method"]=="HEAD" and e["path"].endswith("oscar.json")))')
[ "$n" = 3 ] || fail "expected 3 HEADs (2 x 500 + success), got $n"

# 3. 429 with Retry-After: 1 -> waits at least a second, then succeeds
fresh
emu_fault '{"method":"GET","path_re":"/api/models/me/zoo/revision","kind":"429","retry_after":1,"count":1}'
t0=$(date +%s.%N)
$ZOO pull me/zoo --quiet >/dev/null || fail "pull with 429"
python3 -c "import sys; sys.exit(0 if float('$(date +%s.%N)') - $t0 >= 1.0 else 1)" || fail "Retry-After not honoured"

# 4. persistently truncated body -> clear error after the retries, no cache entry
fresh
emu_fault '{"method":"GET","path_re":"^/lfs/","kind":"drop","count":99}'
$ZOO pull me/zoo --quiet 2>"$T/err" && fail "truncated pull succeeded"
grep -q "oscar.safetensors" "$T/err" || fail "error does not name the file: $(cat "$T/err")"
no_entry truncate

# 5. wrong bytes (LFS: sha256; regular: git blob sha1) -> error, partial file deleted
for f in oscar.safetensors:sha256:'^/lfs/' oscar.json:'git blob sha1':'/resolve/.*oscar.json'; do
    name=${f%%:*}; rest=${f#*:}; algo=${rest%%:*}; re=${rest#*:}
    fresh
    emu_fault "{\"method\":\"GET\",\"path_re\":\"$re\",\"kind\":\"wrong_hash\",\"count\":99}"
    $ZOO pull me/zoo --path $P/$name --quiet 2>"$T/err" && fail "$name: corrupt download accepted"
    grep -q "$algo" "$T/err" || fail "$name: error does not mention $algo: $(cat "$T/err")"
    [ -z "$(find "$REPO/blobs" -type f -newer "$T/art/$name" -size +0 2>/dev/null | while read -r b; do
        python3 -c 'import hashlib,sys; d=open(sys.argv[1],"rb").read(); o=open(sys.argv[2],"rb").read(); print("bad" if d != o and len(d) == len(o) else "")' "$b" "$T/art/$name"; done)" ] \
        || fail "$name: a corrupt blob entered the cache"
    [ -z "$(find "$REPO/blobs" -name '*.incomplete' 2>/dev/null)" ] || fail "$name: partial file left after a hash mismatch"
    [ -z "$(find "$REPO/snapshots" -name "$name" 2>/dev/null)" ] || fail "$name: snapshot link exists"
done

# 6. a full disk -> I/O error, no partial blob left behind
fresh
mkdir -p "$T/full"
if mount -t tmpfs -o size=64k tmpfs "$T/full" 2>/dev/null; then
    HF_HUB_CACHE="$T/full" $ZOO pull me/zoo --path $P/oscar.safetensors --quiet 2>"$T/err" && fail "pull to a full disk succeeded"
    grep -qi "no space" "$T/err" || fail "full disk: unclear error: $(cat "$T/err")"
    [ -z "$(find "$T/full" -name '*.incomplete' -o -type f -size +1k)" ] || fail "full disk: partial file left"
    umount "$T/full"
else # no mount rights: a file size limit gives EFBIG the same way
    (ulimit -f 64; HF_HUB_CACHE="$T/full" $ZOO pull me/zoo --path $P/oscar.safetensors --quiet 2>"$T/err") \
        && fail "pull past the file size limit succeeded"
    grep -qi "too large" "$T/err" || fail "size limit: unclear error: $(cat "$T/err")"
fi

# 7. absent file -> exit 1, .no_exist marker; bad token -> X-Error-Code and request id
fresh
$ZOO pull me/zoo --path $P/missing.bin --quiet 2>"$T/err" && fail "missing path succeeded"
HF_TOKEN=hf_wrong $ZOO info me/zoo 2>"$T/err" && fail "bad token accepted"
grep -q "InvalidCredentials" "$T/err" && grep -q "request id emu-" "$T/err" || fail "bad token error: $(cat "$T/err")"
n=$(find "$REPO/.no_exist" -path "*/$P/missing.bin" -type f | wc -l)
[ "$n" = 1 ] || fail "no .no_exist/<commit>/$P/missing.bin marker"
grep -q "EntryNotFound\|no such file" "$T/err" || true

# 8. the token never reached the CDN host (127.0.0.2), and did reach the Hub
emu_log | python3 -c '
import json, sys
log = json.load(sys.stdin)
assert not [e for e in log if e["cdn"] and e["auth"]], "token leaked to the CDN"
assert all(e["auth"] for e in log if not e["cdn"] and not e["path"].startswith("/_emu")), "token not sent to the Hub"' \
    || fail "token host rule"

# 9. redirects are http(s) only, on every hop: a file:// body is never read (nor printed in the
#    error), a gopher:// hop never reaches the local service it names (here the emulator itself)
fresh
printf 'SECRET-CANARY\n' > "$T/secret"
emu_fault "{\"method\":\"HEAD\",\"path_re\":\"oscar.safetensors\$\",\"kind\":\"redirect\",\"location\":\"file://$T/secret\",\"count\":99}"
$ZOO pull me/zoo --path $P/oscar.safetensors --quiet 2>"$T/err" && fail "file:// redirect followed"
grep -q SECRET-CANARY "$T/err" && fail "file:// redirect: the local file was read: $(cat "$T/err")"
grep -q "only http and https" "$T/err" || fail "file:// redirect: unclear error: $(cat "$T/err")"
no_entry file-redirect
GOPHER="${ENDPOINT/http:/gopher:}/_GET%20/_emu/gopher-canary%20HTTP/1.0%0D%0A%0D%0A"
emu_fault "{\"method\":\"GET\",\"path_re\":\"/api/models/me/zoo/revision\",\"kind\":\"redirect\",\"location\":\"$GOPHER\",\"count\":99}"
$ZOO pull me/zoo --quiet 2>"$T/err" && fail "gopher:// redirect followed"
emu_log | python3 -c '
import json, sys
assert not [e for e in json.load(sys.stdin) if "gopher-canary" in e["path"]], "a gopher:// redirect reached the emulator"' \
    || fail "gopher:// redirect"
grep -q "only http and https" "$T/err" || fail "gopher:// redirect: unclear error: $(cat "$T/err")"

# 10. revisions and repo ids are checked before they reach a path, online and offline: a server
#     that answers any revision with a commit does not get refs/../../../../escaped written
fresh
$ZOO pull me/zoo --revision refs/pr/1 --quiet 2>"$T/err" && fail "refs/pr/1 does not exist on the emulator"
grep -q "RevisionNotFound" "$T/err" || fail "refs/pr/1 not asked for: $(cat "$T/err")"
emu_fault '{"method":"GET","path_re":"/api/models/me/zoo/revision/","kind":"any_revision","count":99}'
for off in 0 1; do
    HF_HUB_OFFLINE=$off $ZOO pull me/zoo --revision ../../../../escaped --quiet 2>"$T/err"; rc=$?
    [ $rc = 2 ] || fail "revision ../../../../escaped (offline=$off): want exit 2, got $rc: $(cat "$T/err")"
    grep -q "not a valid revision" "$T/err" || fail "bad revision: unclear error: $(cat "$T/err")"
done
for rev in refs/../x main.lock 'a b' '@{1}' /main 'x:y'; do
    $ZOO pull me/zoo --revision "$rev" --quiet 2>/dev/null; rc=$?
    [ $rc = 2 ] || fail "revision '$rev': want exit 2, got $rc"
done
[ -z "$(find "$T" -name escaped)" ] || fail "a ref was written outside the cache"
HF_HUB_OFFLINE=1 $ZOO pull 'a/b/../../../../x' --quiet 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "not a valid repo id" "$T/err" || fail "offline repo id with ..: rc $rc: $(cat "$T/err")"

# 11. an overall deadline: a Retry-After of an hour is not waited for (OSCAR_HUB_DEADLINE), and a
#     body dripping at 5 bytes/s is cut by the low-speed limit instead of running for hours
fresh
emu_fault '{"method":"GET","path_re":"/api/models/me/zoo/revision","kind":"429","retry_after":3600,"count":99}'
OSCAR_HUB_DEADLINE=3 timeout 60 $ZOO pull me/zoo 2>"$T/err"; rc=$?
[ $rc = 1 ] || fail "Retry-After 3600 with a 3 s deadline: want exit 1, got $rc"
grep -q "OSCAR_HUB_DEADLINE" "$T/err" || fail "deadline: unclear error: $(cat "$T/err")"
fresh
emu_fault '{"method":"GET","path_re":"^/lfs/","kind":"drip","interval":0.2,"count":99}'
OSCAR_HUB_LOW_SPEED_LIMIT=1000 HF_HUB_DOWNLOAD_TIMEOUT=1 timeout 60 \
    $ZOO pull me/zoo --path $P/oscar.safetensors --quiet 2>"$T/err"; rc=$?
[ $rc = 1 ] || fail "dripping body: want exit 1, got $rc"
grep -q "oscar.safetensors" "$T/err" || fail "drip: error does not name the file: $(cat "$T/err")"
no_entry drip

# 12. an unreachable endpoint is a network error, not "offline"
fresh
HF_ENDPOINT=http://127.0.0.1:9 $ZOO pull me/zoo --quiet 2>"$T/err" && fail "pull from a closed port succeeded"
grep -q "offline" "$T/err" && fail "unreachable endpoint reported as offline: $(cat "$T/err")"
grep -qi "connect" "$T/err" || fail "unreachable endpoint: unclear error: $(cat "$T/err")"

# 13. a repo file inside .cache/huggingface/ must not overwrite the --local-dir metadata
fresh
hostile=".cache/huggingface/download/$P/oscar.json.metadata"
printf '{"key":"header","value":{"summary":"hostile"}}\n{"key":"file","value":{"path":"%s","content":"%s","encoding":"base64"}}\n' \
    "$hostile" "$(printf 'evil\nevil\n0\n' | base64 -w0)" > "$T/hostile.ndjson"
curl -sf -X POST -H "Authorization: Bearer $HF_TOKEN" -H 'Content-Type: application/x-ndjson' \
    --data-binary @"$T/hostile.ndjson" "$ENDPOINT/api/models/me/zoo/commit/main" >/dev/null || fail "hostile commit"
$ZOO pull me/zoo --local-dir "$T/ld" --quiet 2>"$T/err" && fail "a repo file was let into the --local-dir metadata"
grep -q "$hostile" "$T/err" || fail "local-dir metadata: unclear error: $(cat "$T/err")"
! grep -rqs evil "$T/ld" || fail "hostile bytes reached $T/ld"
$ZOO pull me/zoo --path $P --local-dir "$T/ld" --quiet >/dev/null || fail "local-dir pull of the other files"
echo "ok"
