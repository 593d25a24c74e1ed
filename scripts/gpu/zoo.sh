#!/usr/bin/env bash
# The zoo at full size on the GPU host (no network): torchvision's ViT-B/16, ConvNeXt-T, ResNet-50,
# MobileNetV3-Large and EfficientNet-B0 where torchvision imports there (else the same architectures
# from tests/support/torch_zoo.py at full size), BERT-base and DistilBERT from transformers configs, an
# nn.TransformerEncoder, and the onnx package's nine test CNNs, each built fp32 + fp16 + int8 with
# `tritonkit build`; writes $OUT/zoo.md (the table for docs/zoo.md), $OUT/zoo.json and $OUT/zoo.log.
#
# Here (with network), once: scripts/gpu/pack.sh (the usual .whl/), then scripts/gpu/zoo.sh --pack,
# which adds the dynamo exporter's onnxscript, onnx-ir and ml_dtypes (cp312) to .whl/.
# There: carry .whl and the checkout (as for bench.sh), then
#   scripts/gpu/zoo.sh [--only vit,convnext,...|onnx] [--samples N]
# A full run takes longer than one device command may: split it over calls on the same warm machine;
# each call merges the rows of the calls before it (kept in /tmp/tritonkit-zoo.json), so the last
# call's $OUT/zoo.md holds the whole table:
#   scripts/gpu/zoo.sh --only vit,convnext,resnet,mobilenetv3,efficientnet
#   scripts/gpu/zoo.sh --only bert,distilbert,transformer_encoder
#   scripts/gpu/zoo.sh --only onnx
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = "--pack" ]; then
  DEST=${2:-.whl}
  mkdir -p "$DEST"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST" onnxscript==0.7.2 onnx-ir==1.1.0 ml_dtypes==0.5.4
  ls -la "$DEST"
  exit 0
fi
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
if ! python3 -c "import onnxscript" 2>/dev/null && ls "$WHL"/onnxscript-*.whl >/dev/null 2>&1; then
  # setup.sh installed .whl on an earlier call, before these wheels were there
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
    "$WHL"/onnxscript-*.whl "$WHL"/onnx_ir-*.whl "$WHL"/ml_dtypes-*.whl 2>&1 | tail -2
fi
if ! python3 -c "import onnxscript" 2>/dev/null; then
  echo "zoo.sh: onnxscript (the dynamo exporter's) is not importable: run scripts/gpu/zoo.sh --pack where there is network and carry .whl" >&2
  exit 2
fi
python3 -c "import torch, onnx, onnxruntime, onnxscript; print('torch', torch.__version__, 'onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__, 'onnxscript', onnxscript.__version__)" | tee -a "$OUT/machine.txt"
python3 -c "import torchvision; print('torchvision', torchvision.__version__)" 2>&1 | tail -1 | tee -a "$OUT/machine.txt"
KEEP=/tmp/tritonkit-zoo.json
MERGE=()
[ -f "$KEEP" ] && MERGE=(--merge "$KEEP")
PYTHONUNBUFFERED=1 XDG_CACHE_HOME="$OUT/cache" python3 "$HERE/zoo.py" --out "$OUT/zoo.md" --raw "$OUT/zoo.json" \
  "${MERGE[@]}" "$@" 2>&1 | tee "$OUT/zoo.log"
code=${PIPESTATUS[0]}
[ -f "$OUT/zoo.json" ] && cp "$OUT/zoo.json" "$KEEP"
exit "$code"
