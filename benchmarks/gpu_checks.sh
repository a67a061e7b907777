#!/usr/bin/env bash
# The GPU checks, as one short script for a lent CUDA machine (see benchmarks/README.md):
#  1. the engine loop on CUDA vs the simulator's predicted bytes (cuda_engine_check.py),
#  2. benchmark 1 (AllPool per policy vs its copy bound) on the GPU.
# Usage: OUT=<dir> bash benchmarks/gpu_checks.sh   (default OUT: benchmarks/results)
set -u
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__)"
} | tee "$OUT/gpu_machine.txt"
timeout 330 python3 benchmarks/cuda_engine_check.py --out "$OUT/cuda_engine_check.md" \
    2>&1 | tee "$OUT/cuda_engine_check.log"
timeout 200 python3 -m benchmarks.bench_pooling --device cuda --repeats 7 \
    --csv "$OUT/gpu_pooling.csv" 2>&1 | grep -v '^pooling ' | tee "$OUT/gpu_pooling.log"
