#!/usr/bin/env bash
# test-cli-numbers.sh - numeric options of oscar-calibrate and oscar-verify
# are parsed whole and range-checked: each bad value exits 2 at once with a
# message naming the option, and nothing is written. (With atoi, --tokens 1e3
# calibrated on 1 token and -t 100000 crashed in libgomp.)
set -u
. "$(dirname "$0")/common.sh"
need_smollm2

refuse() { # tool option-name args...
    local tool=$1 name=$2
    shift 2
    local rc=0
    timeout 30 "$B/bin/$tool" "$@" > "$T/out" 2> "$T/err" || rc=$?
    [ "$rc" -eq 2 ] || fail "$tool $*: exit $rc, want 2 ($(head -c 300 "$T/err"))"
    grep -q -- "$name" "$T/err" || fail "$tool $*: message does not name $name: $(head -c 300 "$T/err")"
    [ ! -e "$T/o" ] || fail "$tool $*: wrote $T/o"
}

CAL=(-m "$MODEL" -f "$CORPUS" -o "$T/o" -q)
refuse oscar-calibrate --tokens "${CAL[@]}" --tokens 1e3
refuse oscar-calibrate --tokens "${CAL[@]}" --tokens 2k
refuse oscar-calibrate --tokens "${CAL[@]}" --tokens 99999999999999999999
refuse oscar-calibrate --tokens "${CAL[@]}" --tokens -5
refuse oscar-calibrate --threads "${CAL[@]}" -t abc
refuse oscar-calibrate --threads "${CAL[@]}" -t 100000
refuse oscar-calibrate --threads "${CAL[@]}" -t 0
refuse oscar-calibrate --batch "${CAL[@]}" -b 2147483648
refuse oscar-calibrate --batch "${CAL[@]}" -c 2048 -b 4096
refuse oscar-calibrate --seq-len "${CAL[@]}" -c 8
refuse oscar-calibrate --seed "${CAL[@]}" --seed -1
refuse oscar-calibrate --clip "${CAL[@]}" --clip 0.9,0.9x
refuse oscar-calibrate --checkpoint-every "${CAL[@]}" --checkpoint-every 1k
refuse oscar-calibrate --sink "${CAL[@]}" --sink x

VER=(-m "$MODEL" -f "$AUSTEN/persuasion.txt" -o "$T/o" -q)
refuse oscar-verify --ctx "${VER[@]}" --ctx 2k
refuse oscar-verify --tokens "${VER[@]}" --tokens 1e4
refuse oscar-verify --threads "${VER[@]}" -t 100000
refuse oscar-verify --page "${VER[@]}" --page 0
refuse oscar-verify --metric-tokens "${VER[@]}" --metric-tokens 512x
refuse oscar-verify --prompt "${VER[@]}" --ctx 64 --prompt 128
echo ok
