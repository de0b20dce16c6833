#!/usr/bin/env bash
# test-install.sh - make install / make uninstall into a staging root
# (DESTDIR=$T PREFIX=/opt/oscar) from the existing build:
#  - every file in place with its mode (tools 755, the rest 644), and nothing else;
#  - the installed oscar-verify --version runs;
#  - a C program that includes <oscar.h> builds with nothing but
#    `pkg-config --cflags --libs --static oscar`, links against the installed
#    liboscar.a and runs (version, Hub spec, Hadamard, an artifact error);
#  - each man page renders with its NAME, SYNOPSIS and an option of the tool;
#  - the bash completion offers oscar-zoo's commands, long options and their values;
#  - make uninstall leaves no file behind.
source "$(dirname "$0")/common.sh"
[ "$B" = build ] || skip "make install installs build/, not $B"
for tool in pkg-config help2man man install; do
    command -v "$tool" >/dev/null || skip "$tool is not installed (make deps)"
done
ROOT=$PWD
P=/opt/oscar
D=$T/root$P # where the staged files land
TOOLS="oscar-calibrate oscar-verify oscar-zoo"
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }

make -s -C "$ROOT" install DESTDIR="$T/root" PREFIX=$P > "$T/install.log" 2>&1 || fail "make install: $(tail -5 "$T/install.log")"

# ---- the files and their modes ----
want=$T/want.txt
{
    for t in $TOOLS; do
        echo "755 bin/$t"
        echo "644 share/man/man1/$t.1"
        echo "644 share/bash-completion/completions/$t"
    done
    echo "644 lib/liboscar.a"
    echo "644 lib/pkgconfig/oscar.pc"
    echo "644 include/oscar.h"
    # the headers oscar.h includes, by the compiler, under include/oscar/
    gcc -MM -I. -Ilib -x c lib/oscar.h | tr ' ' '\n' | grep '\.h$' | grep -v '^lib/oscar.h$' |
        sed -e 's|^lib/|include/oscar/|' -e 's|^formats/|include/oscar/formats/|' -e 's|^|644 |'
} | sort -u -k2 > "$want"
(cd "$D" && find . -type f -o -type l) | sed 's|^\./||' | while read -r f; do
    echo "$(stat -c %a "$D/$f") $f"
done | sort -k2 > "$T/got.txt"
diff -u "$want" "$T/got.txt" || fail "installed files or modes differ from the list above (- wanted, + got)"
[ -z "$(find "$T/root" -mindepth 1 -maxdepth 1 ! -name opt)" ] || fail "install wrote outside $P"
ok "$(wc -l < "$want") files installed with the right modes, nothing else"

# ---- the installed tool runs ----
out=$("$D/bin/oscar-verify" --version) || fail "installed oscar-verify --version exited $?"
version=$(sed -n 's/^#define OSCAR_VERSION "\(.*\)"/\1/p' lib/util/version.h)
case $out in "oscar-verify $version ("*")") ;; *) fail "installed oscar-verify --version: '$out'" ;; esac
ok "installed oscar-verify --version: $out"

# ---- pkg-config and <oscar.h> ----
pc=$D/lib/pkgconfig/oscar.pc
grep -qx "prefix=$P" "$pc" || fail "oscar.pc does not say prefix=$P: $(grep prefix= "$pc")"
grep -q "$T" "$pc" && fail "oscar.pc names the staging directory $T"
grep -qx "Version: $version" "$pc" || fail "oscar.pc Version is not $version"
# The staged .pc says prefix=/opt/oscar; prefix=$D points it at the staging
# copy (the .pc derives libdir and includedir from prefix, and has no
# Requires whose prefix this would change too).
flags=$(PKG_CONFIG_PATH=$D/lib/pkgconfig pkg-config --define-variable=prefix="$D" --cflags --libs --static oscar) \
    || fail "pkg-config oscar failed"
for f in "-I$D/include" "-L$D/lib" -loscar; do
    case " $flags " in *" $f "*) ;; *) fail "pkg-config flags lack $f: $flags" ;; esac
done
cat > "$T/use-oscar.c" <<'EOF'
// A user of the installed library: the version, a Hub spec, a Hadamard
// rotation, and an artifact read that must fail naming its path.
#include <oscar.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char ** argv) {
    if (argc != 2) return 2;
    printf("%s (%s)\n", OSCAR_VERSION, oscar_build_commit());

    char * repo = NULL, * rev = NULL, * path = NULL;
    if (oscar_hub_parse_spec("owner/name@main:sub/dir", &repo, &rev, &path) != OSCAR_OK ||
        strcmp(repo, "owner/name") != 0 || !rev || strcmp(rev, "main") != 0 || !path || strcmp(path, "sub/dir") != 0) {
        fprintf(stderr, "oscar_hub_parse_spec: %s\n", oscar_last_error());
        return 1;
    }
    free(repo), free(rev), free(path);

    double H[8 * 8];
    if (oscar_hadamard_matrix(8, H) != OSCAR_OK || oscar_rotation_orth_error(H, 8) > 1e-12) {
        fprintf(stderr, "oscar_hadamard_matrix(8) is not orthogonal\n");
        return 1;
    }

    struct oscar_artifact * a = NULL;
    if (oscar_artifact_read(argv[1], true, &a) == OSCAR_OK || !strstr(oscar_last_error(), argv[1])) {
        fprintf(stderr, "reading the missing artifact %s: '%s'\n", argv[1], oscar_last_error());
        return 1;
    }
    return 0;
}
EOF
# shellcheck disable=SC2086 # $flags is a list of flags
(cd "$T" && gcc -std=c11 -Wall -Wextra -Wpedantic -Werror use-oscar.c -o use-oscar $flags) 2> "$T/cc.log" \
    || fail "compiling against the installed oscar.h / liboscar.a: $(head -20 "$T/cc.log")"
