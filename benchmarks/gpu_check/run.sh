#!/usr/bin/env bash
# The GPU check as one device call (docs/gpu.md): make TRL, datasets and math-verify importable from the carried wheels
# without touching the image's torch, then run benchmarks/gpu_check/check.py on CUDA. Everything goes to OUT_DIR:
# install.log, gpu_check.log (the whole output), gpu_check.json, and a <section>.log for a section that failed or hung.
#   bash benchmarks/gpu_check.sh OUT_DIR [check.py options]   (this script's entry beside the package)
set -uo pipefail
cd "$(dirname "$0")/../.."  # the repository root: the carried wheels and the package
out="${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR [check.py options]}"
shift
wheels="${GPU_WHEELS:-gpu_wheels}"
site="$(mktemp -d)"  # empty unless the image's environment cannot take the wheels
trap 'rm -rf "$site"' EXIT
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$out"
start=$(date +%s)
log="$out/install.log"
check='import datasets, math_verify, trl; print("trl", trl.__version__); assert trl.__version__.startswith("1.16.")'
importable() { python3 -c "$check" >>"$log" 2>&1; }  # coba-trl asks trl 1.16
pip_install() { python3 -m pip install --no-index --no-cache-dir --disable-pip-version-check "$@" >>"$log" 2>&1; }
unpack() { python3 -c "import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]" "$@"; }
# The first way that leaves them importable wins: pip's resolver, which checks the wheels against what the image holds
# and never sees a torch wheel; the wheels as they are (--no-deps, if the resolver refuses); if the image's environment
# is not writable, the folder $site on PYTHONPATH (pip --target, or unpacking the pure-Python wheels if pip itself
# fails there). The last two install every carried wheel, fsspec included, in front of the image's own.
if importable; then
    how="already importable"
elif pip_install --find-links "$wheels" -r benchmarks/gpu_check/requirements.txt && importable; then
    how="pip, resolved against the image"
elif pip_install --no-deps "$wheels"/*.whl && importable; then
    how="pip --no-deps"
elif pip_install --no-deps --target "$site" "$wheels"/*.whl && importable; then
    how="pip --target a temporary folder on PYTHONPATH (removed at exit)"
elif unpack "$site" "$wheels"/*.whl >>"$log" 2>&1 && importable; then
    how="unpacked into a temporary folder on PYTHONPATH (removed at exit)"
else
    echo "TRL 1.16, datasets or math-verify not importable after every way to install $wheels: see $log"
    exit 1
fi
echo "wheels: $how, in $(($(date +%s) - start)) s" | tee -a "$log"
python3 benchmarks/gpu_check/check.py --output_dir "$out" "$@" 2>&1 | tee "$out/gpu_check.log"
status=${PIPESTATUS[0]}
echo "gpu_check exit $status after $(($(date +%s) - start)) s in all"
exit "$status"
