#!/usr/bin/env bash
# Makes, on a machine with network access, everything a GPU host without network needs for
# scripts/gpu/run_checks.sh and scripts/gpu/bench.sh, in the ignored folder DEST (default .whl/):
#   triton-bundle.tar.xz   site/ with the tritonserver binary, the python backend, the Python 3.12
#                          python-backend stub and the bundled libraries they need (read from their
#                          ELF NEEDED entries), taken from the nvidia-pytriton 0.7.0 wheel
#   *.whl                  the cp312 / pure wheels the tests import that the GPU host lacks
# and in ORT_DEST (default .ort/, ignored too):
#   NN/onnxruntime-gpu.part.NN + NN/SHA256SUMS + NN/WHEEL   (NN = 00..03)
#                          onnxruntime-gpu 1.31.1 (CUDA 13), xz-compressed and split into parts of
#                          56,000,000 bytes: one folder per device run (a run may carry 64 MiB);
#                          scripts/gpu/ort_part.sh NN takes each to the GPU host
# Usage: scripts/gpu/pack.sh [DEST]      (SKIP_ORT=1 leaves onnxruntime-gpu out)
set -euo pipefail
DEST=${1:-.whl}
PY=${PYTHON:-python3}
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

download() {  # cp312 manylinux wheels, no dependencies (each one is named)
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$@"
}

# --- 1. the Triton bundle ---------------------------------------------------------------------
download "$WORK" nvidia-pytriton==0.7.0
mkdir -p "$WORK/x" && (cd "$WORK/x" && unzip -q "$WORK"/nvidia_pytriton-0.7.0-*.whl \
  'pytriton/__init__.py' 'pytriton/tritonserver/*' 'nvidia_pytriton.libs/*')
TS="$WORK/x/pytriton/tritonserver"
# One stub: the GPU host runs Python 3.12.
find "$TS/python_backend_stubs" -mindepth 1 -maxdepth 1 ! -name 3.12 -exec rm -rf {} +
# Keep only the bundled libraries the three executables need, followed transitively.
"$PY" - "$WORK/x" <<'PYEOF'
import pathlib, subprocess, sys
root = pathlib.Path(sys.argv[1]); libs = root / "nvidia_pytriton.libs"
ts = root / "pytriton/tritonserver"
todo = [ts / "bin/tritonserver", ts / "backends/python/libtriton_python.so",
        ts / "python_backend_stubs/3.12/triton_python_backend_stub"]
todo += [p for p in ts.rglob("*.so") if p.is_file()]
keep, seen = set(), set()
while todo:
    path = todo.pop()
    if path in seen:
        continue
    seen.add(path)
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "(NEEDED)" in line:
            name = line.split("[", 1)[1].rstrip("]")
            if (libs / name).exists():
                keep.add(name); todo.append(libs / name)
for lib in libs.iterdir():
    if lib.name not in keep:
        lib.unlink()
print(f"triton bundle: {len(keep)} bundled libraries kept")
PYEOF
mv "$WORK/x" "$WORK/site"
tar -C "$WORK" -cf - site | xz -6 -T0 > "$DEST/triton-bundle.tar.xz"
rm -rf "$WORK/site"

# --- 2. wheels the tests import that the GPU host's image lacks ---------------------------------
# numpy 1.26: the python-backend stub of tritonserver 2.51 (nvidia-pytriton 0.7, which pins numpy<2,
# as tritonkit does) crashes on BYTES tensors under NumPy 2 ("Stub process ... is not healthy");
# setup.sh gives it to the stubs only (the host's scipy/transformers need its NumPy 2).
download "$DEST" numpy==1.26.4 tritonclient==2.73.0 gevent==26.9.0 geventhttpclient==2.6.1 python-rapidjson==1.25 \
  polygraphy==0.53.6 onnx-graphsurgeon==0.6.1 brotli==1.2.1 zope.event==6.2 zope.interface==8.7 \
  greenlet==3.3.2 httptools==0.9.0 hpack==4.2.0  # httptools, hpack: the HTTP and gRPC guards' parsers (tritonkit.serve imports them)
# cuda-bindings: tritonclient's CUDA shared memory (`--shared-memory cuda`) on a CUDA 13 host. With it,
# .whl/ (61 MB) and the checkout pass a device call's 64 MiB: a run of the native runner alone may leave
# numpy (the python-backend stubs' NumPy) out of the folder it carries, one of the python runner cuda-bindings.
download "$DEST" cuda-bindings==13.5.0 cuda-pathfinder==1.9.1

# perf_analyzer 2.60.0 (NVIDIA's C++ load generator; manylinux_2_38: the GPU host's Ubuntu 24.04 runs it):
# its binary alone, xz-compressed (4.9 MB against the wheel's 7.2), so the checkout and .whl/ stay under a
# device call's 64 MiB; setup.sh unpacks it to /tmp/pa/perf_analyzer and points TRITONKIT_PERF_ANALYZER at it.
"$PY" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_38_x86_64 --python-version 3.12 \
  --implementation cp -d "$WORK" perf-analyzer==2.60.0
unzip -p "$WORK"/perf_analyzer-2.60.0-*.whl perf_analyzer/bin/perf_analyzer | xz -9e -T0 > "$DEST/perf_analyzer.bin.xz"

# --- 3. onnxruntime-gpu, in parts ---------------------------------------------------------------
if [ "${SKIP_ORT:-0}" != 1 ]; then
  ORT_DEST=${ORT_DEST:-.ort}
  mkdir -p "$ORT_DEST/parts"
  download "$WORK" onnxruntime-gpu==1.31.1
  wheel=$(ls "$WORK"/onnxruntime_gpu-1.31.1-*.whl)
  rm -rf "${ORT_DEST:?}"/[0-9][0-9] "$ORT_DEST/parts"/*
  xz -6 -T0 -c "$wheel" | split -b 56000000 -d -a 2 - "$ORT_DEST/parts/onnxruntime-gpu.part."
  for part in "$ORT_DEST"/parts/onnxruntime-gpu.part.*; do
    nn=${part##*.}
    mkdir -p "$ORT_DEST/$nn" && mv "$part" "$ORT_DEST/$nn/"
    (cd "$WORK" && sha256sum "$(basename "$wheel")") > "$ORT_DEST/$nn/SHA256SUMS"
    basename "$wheel" > "$ORT_DEST/$nn/WHEEL"
  done
  rmdir "$ORT_DEST/parts"
  rm -f "$wheel"
  ls -la "$ORT_DEST"/*
fi
ls -la "$DEST"
