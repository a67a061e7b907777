#!/usr/bin/env bash
# The GPU checks, as ONE command for a lent CUDA machine (see benchmarks/README.md); every GPU
# figure comes from here:
#  1. the engine loop on CUDA vs the simulator's predicted bytes (cuda_engine_check.py),
#  2. a real vLLM engine on CUDA (Model Runner V2, async): the allocator's bytes around the
#     pooler per step vs the GPU ledger (cuda_vllm_memory.py; needs a CUDA build of vLLM,
#     TOKPOOL_ENGINE_PYTHON names its Python),
#  3. benchmark 1 (AllPool per policy vs its copy bound) on the GPU.
# Usage: OUT=<dir> bash benchmarks/gpu_checks.sh [--dry-run]   (default OUT: benchmarks/results)
# --dry-run (or no GPU): runs what a CPU can (tokpool's predicted side) and prints each GPU
# command instead of running it; exits 0. Tests run this path.
set -u
OUT=${OUT:-benchmarks/results}
DRY=0
if [ "${1:-}" = "--dry-run" ] || ! command -v nvidia-smi >/dev/null 2>&1; then DRY=1; fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
PY=${PY:-python3}
run() {  # run a GPU command, or (dry run) say what would run
  if [ "$DRY" = 1 ]; then echo "dry run: would run: $*"; else "$@"; fi
}
if [ "$DRY" = 1 ]; then
  echo "dry run: no GPU used (--dry-run or no nvidia-smi)"
else
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    "$PY" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__)"
  } | tee "$OUT/gpu_machine.txt"
fi
if [ "$DRY" = 1 ]; then
  run timeout 330 "$PY" benchmarks/cuda_engine_check.py --out "$OUT/cuda_engine_check.md"
else
  timeout 330 "$PY" benchmarks/cuda_engine_check.py --out "$OUT/cuda_engine_check.md" \
      2>&1 | tee "$OUT/cuda_engine_check.log"
fi
if [ "$DRY" = 1 ]; then
  timeout 300 "$PY" benchmarks/cuda_vllm_memory.py --dry-run || exit 1
else
  timeout 330 "$PY" benchmarks/cuda_vllm_memory.py --out "$OUT/cuda_vllm_memory.json" \
      2>&1 | tee "$OUT/cuda_vllm_memory.log"
fi
if [ "$DRY" = 1 ]; then
  run timeout 200 "$PY" -m benchmarks.bench_pooling --device cuda --repeats 7 \
      --csv "$OUT/gpu_pooling.csv"
else
  timeout 200 "$PY" -m benchmarks.bench_pooling --device cuda --repeats 7 \
      --csv "$OUT/gpu_pooling.csv" 2>&1 | grep -v '^pooling ' | tee "$OUT/gpu_pooling.log"
fi
