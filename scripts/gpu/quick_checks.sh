#!/usr/bin/env bash
# Short device checks for one call (about 3 minutes): each part writes its result to $OUT as it ends, so a
# call cut short still returns what finished.
#   profile  the GPU profile detected from nvidia-smi, and a tiny torch spec with max_batch_size 128 built
#            (fp32 + fp16, serving: {device: gpu}) on it: a GPU outside the named table is planned as itself
#   native   scripts/gpu/native_buckets_smoke.py: the native runner's shape buckets built, served on the GPU
#            (CUDA graph per (batch, shape) bucket), mixed lengths answered at their own length
#   guard    scripts/gpu/grpc_guard_cost.py: gRPC through the guard vs Triton's own port (tiny and 602 KB)
#   levit    timm's LeViT-128S (run once in FP32 first, filling its attention-bias cache) built fp32 + fp16
#            with serving: {device: gpu, engine: torch}, served, one request per version answered
# Usage: PARTS="profile native guard levit" scripts/gpu/quick_checks.sh      (after scripts/gpu/pack.sh; carry .whl)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
PARTS=${PARTS:-profile native guard levit}
SPECS=$(mktemp -d)
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv > "$OUT/machine.txt" 2>&1
cat > "$SPECS/tiny.py" <<'PY'
import torch
from tritonkit.convert.graph.export import TorchSource

def make() -> TorchSource:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 16)).eval()
    return TorchSource(module, (torch.randn(2, 64),), ("x",), ("y",))
PY
cat > "$SPECS/tiny.yaml" <<'YAML'
name: tiny128
source: {torch: "tiny:make"}
precisions: [fp32, fp16]
serving: {device: gpu}
batching: {max_batch_size: 128}
YAML
cat > "$SPECS/levit.py" <<'PY'
import timm
import torch
from tritonkit.convert.graph.export import TorchSource

def make() -> TorchSource:
    torch.manual_seed(0)
    module = timm.create_model("levit_128s", pretrained=False).eval()
    with torch.no_grad():
        module(torch.randn(1, 3, 224, 224))  # fills the FP32 attention-bias cache, as a user's eval run does
    return TorchSource(module, (torch.randn(2, 3, 224, 224),), ("x",), ("y",))
PY
cat > "$SPECS/levit.yaml" <<'YAML'
name: levit
source: {torch: "levit:make"}
precisions: [fp32, fp16]
serving: {device: gpu, engine: torch}
batching: {max_batch_size: 64}
YAML
for part in $PARTS; do
  start=$(date +%s)
  case $part in
    profile)
      python3 -c 'from tritonkit.convert.spec.gpu_profiles import detect_gpu; print(detect_gpu())' > "$OUT/profile.txt" 2>&1
      python3 -m tritonkit.cli build "$SPECS/tiny.yaml" --repo "$SPECS/repo" >> "$OUT/profile.txt" 2>&1
      echo "build exit $?" >> "$OUT/profile.txt"
      python3 -m tritonkit.cli check --repo "$SPECS/repo" >> "$OUT/profile.txt" 2>&1; echo "check exit $?" >> "$OUT/profile.txt" ;;
    native)
      python3 "$HERE/native_buckets_smoke.py" --device gpu --out "$SPECS/native" > "$OUT/native.txt" 2>&1
      echo "exit $?" >> "$OUT/native.txt" ;;
    guard)
      OUT=$OUT python3 "$HERE/grpc_guard_cost.py" --quick > "$OUT/guard.txt" 2>&1
      echo "exit $?" >> "$OUT/guard.txt" ;;
    levit)
      python3 -m tritonkit.cli build "$SPECS/levit.yaml" --repo "$SPECS/repo" > "$OUT/levit.txt" 2>&1
      echo "build exit $?" >> "$OUT/levit.txt"
      python3 "$HERE/serve_once.py" "$SPECS/repo" levit >> "$OUT/levit.txt" 2>&1; echo "serve exit $?" >> "$OUT/levit.txt" ;;
  esac
  echo "$part $(( $(date +%s) - start )) s" >> "$OUT/times.txt"
done
