#!/usr/bin/env bash
# test-model-fifo.sh - regression for issue 18 item 17: --model naming a FIFO
# (or a model directory whose config.json is one) made every tool block in
# open() forever. Each tool must exit 1 at once with a message naming the
# path; `timeout` turns a hang into a failure. Needs no model.
source "$(dirname "$0")/common.sh"
mkfifo "$T/model.gguf" "$T/base.gguf" || fail "mkfifo"
mkdir "$T/hf" && mkfifo "$T/hf/config.json" || fail "mkfifo config.json"
printf 'It is a truth universally acknowledged.\n' > "$T/c.txt"
"$B/bin/oscar-make-artifact" "$T/art" 2 4 2 8 0 7 llama >/dev/null 2>&1 || fail "make artifact"

want_refused() { # want_refused PATH cmd...: exit 1 within the timeout, stderr names PATH
    local path=$1; shift
    timeout 60 "$@" >"$T/out" 2>"$T/err"; local rc=$?
    [ "$rc" != 124 ] || fail "$* hung (killed after 60 s)"
    [ "$rc" = 1 ] || fail "$* -> exit $rc, want 1: $(head -3 "$T/err")"
    grep -q "not a regular file" "$T/err" && grep -qF "$path" "$T/err" ||
        fail "$*: stderr lacks 'not a regular file' / '$path': $(head -3 "$T/err")"
}
for m in "$T/model.gguf" "$T/hf"; do
    want_refused "$m" "$B/bin/oscar-calibrate" --model "$m" --corpus "$T/c.txt" --out "$T/out-art"
    want_refused "$m" "$B/bin/oscar-verify" --model "$m" --corpus "$T/c.txt"
done
want_refused "$T/base.gguf" "$B/bin/oscar-zoo" export "$T/art" --format gguf --base "$T/base.gguf" --out "$T/x.gguf"
[ ! -e "$T/out-art" ] && [ ! -e "$T/x.gguf" ] || fail "an output was written"
echo "ok - calibrate, verify and zoo export refuse FIFOs at once"