got=$("$T/use-oscar" "$T/no-such-artifact") || fail "the program linked against liboscar.a exited $?"
[ "oscar-verify $got" = "$out" ] || fail "the library says '$got', the installed tool '$out'"
ok "a program with #include <oscar.h> builds from pkg-config --cflags --libs --static oscar alone and runs"

# ---- man pages ----
render() { LC_ALL=C MANWIDTH=200 man --nh --nj -l "$1" 2>&1; }
for t in $TOOLS; do
    page=$D/share/man/man1/$t.1
    case $t in
        oscar-calibrate) opt="--tokens N" ;;
        oscar-verify)    opt="--rotations PATH|ID" ;;
        oscar-zoo)       opt="--offline" ;;
    esac
    text=$(render "$page") || fail "man -l $page: $text"
    grep -q "^NAME" <<< "$text" && grep -q "^       $t - " <<< "$text" || fail "$t.1: no NAME '$t - ...': $(head -8 <<< "$text")"
    grep -q "^SYNOPSIS" <<< "$text" && grep -q "^       $t --\|^       $t \[\?[a-zA-Z]" <<< "$text" \
        || fail "$t.1: no SYNOPSIS with the usage line"
    grep -q "^DESCRIPTION" <<< "$text" || fail "$t.1: no DESCRIPTION"
    grep -qF -- "$opt" <<< "$text" || fail "$t.1: the option '$opt' is not in the page"
done
# oscar-zoo's page documents each command with its own options
zoo=$(render "$D/share/man/man1/oscar-zoo.1")
grep -q "^COMMANDS" <<< "$zoo" || fail "oscar-zoo.1: no COMMANDS section"
for want in "oscar-zoo push DIR --repo ID" "--path-in-repo" "oscar-zoo export ARTIFACT" "--qk-order" "oscar-zoo search BASE_MODEL"; do
    grep -qF -- "$want" <<< "$zoo" || fail "oscar-zoo.1: '$want' missing from the commands"
done
ok "man pages render: NAME, SYNOPSIS, DESCRIPTION with the tools' options"

# ---- bash completion ----
# complete() runs the installed completion function on the words "$@" (the
# last one is being completed) and prints the candidates, one per line.
complete_words() {
    PATH="$D/bin:$PATH" bash -c '
        source "$1/share/bash-completion/completions/$2"; shift 2
        COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
        _oscar_complete "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        printf "%s\n" "${COMPREPLY[@]}"' _ "$D" "$@"
}
has() { grep -qx -- "$2" <<< "$1" || fail "completing '$3' does not offer $2: $(tr '\n' ' ' <<< "$1")"; }
hasnt() { grep -qx -- "$2" <<< "$1" && fail "completing '$3' offers $2: $(tr '\n' ' ' <<< "$1")"; true; }
c=$(complete_words oscar-zoo oscar-zoo "")
for w in push pull ls list search info export; do has "$c" "$w" "oscar-zoo "; done
c=$(complete_words oscar-zoo oscar-zoo push x --path-)
[ "$c" = "--path-in-repo" ] || fail "completing 'oscar-zoo push x --path-' (push's own options): $c"
c=$(complete_words oscar-zoo oscar-zoo pu)
[ "$(sort <<< "$c" | tr '\n' ' ')" = "pull push " ] || fail "completing 'oscar-zoo pu': $c"
c=$(complete_words oscar-calibrate oscar-calibrate --to)
[ "$(sort <<< "$c" | tr '\n' ' ')" = "--tokenizer --tokens " ] || fail "completing 'oscar-calibrate --to': $c"
c=$(complete_words oscar-calibrate oscar-calibrate --tokenizer "")
[ -n "$c" ] || fail "completing 'oscar-calibrate --tokenizer ' (a path) offers nothing"
c=$(complete_words oscar-verify oscar-verify --)
for w in --model --rotations --corpus --device --json --help --version; do has "$c" "$w" "oscar-verify --"; done
c=$(complete_words oscar-calibrate oscar-calibrate --device "")
[ "$(tr '\n' ' ' <<< "$c")" = "cpu cuda " ] || fail "completing 'oscar-calibrate --device ': $c"
c=$(complete_words oscar-zoo oscar-zoo export x --format "")
[ "$(tr '\n' ' ' <<< "$c")" = "pt gguf " ] || fail "completing 'oscar-zoo export x --format ': $c"
c=$(complete_words oscar-calibrate oscar-calibrate --tokens "")
[ -z "$c" ] || fail "completing 'oscar-calibrate --tokens ' (a number) offers: $c"
mkdir -p "$T/files/artifact-dir" && touch "$T/files/artifact-file"
c=$(complete_words oscar-zoo oscar-zoo export "$T/files/art")
has "$c" "$T/files/artifact-dir" "oscar-zoo export $T/files/art"
has "$c" "$T/files/artifact-file" "oscar-zoo export $T/files/art"
hasnt "$c" push "oscar-zoo export $T/files/art"
c=$(complete_words oscar-calibrate oscar-calibrate --out "$T/files/")
has "$c" "$T/files/artifact-dir" "oscar-calibrate --out $T/files/"
ok "bash completion: oscar-zoo's commands, long options, option values, file names"

# ---- uninstall ----
make -s -C "$ROOT" uninstall DESTDIR="$T/root" PREFIX=$P > "$T/uninstall.log" 2>&1 || fail "make uninstall: $(tail -5 "$T/uninstall.log")"
left=$(cd "$T/root" && find . -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left files: $left"
[ ! -e "$D/include/oscar" ] || fail "make uninstall left $D/include/oscar"
ok "make uninstall removes every installed file"

echo "ok: test-install ($n checks)"
