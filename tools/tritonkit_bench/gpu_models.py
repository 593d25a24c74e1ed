"""The GPU benchmark's models and the versions built from them (:mod:`tritonkit_bench.gpu`).

Owns the two models measured (the MiniLM architecture, seeded, mean-pooled embedding; ResNet-50 from
:mod:`tritonkit.convert.flagship.resnet`, seeded synthetic weights), their example and held-out inputs,
the versions each part of the benchmark serves (built by :mod:`tritonkit.convert.torch_program` exactly
as a build would), and which in-process engine each served version is compared with. Export runs on
the CPU, so all of this can be built (and tested) without a GPU.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from tritonkit.convert.execution import Placement, ServingSpec, plan_execution
from tritonkit.convert.flagship.resnet import INPUT as IMAGE_INPUT
from tritonkit.convert.flagship.resnet import OUTPUT as LOGITS
from tritonkit.convert.flagship.resnet import build_resnet50
from tritonkit.convert.torch_program import write_onnx_gpu_version, write_torch_version
from tritonkit.serve.runners import runner_path
from tritonkit_bench.gpu_load import IMAGE, TEXT, Payload

__all__ = [
    "HIDDEN",
    "IMAGE_SIZE",
    "PARTS",
    "SEQ",
    "Part",
    "build_part",
    "image_examples",
    "minilm",
    "runner",
    "text_examples",
]

SEQ = 128
HIDDEN = 384
IMAGE_SIZE = 224
MINILM_MAX_BATCH = 256
# 64 images of 602 KB are 38.5 MB per execute crossing the python backend's shared memory: enough
# for the batches Triton forms here, and the largest bucket captured as a CUDA graph.
RESNET_MAX_BATCH = 64


@dataclasses.dataclass(frozen=True)
class Part:
    """One model's share of the benchmark."""

    name: str
    payload: Payload
    batches: tuple[int, ...]  # in-process batch sizes always measured
    max_batch: int
    #: (version, precision, dynamic batching, instance count or None for the default placement)
    versions: tuple[tuple[str, str, bool, int | None], ...]
    #: (version, request batch, requests in flight)
    scenarios: tuple[tuple[str, int, int], ...]
    #: served version -> the in-process engine it is compared with
    engine_of: dict[str, str]
    #: (version, precision, label, CUDA graphs) of the torch engines measured in-process
    engines: tuple[tuple[str, str, str, bool], ...]


PARTS: dict[str, Part] = {
    "minilm": Part(
        "minilm",
        TEXT,
        (1, 16, 64, 256),
        MINILM_MAX_BATCH,
        (
            ("minilm_fp16", "fp16", True, None),  # the default placement: 2 instances on the GPU
            ("minilm_fp16_nodb", "fp16", False, None),
            ("minilm_fp16_x1", "fp16", True, 1),
            ("minilm_fp16_nodb_x1", "fp16", False, 1),
            ("minilm_fp32", "fp32", True, None),
        ),
        (
            ("minilm_fp16", 1, 64),
            ("minilm_fp16_nodb", 1, 64),
            ("minilm_fp16", 16, 16),
            ("minilm_fp16_nodb", 16, 16),
            ("minilm_fp16", 64, 8),
            ("minilm_fp16_x1", 1, 64),
            ("minilm_fp16_nodb_x1", 1, 64),
            ("minilm_fp16_x1", 16, 16),
            ("minilm_fp16_nodb_x1", 16, 16),
            ("minilm_fp16_x1", 64, 8),
            ("minilm_fp32", 16, 16),
            ("minilm_fp32", 64, 8),
            ("minilm_ort_fp32", 16, 16),
            ("minilm_ort_fp32", 64, 8),
        ),
        {
            "minilm_fp16": "torch fp16 CUDA graphs",
            "minilm_fp16_x1": "torch fp16 CUDA graphs",
            "minilm_fp32": "torch fp32 CUDA graphs",
            "minilm_ort_fp32": "onnxruntime fp32 CUDA I/O binding",
        },
        (
            ("minilm_fp16", "fp16", "torch fp16 CUDA graphs", True),
            ("minilm_fp16", "fp16", "torch fp16 eager", False),
            ("minilm_fp32", "fp32", "torch fp32 CUDA graphs", True),
            ("minilm_fp32", "fp32", "torch fp32 eager", False),
        ),
    ),
    "resnet": Part(
        "resnet",
        IMAGE,
        (1, 16, 64),
        RESNET_MAX_BATCH,
        (
            ("resnet50_fp16", "fp16", True, None),
            ("resnet50_fp32", "fp32", True, None),
        ),
        (
            ("resnet50_fp16", 1, 64),
            ("resnet50_fp16", 16, 16),
            ("resnet50_fp32", 16, 16),
        ),
        {"resnet50_fp16": "torch fp16 CUDA graphs", "resnet50_fp32": "torch fp32 CUDA graphs"},
        (
            ("resnet50_fp16", "fp16", "torch fp16 CUDA graphs", True),
            ("resnet50_fp32", "fp32", "torch fp32 CUDA graphs", True),
        ),
    ),
}
# No FP16: the TorchScript export of the half module is ONNX that ONNX Runtime refuses
# (LayerNormalization bound to float and float16).
ORT_VERSIONS = {"minilm_ort_fp32": "fp32"}


