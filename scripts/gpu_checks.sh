#!/usr/bin/env bash
# GPU checks for a host with an NVIDIA GPU and no network (CI never runs this).
# Expects, in the ignored folder .whl/: triton-bundle.tar.xz (the tritonserver binary, python backend,
# the Python 3.12 stub and the libraries `ldd` names, taken from the nvidia-pytriton 0.7 wheel, plus
# tritonclient) and the pure/cp312 wheels the tests import (pytest, pytest-timeout, gevent,
# geventhttpclient, python-rapidjson, polygraphy). Results go to $OUT (default /tmp/gpu-out).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
SITE=/tmp/tritonkit-site
rm -rf "$SITE" /tmp/site && tar xJf .whl/triton-bundle.tar.xz -C /tmp && mv /tmp/site "$SITE"
pip install -q --no-index --no-deps --target "$SITE" .whl/*.whl 2>&1 | tail -2
export PYTHONPATH="$SITE:$PWD/tools"
{
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv
  python -c 'import sys, numpy, torch, onnxruntime; print(sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "ort", onnxruntime.__version__, onnxruntime.get_available_providers())'
} 2>&1 | tee "$OUT/machine.txt"
python -m pytest -p no:cacheprovider -o addopts="" --import-mode=importlib -W ignore -rs -q --timeout 300 \
  "$@" 2>&1 | tee "$OUT/pytest.txt" | tail -40
