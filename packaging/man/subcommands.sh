#!/usr/bin/env bash
# subcommands.sh TOOL OUT - a help2man include file with a COMMANDS section
# holding each subcommand's own --help (for tools whose --help lists
# "commands:"), so the man page documents every command's options. Prints an
# empty include for tools without commands.
set -euo pipefail
tool=$1 out=$2
cmds=$("$tool" --help | sed -n '/^commands:/,/^$/{s/^  \([a-z][a-z-]*\) .*/\1/p}')
{
    if [ -n "$cmds" ]; then
        echo "[COMMANDS]"
        for c in $cmds; do
            echo ".SS $c"
            echo ".nf"
            # roff: a backslash is \e, a line may not start with . or '
            "$tool" "$c" --help | sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/"
            echo ".fi"
        done
    fi
} > "$out.tmp"
mv "$out.tmp" "$out"