def runner(name: str) -> ModuleType:
    """A runner file (serve/runners) imported as a module: its engine runs in-process."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", runner_path(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def minilm(seed: int = 0) -> Any:
    """MiniLM-architecture embedder: (input_ids, attention_mask) -> mean-pooled [batch, 384]."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))
    from transformers import BertConfig, BertModel  # noqa: PLC0415 (optional (models extra))

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=HIDDEN,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
    )
    bert: Any = BertModel(config, add_pooling_layer=False)
    bert.eval()

    class Embedder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled: torch.Tensor = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
            return pooled

    return Embedder().eval()


def text_examples(batch: int, seed: int = 1, ragged: bool = False) -> dict[str, Any]:
    """MiniLM inputs; ``ragged``: lengths vary and padding is masked, as in real text."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 30000, (batch, SEQ), generator=g)
    mask = torch.ones(batch, SEQ, dtype=torch.int64)
    if ragged:
        for row, length in enumerate(torch.randint(8, SEQ + 1, (batch,), generator=g).tolist()):
            mask[row, length:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def image_examples(batch: int, seed: int = 1, size: int = IMAGE_SIZE) -> dict[str, Any]:
    """ResNet-50 inputs: FP32 images, standard normal (what a normalised photo's pixels look like)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    g = torch.Generator().manual_seed(seed)
    return {IMAGE_INPUT: torch.randn(batch, 3, size, size, generator=g)}


def examples(part: str, batch: int, seed: int = 1, held_out: bool = False) -> dict[str, Any]:
    """The part's inputs; ``held_out``: the accuracy set (another seed, ragged text)."""
    if part == "resnet":
        return image_examples(batch, seed)
    return text_examples(batch, seed, ragged=held_out)


def reference(part: str) -> Any:
    """The part's FP32 module (the accuracy reference, and what is exported)."""
    return build_resnet50() if part == "resnet" else minilm()


def output_name(part: str) -> str:
    return LOGITS if part == "resnet" else TEXT.output


def build_part(
    root: Path,
    part: str,
    have_ort: bool,
    log: Callable[[str], None],
    *,
    gpus: list[int] | None = None,
    image_size: int = IMAGE_SIZE,
) -> dict[str, str]:
    """Write the part's versions under ``root``; return name -> what it is. ``gpus`` (None: ask
    nvidia-smi) and ``image_size`` let a CPU-only test build the same versions small."""
    spec_part = PARTS[part]
    feeds = (
        image_examples(2, size=image_size) if part == "resnet" else examples(part, 2)
    )  # batch 2: torch.export specialises size-1 axes
    versions: dict[str, str] = {}
    for name, precision, batching, count in spec_part.versions:
        spec = ServingSpec(engine="torch", precision=precision, placement=Placement(count=count))
        plan = plan_execution(spec, max_batch_size=spec_part.max_batch, gpus=gpus)
        write_torch_version(
            root,
            name,
            reference(part),
            feeds,
            [output_name(part)],
            plan,
            max_batch_size=spec_part.max_batch,
            max_queue_delay_us=500,
            dynamic_batching=batching,
        )
        versions[name] = (
            f"torch {precision}, CUDA graphs, {count or 'default'} instance(s), "
            f"{'dynamic batching' if batching else 'no dynamic batching'}"
        )
        log(f"built {name}")
    if part == "minilm" and have_ort:
        versions.update(_ort_versions(root, feeds, log, gpus))
    return versions


def _ort_versions(
    root: Path, feeds: dict[str, Any], log: Callable[[str], None], gpus: list[int] | None
) -> dict[str, str]:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    versions: dict[str, str] = {}
    for name, precision in ORT_VERSIONS.items():
        onnx_path = root.parent / f"{name}.onnx"
        try:  # the TorchScript exporter (no onnxscript needed)
            torch.onnx.export(
                minilm().half() if precision == "fp16" else minilm(),
                (feeds["input_ids"], feeds["attention_mask"]),
                str(onnx_path),
                input_names=["input_ids", "attention_mask"],
                output_names=["EMBEDDING"],
                dynamic_axes={k: {0: "batch"} for k in ("input_ids", "attention_mask", "EMBEDDING")},
                opset_version=17,
                dynamo=False,
            )
        except Exception as exc:
            log(f"ONNX export for {name} failed, left out: {' '.join(str(exc).split())[:200]}")
            continue
        plan = plan_execution(
            ServingSpec(engine="onnxruntime", precision=precision),
            max_batch_size=MINILM_MAX_BATCH,
            gpus=gpus,
        )
        write_onnx_gpu_version(
            onnx_path, root, name, plan, max_batch_size=MINILM_MAX_BATCH, max_queue_delay_us=500
        )
        versions[name] = f"ONNX Runtime CUDA {precision}, I/O binding, default instances, dynamic batching"
        log(f"built {name}")
    return versions
