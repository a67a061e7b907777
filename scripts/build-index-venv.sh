#!/bin/sh
# make index: the real late-interaction indexers in their own virtual environment (default
# .venv-index), never in .venv: fast-plaid 1.7.0 (its wheel for torch 2.11.0 pins torch==2.11.0),
# colbert-ai 0.2.22 with faiss-cpu, PyLate 1.6.0 and the fast-plaid PyLate pins (<= 1.4.6: 1.4.6
# for torch 2.11.0) in a folder of its own inside the venv (VENV/fast-plaid-1.4.6, put first on
# sys.path only when PyLate builds an index). tests/test_index_real.py builds indexes with them.
#
#   sh scripts/build-index-venv.sh VENV
#
# PyPI has no CPU build of torch 2.11.0 for Linux: pip takes the CUDA build and its nvidia-*
# packages (about 2.5 GB downloaded; it runs on a CPU). Up to date (stamp holds SPEC and every
# library imports): nothing to do. Missing, damaged or another SPEC: rebuilt from scratch.
#
# Where it cannot be built (no network, no wheel for this platform) it says why, removes the
# partial venv, writes the reason to VENV.failed (the index tests skip quoting it) and exits 0.
set -u
VENV=${1:-.venv-index}
PYTHON=${PYTHON:-python3}
SPEC="fast-plaid==1.7.0.2110 colbert-ai==0.2.22 faiss-cpu pylate==1.6.0 fast-plaid==1.4.6.2110"
STAMP="$VENV/.tokpool-index-installed"
FAILED="$VENV.failed"
OLD="$VENV/fast-plaid-1.4.6"

check() {
    "$VENV/bin/python" -c "import torch, faiss, fast_plaid, colbert, pylate
from importlib.metadata import version
assert version('fast-plaid') == '1.7.0.2110', version('fast-plaid')
assert version('colbert-ai') == '0.2.22' and version('pylate') == '1.6.0'" >"$VENV.check" 2>&1 \
    && PYTHONPATH="$OLD" "$VENV/bin/python" -c "import fast_plaid.search, os
assert fast_plaid.search.__file__.startswith(os.path.abspath('$OLD'))" >"$VENV.check" 2>&1
}

fail() {
    rm -rf "$VENV"
    echo "$1" > "$FAILED"
    echo "make index: $1; the index tests will skip" >&2
    exit 0
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SPEC" ] && check; then
    rm -f "$VENV.check"
    echo "make index: $VENV is up to date ($SPEC)"
    exit 0
fi
if [ -d "$VENV" ]; then
    echo "make index: $VENV is missing its stamp, damaged or not $SPEC: rebuilding it" >&2
    rm -rf "$VENV"
fi
rm -f "$FAILED"
start=$(date +%s)
"$PYTHON" -m venv "$VENV" || fail "$PYTHON -m venv $VENV failed"
"$VENV/bin/python" -m pip install --quiet --upgrade pip || fail "pip could not upgrade itself (no network?)"
PIP="$VENV/bin/python -m pip install --quiet"
$PIP "fast-plaid==1.7.0.2110" "colbert-ai==0.2.22" faiss-cpu \
    || fail "pip could not install fast-plaid 1.7.0 and colbert-ai 0.2.22 (no network, or no wheel for this platform/Python)"
# PyLate's own dependencies, then PyLate without them (its fast-plaid pin would replace 1.7.0).
$PIP "sentence-transformers==5.3.0" "ujson==5.12.0" "ninja==1.11.1.4" "fastkmeans==0.5.0" \
    accelerate "datasets>=2.20.0" || fail "pip could not install PyLate 1.6.0's dependencies"
$PIP --no-deps "pylate==1.6.0" || fail "pip could not install pylate==1.6.0"
$PIP --no-deps --target "$OLD" "fast-plaid==1.4.6.2110" \
    || fail "pip could not install fast-plaid==1.4.6.2110 (PyLate 1.6.0's pin)"
check || fail "the indexers installed but do not all import in $VENV: $(tail -n 1 "$VENV.check")"
rm -f "$VENV.check"
echo "$SPEC" > "$STAMP"
echo "make index: $VENV built in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
