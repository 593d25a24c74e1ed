# Sourced by run_checks.sh and bench.sh: makes, once per machine, a virtual environment in /tmp that
# holds what scripts/gpu/pack.sh made (the Triton bundle, the wheels, numpy 1.26) ahead of the host's
# own packages (torch, ...), reassembles onnxruntime-gpu into it when all its parts have arrived in
# /tmp/ort-parts (see ort_part.sh), and puts the environment first on PATH.
#
# Why a virtual environment and not PYTHONPATH: the python-backend stub embeds its interpreter without
# reading PYTHONPATH; it finds packages through the `python3` first on PATH (its prefix's
# site-packages and their .pth files). On a host whose Python has NumPy 2 the stub of tritonserver
# 2.51 then corrupts every tensor it moves through NumPy (BYTES inputs crash the stub, numeric outputs
# arrive empty); the environment gives the stub numpy 1.26, as `pip install tritonkit` (numpy<2) does.
WHL=${WHL:-.whl}
OUT=${OUT:-/tmp/gpu-out}
SRC=${SRC:-.}
mkdir -p "$OUT"
VENV=/tmp/tritonkit-venv
if [ ! -x "$VENV/bin/python3" ] || [ ! -d "$VENV/.ready" ]; then
  rm -rf "$VENV" /tmp/site
  BASE=$(python3 -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
  HOST_SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$BASE" -m venv --without-pip "$VENV" || return 1
  SP=$("$VENV/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  tar xJf "$WHL/triton-bundle.tar.xz" -C /tmp && cp -a /tmp/site/. "$SP/" && rm -rf /tmp/site || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SP" "$WHL"/*.whl 2>&1 | tail -2
  # The host's packages (torch, onnx, pytest, ...) come after ours: a .pth line is appended to sys.path.
  echo "$HOST_SITE" > "$SP/zz-host-site-packages.pth"
  mkdir -p "$VENV/.ready"
fi
SP=$("$VENV/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ ! -d "$SP/onnxruntime_gpu-"*.dist-info ] 2>/dev/null && [ -f /tmp/ort-parts/SHA256SUMS ] && \
   [ "$(ls /tmp/ort-parts/onnxruntime-gpu.part.* 2>/dev/null | wc -l)" -ge 4 ]; then
  wheel=$(cat /tmp/ort-parts/WHEEL)
  cat /tmp/ort-parts/onnxruntime-gpu.part.* | xz -d > "/tmp/$wheel"
  (cd /tmp && sha256sum -c /tmp/ort-parts/SHA256SUMS) && \
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SP" "/tmp/$wheel" 2>&1 | tail -2
  rm -f "/tmp/$wheel"
fi
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$SRC/tools"
hash -r
