#!/usr/bin/env bash
# test-hub-python.sh - oscar-zoo against the official huggingface_hub client,
# both talking to the local Hub emulator:
#   1. files pushed by oscar-zoo download with hf_hub_download (LFS + regular)
#   2. files uploaded with HfApi.upload_folder are pulled by oscar-zoo
#   3. a cache written by oscar-zoo is read by huggingface_hub with HF_HUB_OFFLINE=1
#   4. a cache written by huggingface_hub is read by oscar-zoo offline
#   5. --local-dir metadata written by oscar-zoo is accepted by huggingface_hub (no re-download)
#   6. single files resolve offline; a partial snapshot (interrupted pull) is refused offline by
#      both clients, through the tree listing (trees/<commit>.json) whichever client wrote it
source "$(dirname "$0")/hub-lib.sh"
have_hf_python || { echo "skip: no huggingface_hub in $VENV_PY"; exit 77; }
start_emulator --page-size 3
P=smollm2-135m/austen-t20000-g64

make_artifact "$T/art" 200000
$ZOO push "$T/art" --repo me/zoo --path-in-repo $P --message "oscar push" --quiet >/dev/null || fail "push"

# 1. huggingface_hub downloads what oscar-zoo pushed
"$VENV_PY" - "$T/art" "$T/py-cache" $P <<'PY' || fail "hf_hub_download of oscar-zoo push"
import filecmp, sys
from huggingface_hub import hf_hub_download, HfApi
art, cache, p = sys.argv[1:]
for name in ("README.md", "oscar.json", "oscar.safetensors"):
    got = hf_hub_download("me/zoo", p + "/" + name, cache_dir=cache)
    assert filecmp.cmp(got, art + "/" + name, shallow=False), name
info = HfApi().model_info("me/zoo", files_metadata=True)
lfs = {s.rfilename: s.lfs is not None for s in info.siblings}
assert lfs[p + "/oscar.safetensors"] and not lfs[p + "/oscar.json"], lfs
print("python read oscar push: ok")
PY

# 1b. one file, offline, from that cache (hf_hub_download writes no tree listing)
out=$(HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:9 $ZOO pull me/zoo --path $P/oscar.json --cache-dir "$T/py-cache" --quiet) \
    || fail "offline single-file pull from the python cache"
cmp "$out/$P/oscar.json" "$T/art/oscar.json" || fail "offline single file differs"

