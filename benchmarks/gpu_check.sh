#!/usr/bin/env bash
# The GPU check's one command (docs/gpu.md), kept beside its package: benchmarks/gpu_check/run.sh makes TRL,
# datasets and math-verify importable from the carried wheels, then runs benchmarks/gpu_check/check.py on CUDA.
#   bash benchmarks/gpu_check.sh OUT_DIR [check.py options]
exec bash "$(dirname "$0")/gpu_check/run.sh" "$@"
