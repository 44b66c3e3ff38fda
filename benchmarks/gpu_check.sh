#!/usr/bin/env bash
# The GPU check as one device call (docs/gpu.md): install the carried wheels into the image's Python without touching
# its torch, then run benchmarks/gpu_check.py on CUDA, writing gpu_check.json and gpu_check.log into OUT_DIR.
#   bash benchmarks/gpu_check.sh OUT_DIR [gpu_check.py options]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR [gpu_check.py options]}"
shift
wheels="${GPU_WHEELS:-gpu_wheels}"
mkdir -p "$out"
start=$(date +%s)
# The resolver checks the carried wheels against what the image holds; if it refuses, install them as they are.
python3 -m pip install --quiet --no-index --no-cache-dir --find-links "$wheels" -r benchmarks/gpu_requirements.txt \
    || python3 -m pip install --quiet --no-index --no-cache-dir --no-deps "$wheels"/*.whl \
    || exit 1
echo "installed the wheels in $(($(date +%s) - start)) s"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 benchmarks/gpu_check.py --output_dir "$out" "$@" 2>&1 | tee "$out/gpu_check.log"
status=${PIPESTATUS[0]}
echo "gpu_check exit $status after $(($(date +%s) - start)) s in all"
exit "$status"
