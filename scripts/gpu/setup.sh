# Sourced by run_checks.sh and bench.sh: unpacks the Triton bundle and wheels made by pack.sh into
# /tmp (once per machine), reassembles onnxruntime-gpu when all its parts have arrived in
# /tmp/ort-parts (see ort_part.sh), and sets PYTHONPATH (onnxruntime-gpu first, so the python
# backend's stub imports it too).
WHL=${WHL:-.whl}
OUT=${OUT:-/tmp/gpu-out}
SRC=${SRC:-.}
mkdir -p "$OUT"
SITE=/tmp/tritonkit-site
if [ ! -d "$SITE/pytriton/tritonserver" ]; then
  rm -rf /tmp/site "$SITE" && tar xJf "$WHL/triton-bundle.tar.xz" -C /tmp && mv /tmp/site "$SITE" || return 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHL"/*.whl 2>&1 | tail -2
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
PYTHONPATH="$SITE:$SRC/tools"
[ -d "$ORT/onnxruntime" ] && PYTHONPATH="$ORT:$PYTHONPATH"
export PYTHONPATH
