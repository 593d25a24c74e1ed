"""The GPU benchmark's models and the versions built from them (:mod:`tritonkit_bench.gpu`).

Owns the three models measured, each with seeded random weights (their outputs mean nothing; the
architecture is what costs) and what each takes and answers (:class:`Payload`): a BERT-base encoder at sequence 128 (12 layers, hidden 768, 12 heads, the
CLS row of the last layer out: the model of the T4 tables users compare against), the MiniLM
architecture (6 layers, hidden 384, mean-pooled embedding) and ResNet-50
(:mod:`tritonkit.convert.graph.flagship.resnet`, FP32 images, and again with FP16 images and logits on the
wire); their example and held-out inputs; and the FP16 version each
part serves, built by :mod:`tritonkit.convert.targets.torch_program` exactly as ``tritonkit build`` would with a
spec's ``serving: {device: gpu, engine: torch}`` (default placement: 2 instances per GPU, the ``fine``
bucket ladder as the batcher's preferred sizes, 500 µs delay). Export runs on the CPU, so all of this can
be built (and tested) without a GPU; :func:`tiny_module` and :func:`tiny_inputs` are a linear layer's part
for the runs and tests that serve a part on the CPU (``gpu_ab --dry-run``, ``tests/support/bench_tiny.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from tritonkit.backends.runners import load_runner
from tritonkit.convert.graph.flagship.resnet import INPUT as IMAGE_INPUT
from tritonkit.convert.graph.flagship.resnet import build_resnet50
from tritonkit.convert.spec.execution import ServingSpec, plan_execution
from tritonkit.convert.targets.torch_program import write_torch_version

__all__ = [
    "BERT",
    "IMAGE",
    "IMAGE16",
    "IMAGE_SIZE",
    "PARTS",
    "SEQ",
    "TEXT",
    "TINY",
    "Part",
    "Payload",
    "build_part",
    "examples",
    "reference",
    "runner",
    "served_examples",
    "tiny_inputs",
    "tiny_module",
]

SEQ = 128
IMAGE_SIZE = 224
DELAY_US = 500


@dataclasses.dataclass(frozen=True)
class Payload:
    """What a part's version takes and answers: (name, per-row shape, fill) for each input, fill one of
    ``ids`` (token ids in the vocabulary), ``ones`` (an attention mask), ``normal`` (FP32 standard
    normal, an image) or ``normal16`` (the same in FP16), and the output its version names (the
    served load is the product's generator's, its data generated from the version's config)."""

    inputs: tuple[tuple[str, tuple[int, ...], str], ...]
    output: str


#: MiniLM: token ids and mask of sequence 128; mean-pooled embedding.
TEXT = Payload((("input_ids", (SEQ,), "ids"), ("attention_mask", (SEQ,), "ones")), "EMBEDDING")
#: BERT-base: token ids and mask of sequence 128; the CLS row of the last layer.
BERT = Payload((("input_ids", (SEQ,), "ids"), ("attention_mask", (SEQ,), "ones")), "CLS")
#: ResNet-50: one FP32 224 x 224 RGB image per row (602 KB); logits.
IMAGE = Payload((("image", (3, IMAGE_SIZE, IMAGE_SIZE), "normal"),), "logits")
#: ResNet-50 with its image and logits FP16 on the wire (301 KB a row).
IMAGE16 = Payload((("image", (3, IMAGE_SIZE, IMAGE_SIZE), "normal16"),), "logits")
#: the tiny part (:func:`tiny_module`): FP32 ``X`` [8] and an INT64 ``MASK`` [3] in, FP32 ``Y`` out
TINY = Payload((("X", (8,), "normal"), ("MASK", (3,), "ones")), "Y")


@dataclasses.dataclass(frozen=True)
class Part:
    """One model's share of the benchmark."""

    name: str
    about: str
    payload: Payload
    max_batch: int
    batches: tuple[int, ...]  # in-process batch sizes measured (the peak is the best of them)
    levels: tuple[int, ...]  # requests of one row in flight, served
    budget_ms: float  # tune's p99 budget
    #: the FP32 module (built on call) and its inputs: (batch, seed, held out) -> {input name: tensor}
    factory: Callable[[], Any] = lambda: None
    inputs: Callable[[int, int, bool], dict[str, Any]] = lambda batch, seed, held_out: {}
    #: float inputs and outputs served as FP16 (a spec's ``fp16.keep_io_types: false``)
    half_io: bool = False

    @property
    def model(self) -> str:
        return f"{self.name}_fp16"


def tiny_module() -> Any:
    """A linear layer over ``X`` [8] scaled by the ``MASK`` [3] row's sum: ``Y`` [4] (seeded weights)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(8, 4)

        def forward(self, X: torch.Tensor, MASK: torch.Tensor) -> torch.Tensor:  # noqa: N803 (input names)
            out: torch.Tensor = self.proj(X) * MASK.to(X.dtype).sum(dim=1, keepdim=True)
            return out

    torch.manual_seed(0)
    return Tiny().eval()


def tiny_inputs(batch: int, seed: int, held_out: bool) -> dict[str, Any]:
    """The tiny part's inputs: standard normal ``X``, a mask of ones."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    g = torch.Generator().manual_seed(seed)
    return {"X": torch.randn(batch, 8, generator=g), "MASK": torch.ones(batch, 3, dtype=torch.int64)}


def runner(name: str) -> ModuleType:
    """A runner file (backends/runners) imported as a module: its engine runs in-process."""
    return load_runner(name)


def _bert(layers: int, hidden: int, heads: int, intermediate: int, pooled: str, seed: int = 0) -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))
    from transformers import BertConfig, BertModel  # noqa: PLC0415 (optional (models extra))

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=512,
    )
    bert: Any = BertModel(config, add_pooling_layer=False)
    bert.eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if pooled == "cls":
                first: torch.Tensor = hidden[:, 0]
                return first
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean: torch.Tensor = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
            return mean

    return Encoder().eval()


