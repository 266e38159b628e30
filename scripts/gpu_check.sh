#!/usr/bin/env bash
# The cuda target checked and timed on a GPU, in two halves (docs/bench/gpu.md is what it writes):
#
#   scripts/gpu_check.sh prepare   # here, no GPU needed (nvcc and the models extra are):
#       build/gpu-check.tar.xz, under 64 MiB: cuda bundles of six small real architectures at
#       batch 1 and 16, their inputs, onnxruntime's outputs, their PyTorch graphs, odla_runner
#       and the TVM runtime. MODELS_PYTHON names a Python with torch and transformers, else a
#       venv is made for them in build/gpu-models-venv; PYTHON (default .venv/bin/python) is
#       odla-tvm's.
#   scripts/gpu_check.sh run       # on the GPU machine (Python with PyTorch, no TVM), with
#       build/gpu-check.tar.xz carried there: runs every bundle, checks its outputs, times it
#       beside PyTorch eager and torch.compile, and writes docs/bench/gpu.md (also to $OUT if set).
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK_DIR=build/gpu-check

case "${1:-}" in
prepare)
    PYTHON=${PYTHON:-.venv/bin/python}
    if [ -z "${MODELS_PYTHON:-}" ]; then
        MODELS_PYTHON=build/gpu-models-venv/bin/python
        if [ ! -x "$MODELS_PYTHON" ]; then
            python3.11 -m venv build/gpu-models-venv
            # pyproject.toml's models extra and its pins of what scripts/export_models.py uses.
            pins=$(python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(" ".join(p["optional-dependencies"]["models"] + [d for d in p["dependencies"] if d.split("=")[0] in ("onnx", "numpy", "tqdm")]))')
            "$MODELS_PYTHON" -m pip install --quiet $pins
        fi
    fi
    start=$SECONDS
    rm -rf build/gpu-models
    "$MODELS_PYTHON" scripts/gpu/models.py build/gpu-models
    PYTHONPATH=$PWD "$PYTHON" scripts/gpu/prepare.py build/gpu-models "$CHECK_DIR"
    XZ_OPT=-T0 tar -C build -cJf "$CHECK_DIR.tar.xz" gpu-check
    size=$(stat -c %s "$CHECK_DIR.tar.xz")
    echo "$CHECK_DIR.tar.xz: $((size / 1048576)) MiB, prepared in $((SECONDS - start)) s"
    if [ "$size" -gt $((64 * 1048576)) ]; then
        echo "over the 64 MiB a GPU run may carry" >&2
        exit 1
    fi
    ;;
run)
    if [ ! -f "$CHECK_DIR/check.json" ]; then
        [ -f "$CHECK_DIR.tar.xz" ] || { echo "no $CHECK_DIR.tar.xz: run 'scripts/gpu_check.sh prepare' and carry it" >&2; exit 2; }
        ${PYTHON:-python3} -m tarfile -e "$CHECK_DIR.tar.xz" build
    fi
    # BUDGET: seconds before torch.compile's rows are skipped (the device's time is short).
    ${PYTHON:-python3} scripts/gpu/check.py "$CHECK_DIR" -o docs/bench/gpu.md ${OUT:+-o "$OUT/gpu.md"} \
        --budget "${BUDGET:-300}" ${REPEAT:+--repeat "$REPEAT"}
    ;;
*)
    sed -n '2,15p' "$0" >&2
    exit 2
    ;;
esac
