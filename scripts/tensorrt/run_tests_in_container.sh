#!/usr/bin/env bash
# Run the `tensorrt`- and `gpu`-marked tests inside NVIDIA's TensorRT container on a GPU host (a T4
# node): the only place they run; elsewhere they are skipped with the reason printed.
#
#   scripts/tensorrt/run_tests_in_container.sh            # TensorRT 10.5 (what Triton r24.10 serves)
#   TRT_PIP=tensorrt==8.6.1.post1 scripts/tensorrt/run_tests_in_container.sh
#   IMAGE=nvcr.io/nvidia/tensorrt:24.10-py3 PYTEST_ARGS="-x -k engine" scripts/tensorrt/run_tests_in_container.sh
#
# Needs docker with the NVIDIA container toolkit (`docker run --gpus all`) and network access to
# nvcr.io and PyPI. The image provides the CUDA user-space libraries; the tensorrt wheel pinned by
# TRT_PIP provides the builder (engines only load on the TensorRT version that built them, so
# pin the serving Triton's: r24.10 ships TensorRT 10.5). The project needs Python >= 3.11 and the
# 24.10 image has 3.10, so uv provides a 3.11 interpreter in a throw-away virtual environment
# inside the container; the checkout is mounted, nothing on the host is installed.
set -euo pipefail

IMAGE="${IMAGE:-nvcr.io/nvidia/tensorrt:24.10-py3}"
TRT_PIP="${TRT_PIP:-tensorrt-cu12==10.5.0}"
PYTEST_ARGS="${PYTEST_ARGS:-}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

command -v docker >/dev/null || { echo "run_tests_in_container.sh: docker is not installed" >&2; exit 2; }

exec docker run --rm --gpus all \
  -v "$ROOT:/src" -w /src \
  -e TRT_PIP="$TRT_PIP" -e PYTEST_ARGS="$PYTEST_ARGS" \
  "$IMAGE" bash -euo pipefail -c '
    nvidia-smi -L
    python3 -m pip install --quiet uv
    python3 -m uv venv --quiet --python 3.11 /tmp/venv
    export VIRTUAL_ENV=/tmp/venv PATH=/tmp/venv/bin:$PATH
    python3 -m uv pip install --quiet "${TRT_PIP}" -e ".[convert,models,serve,dev]"
    python -c "import tensorrt; print(\"TensorRT\", tensorrt.__version__)"
    PYTHONPATH=/src/tools python -m pytest -p no:cacheprovider -m "tensorrt or gpu" ${PYTEST_ARGS} tests
  '