# 2. oscar-zoo pulls what huggingface_hub uploaded
mkdir -p "$T/pyart/calib"
printf 'hello\n' > "$T/pyart/calib/notes.txt"
head -c 150000 /dev/urandom > "$T/pyart/calib/rot.safetensors"
"$VENV_PY" - "$T/pyart" <<'PY' || fail "upload_folder"
import sys
from huggingface_hub import HfApi
api = HfApi()
api.create_repo("me/pyzoo", exist_ok=True)
api.upload_folder(folder_path=sys.argv[1], repo_id="me/pyzoo", path_in_repo="m", commit_message="py upload")
PY
out=$($ZOO pull me/pyzoo --path m/calib --quiet) || fail "pull of python upload"
cmp "$out/m/calib/rot.safetensors" "$T/pyart/calib/rot.safetensors" || fail "rot.safetensors differs"
cmp "$out/m/calib/notes.txt" "$T/pyart/calib/notes.txt" || fail "notes.txt differs"
[ -L "$out/m/calib/rot.safetensors" ] || fail "snapshot entry is not a symlink"
case "$(readlink "$out/m/calib/rot.safetensors")" in ../../../../blobs/*) ;; *) fail "bad symlink target" ;; esac

# 3. huggingface_hub reads oscar-zoo's cache offline (same snapshot paths)
$ZOO pull me/zoo --quiet > "$T/snap" || fail "pull me/zoo"
HF_HUB_OFFLINE=1 "$VENV_PY" - "$HF_HUB_CACHE" "$(cat "$T/snap")" $P "$T/art" <<'PY' || fail "python offline read of oscar cache"
import filecmp, sys
from huggingface_hub import hf_hub_download, snapshot_download, scan_cache_dir
cache, snap, p, art = sys.argv[1:]
got = hf_hub_download("me/zoo", p + "/oscar.safetensors", cache_dir=cache)
assert got == snap + "/" + p + "/oscar.safetensors", (got, snap)
assert filecmp.cmp(got, art + "/oscar.safetensors", shallow=False)
assert snapshot_download("me/zoo", cache_dir=cache) == snap
info = scan_cache_dir(cache)
assert not info.warnings, info.warnings
repos = {r.repo_id: r for r in info.repos}
assert repos["me/zoo"].nb_files >= 4, repos["me/zoo"].nb_files
print("python offline read of oscar cache: ok")
PY

# 4. oscar-zoo reads huggingface_hub's cache offline
out=$(HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:9 $ZOO pull me/zoo --path $P --cache-dir "$T/py-cache" --quiet) || fail "offline pull from python cache"
cmp "$out/$P/oscar.safetensors" "$T/art/oscar.safetensors" || fail "offline file differs"
HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:9 $ZOO pull me/zoo --path nope --cache-dir "$T/py-cache" --quiet 2>/dev/null && fail "offline pull of a missing path succeeded"

# 5. --local-dir: huggingface_hub trusts oscar-zoo's metadata (no second GET)
$ZOO pull me/zoo --path $P --local-dir "$T/ld" --quiet >/dev/null || fail "local-dir pull"
cmp "$T/ld/$P/oscar.safetensors" "$T/art/oscar.safetensors" || fail "local-dir file differs"
emu_post /_emu/clear_log '{}'
"$VENV_PY" - "$T/ld" $P <<'PY' || fail "python local-dir reuse"
import sys
from huggingface_hub import hf_hub_download
ld, p = sys.argv[1:]
assert hf_hub_download("me/zoo", p + "/oscar.safetensors", local_dir=ld) == ld + "/" + p + "/oscar.safetensors"
PY
emu_log | python3 -c '
import json, sys
log = json.load(sys.stdin)
gets = [e for e in log if e["method"] == "GET" and ("/lfs/" in e["path"] or "/resolve/" in e["path"])]
assert not gets, gets' || fail "huggingface_hub re-downloaded a file oscar-zoo had written to --local-dir"
# 6. offline single files, and partial snapshots refused by both clients, whichever wrote them
out=$(HF_HUB_OFFLINE=1 $ZOO pull me/zoo --path $P/oscar.safetensors --quiet) || fail "offline single file from oscar cache"
cmp "$out/$P/oscar.safetensors" "$T/art/oscar.safetensors" || fail "offline single file differs"
emu_fault '{"method":"GET","path_re":"^/lfs/","kind":"drop","count":99}'  # an interrupted pull
$ZOO pull me/zoo --cache-dir "$T/partial" --quiet 2>/dev/null && fail "pull with a dead CDN succeeded"
emu_post /_emu/clear_log '{}'
HF_HUB_OFFLINE=1 $ZOO pull me/zoo --cache-dir "$T/partial" --quiet 2>"$T/err" && fail "offline pull of a partial snapshot succeeded"
grep -q "incomplete" "$T/err" && grep -q "$P/oscar.safetensors" "$T/err" || fail "partial snapshot: unclear error: $(cat "$T/err")"
HF_HUB_OFFLINE=1 $ZOO pull me/zoo --path $P/oscar.json --cache-dir "$T/partial" --quiet >/dev/null \
    || fail "offline pull of a file the partial snapshot has"
HF_HUB_OFFLINE=1 "$VENV_PY" - "$T/partial" <<'PY' || fail "huggingface_hub accepted the partial snapshot oscar-zoo left"
import sys
from huggingface_hub import snapshot_download
try:
    snapshot_download("me/zoo", cache_dir=sys.argv[1])
except Exception as e:
    assert "incomplete" in str(e), repr(e)
else:
    raise SystemExit("partial snapshot accepted")
PY
"$VENV_PY" - "$T/hf-partial" $P <<'PY' || fail "snapshot_download into a fresh cache"
import os, sys
from huggingface_hub import snapshot_download
snap = snapshot_download("me/zoo", cache_dir=sys.argv[1])  # online: writes trees/<commit>.json
os.remove(os.path.join(snap, sys.argv[2], "oscar.safetensors"))  # as if interrupted
PY
HF_HUB_OFFLINE=1 $ZOO pull me/zoo --cache-dir "$T/hf-partial" --quiet 2>"$T/err" && fail "oscar-zoo accepted a partial huggingface_hub snapshot"
grep -q "incomplete" "$T/err" || fail "partial python snapshot: unclear error: $(cat "$T/err")"
echo "ok"
