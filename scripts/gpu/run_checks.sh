#!/usr/bin/env bash
# GPU checks on a host with an NVIDIA GPU and no network (CI never runs this): installs what
# scripts/gpu/pack.sh made, then runs the `gpu`-marked tests and the python-backend serving tests.
# Usage: scripts/gpu/run_checks.sh [pytest args]      (results and logs go to $OUT, default /tmp/gpu-out)
# Environment: WHL (default .whl: the folder pack.sh filled), SRC (default .: the folder holding tools/
# and tests/), JOBS (pytest-xdist workers, default 8).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
SRC=${SRC:-.}
{
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv
  python3 -c 'import sys, numpy, torch, onnxruntime; print(sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "ort", onnxruntime.__version__, onnxruntime.get_available_providers())'
} 2>&1 | tee "$OUT/machine.txt"
if [ $# -eq 0 ]; then
  # The gpu-marked tests anywhere, plus every test that serves a python-backend model.
  set -- "$SRC/tests/backends" "$SRC/tests/serve" "$SRC/tests/config" "$SRC/tests/client" "$SRC/tests/repository/test_e2e_serving.py" \
    "$SRC/tests/convert/test_torch_program.py" "$SRC/tests/convert/test_tensorrt.py" \
    "$SRC/tests/convert/test_serving_gpu.py" "$SRC/tests/convert/test_serving_build.py"
fi
python3 -m pytest -p no:cacheprovider -o addopts="" --import-mode=importlib -W ignore -rs -q --timeout 300 \
  -n "${JOBS:-8}" "$@" 2>&1 | tee "$OUT/pytest.txt" | tail -60
exit "${PIPESTATUS[0]}"