def bert_base(seed: int = 0) -> Any:
    """BERT-base encoder: (input_ids, attention_mask) -> the CLS row [batch, 768]."""
    return _bert(12, 768, 12, 3072, "cls", seed)


def minilm(seed: int = 0) -> Any:
    """MiniLM-architecture embedder: (input_ids, attention_mask) -> mean-pooled [batch, 384]."""
    return _bert(6, 384, 12, 1536, "mean", seed)


def text_examples(batch: int, seed: int = 1, ragged: bool = False) -> dict[str, Any]:
    """Token ids and masks; ``ragged``: lengths vary and padding is masked, as in real text."""
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


RESNET = Part(
    "resnet",
    "ResNet-50 (`tritonkit.convert.graph.flagship.resnet`, seeded weights), input FP32 `image` [3, 224, 224] "
    "(602 KB a row; the FP16 program casts on the GPU inside its graph), output FP32 `logits` [1000]",
    IMAGE,
    64,
    (1, 2, 4, 8, 16, 32, 64),
    (1, 8, 64, 256, 512),
    30.0,
    build_resnet50,
    lambda batch, seed, held_out: image_examples(batch, seed),
)

PARTS: dict[str, Part] = {
    "bert": Part(
        "bert",
        "BERT-base encoder (12 layers, hidden 768, 12 heads, intermediate 3072, seeded weights), sequence "
        "128, inputs INT64 `input_ids`/`attention_mask`, output FP32 `CLS` [768] (the first token's row "
        "of the last layer)",
        BERT,
        128,
        (1, 2, 4, 8, 16, 32, 64, 96, 128),
        (1, 8, 64, 256, 512),
        20.0,
        bert_base,
        text_examples,
    ),
    "minilm": Part(
        "minilm",
        "MiniLM architecture (BERT, 6 layers, hidden 384, 12 heads, seeded weights, mean pooling), sequence "
        "128, inputs INT64 `input_ids`/`attention_mask`, output FP32 `EMBEDDING` [384]",
        TEXT,
        256,
        (1, 2, 4, 8, 16, 32, 64, 128, 256),
        (1, 8, 128, 512, 1024, 2048),
        20.0,
        minilm,
        text_examples,
    ),
    "resnet": RESNET,
    "resnet16": dataclasses.replace(
        RESNET,
        name="resnet16",
        about="ResNet-50 as above, its image in and logits out FP16 on the wire (`fp16.keep_io_types: false`: "
        "301 KB a row, the FP16 program's own precision, so nothing is cast on the GPU), output FP16 "
        "`logits` [1000]",
        payload=IMAGE16,
        half_io=True,
    ),
}


def examples(part: str, batch: int, seed: int = 1, held_out: bool = False) -> dict[str, Any]:
    """The part's inputs; ``held_out``: the accuracy set (another seed, ragged text)."""
    return PARTS[part].inputs(batch, seed, held_out)


def served_examples(part: str, batch: int, seed: int = 1, held_out: bool = False) -> list[Any]:
    """The part's inputs as its version takes them (float tensors FP16 where the part is ``half_io``)."""
    half = PARTS[part].half_io
    return [
        t.half() if half and t.is_floating_point() else t
        for t in examples(part, batch, seed, held_out).values()
    ]


def reference(part: str) -> Any:
    """The part's FP32 module (the accuracy reference, and what is exported)."""
    return PARTS[part].factory()


def build_part(
    root: Path,
    part: str,
    log: Callable[[str], None],
    *,
    gpus: list[int] | None = None,
    parameters: dict[str, str] | None = None,
    runner: str = "python",
) -> Path:
    """Write the part's FP16 version under ``root`` as a build would; return its version folder.
    ``gpus`` (None: ask nvidia-smi) lets a CPU-only test build it; ``parameters`` are added to the
    config's (the runner's diagnostics); ``runner``: ``serving.runner`` (python or native)."""
    spec = PARTS[part]
    plan = plan_execution(
        ServingSpec(engine="torch", precision="fp16", runner=runner), max_batch_size=spec.max_batch, gpus=gpus
    )
    version = write_torch_version(
        root,
        spec.model,
        reference(part),
        examples(part, 2),  # batch 2: torch.export specialises size-1 axes
        [spec.payload.output],
        plan,
        max_batch_size=spec.max_batch,
        max_queue_delay_us=DELAY_US,
        half_io=spec.half_io,
    )
    if parameters:
        from tritonkit.config import load, save  # noqa: PLC0415 (only diagnostics change a written config)

        path = root / spec.model / "config.pbtxt"
        config = load(path)
        config.parameters.update(parameters)
        save(config, path)
    log(
        f"built {spec.model} ({runner} runner): {plan.instance_groups[0].count} instance(s) per GPU, "
        f"buckets {list(plan.batch_buckets)}"
    )
    return version
