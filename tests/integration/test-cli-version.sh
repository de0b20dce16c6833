#!/usr/bin/env bash
# test-cli-version.sh - every tool answers --version (issue 20) with its name,
# OSCAR_VERSION and the git commit the build was made from (the one
# `git describe --always --dirty --abbrev=12` gives in this checkout, or
# "unknown" outside git), exit 0. oscar-calibrate records the same string in
# the artifact's oscar.tool. No model needed.
set -u
cd "$(dirname "$0")/../.."
B=${OSCAR_BUILD:-build}
case "$B" in /*) ;; *) B="$PWD/$B" ;; esac
want_commit=$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
version=$(sed -n 's/^#define OSCAR_VERSION "\(.*\)"/\1/p' lib/util/version.h)
fail() { echo "FAIL: $*"; exit 1; }
for t in oscar-calibrate oscar-verify oscar-zoo; do
    out=$("$B/bin/$t" --version) || fail "$t --version exited $?"
    # the build may predate the last edit of the tree (-dirty): compare the commit part
    got=${out#"$t $version ("}
    got=${got%)}
    [ "$got" != "$out" ] || fail "$t --version: '$out', want '$t $version (COMMIT)'"
    [ "${got%-dirty}" = "${want_commit%-dirty}" ] || fail "$t --version: commit '$got', checkout '$want_commit'"
done
echo "ok: --version of the three tools: $version ($want_commit)"
