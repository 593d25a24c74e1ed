"""Held-out architectures through the GPU benchmark's path: a model this project's benchmark was never
tuned on, registered as a part and run exactly as the benchmark's own parts are (the FP16 version a
`serving: {device: gpu, engine: torch}` build writes, served by the native runner, in-process vs served
level by level, `tritonkit tune` quick with the default grid, then `tritonkit profile` of what it left).

Parts (seeded random weights; torchvision's own model where torchvision imports, else the same
architecture from tests/support/torch_zoo.py at full size):
  vit         ViT-B/16, FP32 image [3, 224, 224] in, logits [1000] out
  convnext    ConvNeXt-T, the same tensors
  distilbert  DistilBERT-base (transformers' `DistilBertModel` from its config), sequence 128, token ids
              and mask in, the [CLS] vector [768] out

Usage (a GPU host, after scripts/gpu/setup.sh; the arguments go to `python -m tritonkit_bench.gpu`):
    python3 scripts/gpu/heldout.py --only vit --out $OUT/heldout.md --raw $OUT/heldout.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

from tests.support import torch_zoo  # noqa: E402

from tritonkit_bench import gpu  # noqa: E402
from tritonkit_bench.gpu_models import IMAGE_SIZE, PARTS, SEQ, Part, Payload, text_examples  # noqa: E402

#: the zoo's image families take `x` and answer `y`
ZOO_IMAGE = Payload((("x", (3, IMAGE_SIZE, IMAGE_SIZE), "normal"),), "y")
#: and its text families take token ids and a mask and answer `y`
ZOO_TEXT = Payload((("input_ids", (SEQ,), "ids"), ("attention_mask", (SEQ,), "ones")), "y")


def _images(batch: int, seed: int = 1, held_out: bool = False) -> dict[str, Any]:
    import torch  # noqa: PLC0415 (torch is heavy)

    g = torch.Generator().manual_seed(seed + (100 if held_out else 0))
    return {"x": torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)}


def _family(name: str) -> Any:
    return torch_zoo.full(name).module


def register() -> None:
    for name, about in (
        ("vit", "ViT-B/16 (torchvision's `vit_b_16` where it imports; patch 16, 12 layers, hidden 768)"),
        ("convnext", "ConvNeXt-T (torchvision's `convnext_tiny` where it imports)"),
    ):
        PARTS[name] = Part(
            name,
            f"{about}, seeded weights, input FP32 `x` [3, 224, 224] (602 KB a row), output FP32 `y` [1000]",
            ZOO_IMAGE,
            64,
            (1, 2, 4, 8, 16, 32, 64),
            (1, 8, 64, 256, 512),
            30.0,
            lambda name=name: _family(name),
            _images,
        )
    PARTS["distilbert"] = Part(
        "distilbert",
        "DistilBERT-base (transformers' `DistilBertModel` from its config: 6 layers, hidden 768, 12 heads), "
        "seeded weights, sequence 128, inputs INT64 `input_ids`/`attention_mask`, output FP32 `y` [768] "
        "(the [CLS] vector)",
        ZOO_TEXT,
        128,
        (1, 2, 4, 8, 16, 32, 64, 96, 128),
        (1, 8, 64, 256, 512),
        20.0,
        lambda: _family("distilbert"),
        lambda batch, seed=1, held_out=False: text_examples(batch, seed, held_out),
    )


if __name__ == "__main__":
    register()
    sys.exit(gpu.main(sys.argv[1:]))
