#!/usr/bin/env bash
# Download the wheels benchmarks/gpu_check/requirements.txt lists, for the GPU image (Python 3.12, manylinux x86-64), into
# the git-ignored folder gpu_wheels/ (or $1). They travel with the working tree in the device call (docs/gpu.md).
#   bash benchmarks/gpu_check/wheels.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
dest="${1:-gpu_wheels}"
rm -rf "$dest"
python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --dest "$dest" -r benchmarks/gpu_check/requirements.txt
ls -1 "$dest"
echo "$(ls "$dest" | wc -l) wheels, $(du -sm "$dest" | cut -f1) MiB in $dest"
