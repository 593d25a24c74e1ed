# Sourced by run_checks.sh and bench.sh: unpacks, once per machine, what scripts/gpu/pack.sh made:
#   /tmp/tritonkit-site   the Triton bundle and the wheels (numpy aside), first on PYTHONPATH
#   /tmp/tritonkit-stub   a virtual environment for the python-backend stubs: numpy 1.26, then the
#                         host's own packages (torch, ...) through a .pth line
# reassembles onnxruntime-gpu into /tmp/ort-gpu when all its parts have arrived in /tmp/ort-parts
# (see ort_part.sh), and sets PYTHONPATH and TRITONKIT_STUB_PYTHON.
#
# Why the stubs get their own environment: the stub embeds its interpreter without reading PYTHONPATH
# and finds packages through the `python3` first on PATH, which tritonkit sets to the environment
# TRITONKIT_STUB_PYTHON names. The stub of tritonserver 2.51 (nvidia-pytriton 0.7 pins numpy<2, as
# tritonkit does) corrupts every tensor it moves through NumPy 2 (BYTES inputs crash it, numeric
# outputs arrive empty), while the host's other packages (scipy, transformers) need its NumPy 2: so
# numpy 1.26 goes to the stubs only.
WHL=${WHL:-.whl}
OUT=${OUT:-/tmp/gpu-out}
SRC=${SRC:-.}
mkdir -p "$OUT"
SITE=/tmp/tritonkit-site
if [ ! -d "$SITE/pytriton/tritonserver" ]; then
  rm -rf /tmp/site "$SITE" && tar xJf "$WHL/triton-bundle.tar.xz" -C /tmp && mv /tmp/site "$SITE" || return 1
  wheels=$(ls "$WHL"/*.whl | grep -v '/numpy-')
  # shellcheck disable=SC2086
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" $wheels 2>&1 | tail -2
fi
STUB=/tmp/tritonkit-stub
if [ ! -f "$STUB/.ready" ]; then
  rm -rf "$STUB"
  BASE=$(python3 -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
  HOST_SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$BASE" -m venv --without-pip "$STUB" || return 1
  STUB_SITE=$("$STUB/bin/python3" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$STUB_SITE" "$WHL"/numpy-*.whl 2>&1 | tail -2
  echo "$HOST_SITE" > "$STUB_SITE/zz-host-site-packages.pth"  # after ours: a .pth line is appended
  touch "$STUB/.ready"
fi
ORT=/tmp/ort-gpu
if [ ! -d "$ORT/onnxruntime" ] && [ -f /tmp/ort-parts/SHA256SUMS ] && \
   [ "$(ls /tmp/ort-parts/onnxruntime-gpu.part.* 2>/dev/null | wc -l)" -ge 4 ]; then
  wheel=$(cat /tmp/ort-parts/WHEEL)
  cat /tmp/ort-parts/onnxruntime-gpu.part.* | xz -d > "/tmp/$wheel"
  (cd /tmp && sha256sum -c /tmp/ort-parts/SHA256SUMS) && \
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$ORT" "/tmp/$wheel" 2>&1 | tail -2
  rm -f "/tmp/$wheel"
fi
if [ -f "$WHL/perf_analyzer.bin.xz" ] && [ ! -x /tmp/pa/perf_analyzer ]; then
  mkdir -p /tmp/pa && xz -dc "$WHL/perf_analyzer.bin.xz" > /tmp/pa/perf_analyzer.tmp && \
    chmod +x /tmp/pa/perf_analyzer.tmp && mv /tmp/pa/perf_analyzer.tmp /tmp/pa/perf_analyzer
fi
[ -x /tmp/pa/perf_analyzer ] && export TRITONKIT_PERF_ANALYZER=/tmp/pa/perf_analyzer
PYTHONPATH="$SITE:$SRC/tools"
# onnxruntime-gpu first; the ONNX Runtime CUDA runner puts PYTHONPATH's entries ahead in its stub too.
[ -d "$ORT/onnxruntime" ] && PYTHONPATH="$ORT:$PYTHONPATH"
export PYTHONPATH
export TRITONKIT_STUB_PYTHON="$STUB/bin/python3"
