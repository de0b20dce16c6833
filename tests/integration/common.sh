# common.sh - sourced by the integration tests (not a test itself: run-tests.sh
# runs test-*.sh only). Makes the repository root the working directory and sets
# where things live: B (build), CACHE, MODEL (the pinned SmolLM2 GGUF), AUSTEN
# (corpus folder), CORPUS (Pride and Prejudice), PY (the oracle venv's python);
# skip MESSAGE exits 77, fail MESSAGE exits 1, need_smollm2 skips without the
# model or corpus; T is a fresh scratch directory, made writable and removed when
# the script exits.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=${OSCAR_BUILD:-build}
CACHE=${OSCAR_CACHE:-$HOME/.cache/oscar}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
AUSTEN=$CACHE/corpora/austen
CORPUS=$AUSTEN/prideprejudice.txt
PY=$CACHE/venv/bin/python
skip() { echo "skip: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
need_smollm2() { [ -f "$MODEL" ] && [ -f "$CORPUS" ] || skip "model or corpus missing"; }
T=$(mktemp -d)
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
