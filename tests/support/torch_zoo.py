"""Common architectures as `source.torch` entry points, written here the way their reference
implementations are (torchvision and transformers), at any width: the zoo tests build them small on
the CPU, scripts/gpu/zoo.py at full size. Weights are random (seeded); nothing is edited for export.

- ViT (torchvision `VisionTransformer`): patch conv, class token, `nn.MultiheadAttention(batch_first=True)`
  self-attention called as torchvision's `EncoderBlock` calls it (its eval fast path,
  `aten::_native_multi_head_attention`, is what the TorchScript exporter cannot export).
- ConvNeXt (torchvision `convnext_tiny`): 4x4 stem, 7x7 depthwise conv, channels-last LayerNorm, pointwise
  MLP with GELU, layer scale; LayerNorm2d + 2x2 conv downsampling.
- ResNet (torchvision `resnet50`): bottleneck blocks, BatchNorm, projection shortcuts.
- MobileNetV3 (torchvision `mobilenet_v3_large`): inverted residuals, squeeze-and-excitation with
  hardsigmoid, hardswish.
- EfficientNet (torchvision `efficientnet_b0`): MBConv blocks with SiLU, squeeze-and-excitation,
  stochastic depth (identity in eval).
- BERT and DistilBERT (`transformers` `BertModel` / `DistilBertModel` from configs), the [CLS] vector.
- An `nn.TransformerEncoder` text classifier (its eval fast path: `aten::_transformer_encoder_layer_fwd`).

Each family has a `Config` with `small()` (tests) and `full()` (the reference model's size).
At full size torchvision's own models are used where torchvision imports, with any all-zero `nn.Linear`
redrawn (torchvision's ViT zero-initialises its head: a random-weight ViT would answer zeros everywhere).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from tritonkit.convert.graph.export import TorchSource

__all__ = ["FAMILIES", "IMAGE_FAMILIES", "TEXT_FAMILIES", "source"]

SEED = 0


# --- ViT ----------------------------------------------------------------------------------------------
class _EncoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln_1(x)
        h, _ = self.self_attention(h, h, h, need_weights=False)
        x = x + h
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    def __init__(
        self, image: int, patch: int, dim: int, depth: int, heads: int, mlp: int, classes: int
    ) -> None:
        super().__init__()
        self.conv_proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        tokens = (image // patch) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, tokens, dim).normal_(std=0.02))
        self.layers = nn.Sequential(*[_EncoderBlock(dim, heads, mlp) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.head(self.ln(self.layers(x))[:, 0])  # type: ignore[no-any-return]


# --- ConvNeXt -----------------------------------------------------------------------------------------
class _LayerNorm2d(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _CNBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        # torchvision starts it at 1e-6 (trained models reach about 0.1): with random weights 1e-6 would
        # make every block an identity, and the zoo would test nothing of it.
        self.layer_scale = nn.Parameter(torch.full((dim,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        return x + (self.layer_scale * self.mlp(h)).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    def __init__(self, dims: Sequence[int], depths: Sequence[int], classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, dims[0], kernel_size=4, stride=4),
            _LayerNorm2d(dims[0], eps=1e-6),
        ]
        for i, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
            if i:
                layers += [
                    _LayerNorm2d(dims[i - 1], eps=1e-6),
                    nn.Conv2d(dims[i - 1], dim, kernel_size=2, stride=2),
                ]
            layers += [_CNBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            _LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(1), nn.Linear(dims[-1], classes)
        )
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.features(x)))  # type: ignore[no-any-return]


# --- ResNet -------------------------------------------------------------------------------------------
class _Bottleneck(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * 4
        self.body = nn.Sequential(
            nn.Conv2d(inplanes, planes, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, out, 1, bias=False),
            nn.BatchNorm2d(out),
        )
        self.downsample = (
            nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))
            if stride != 1 or inplanes != out
            else nn.Identity()
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.downsample(x))  # type: ignore[no-any-return]


class ResNet(nn.Module):
    def __init__(self, width: int, blocks: Sequence[int], classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        layers: list[nn.Module] = []
        inplanes = width
        for i, count in enumerate(blocks):
            planes = width * 2**i
            for j in range(count):
                layers.append(_Bottleneck(inplanes, planes, 2 if j == 0 and i > 0 else 1))
                inplanes = planes * 4
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))  # type: ignore[no-any-return]


# --- MobileNetV3 and EfficientNet: inverted residuals with squeeze-and-excitation ----------------------
class _SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeeze: int, act: type[nn.Module], gate: type[nn.Module]) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.act = act()
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))  # type: ignore[no-any-return]


def _conv_bn(
    cin: int, cout: int, kernel: int, stride: int, groups: int, act: type[nn.Module] | None
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def _divisible(value: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class _InvertedResidual(nn.Module):
    """MobileNetV3's block (and EfficientNet's MBConv with `act=nn.SiLU`, `gate=nn.Sigmoid`)."""

    def __init__(
        self,
        cin: int,
        expanded: int,
        cout: int,
        kernel: int,
        stride: int,
        se_squeeze: int | None,
        act: type[nn.Module],
        gate: type[nn.Module],
        se_act: type[nn.Module],
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(_conv_bn(cin, expanded, 1, 1, 1, act))
        layers.append(_conv_bn(expanded, expanded, kernel, stride, expanded, act))
        if se_squeeze is not None:
            layers.append(_SqueezeExcite(expanded, se_squeeze, se_act, gate))
        layers.append(_conv_bn(expanded, cout, 1, 1, 1, None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y  # type: ignore[no-any-return]


#: (kernel, expanded, out, squeeze-and-excite, hardswish, stride): torchvision's mobilenet_v3_large table.
MOBILENET_V3_LARGE = (
    (3, 16, 16, False, False, 1),
    (3, 64, 24, False, False, 2),
    (3, 72, 24, False, False, 1),
    (5, 72, 40, True, False, 2),
    (5, 120, 40, True, False, 1),
    (5, 120, 40, True, False, 1),
    (3, 240, 80, False, True, 2),
    (3, 200, 80, False, True, 1),
    (3, 184, 80, False, True, 1),
    (3, 184, 80, False, True, 1),
    (3, 480, 112, True, True, 1),
    (3, 672, 112, True, True, 1),
    (5, 672, 160, True, True, 2),
    (5, 960, 160, True, True, 1),
    (5, 960, 160, True, True, 1),
)


class MobileNetV3(nn.Module):
    def __init__(self, width: float, rows: int, classes: int) -> None:
        super().__init__()
        table = MOBILENET_V3_LARGE[:rows]
        first = _divisible(16 * width)
        layers: list[nn.Module] = [_conv_bn(3, first, 3, 2, 1, nn.Hardswish)]
        cin = first
        for kernel, expanded, out, se, hs, stride in table:
            exp, cout = _divisible(expanded * width), _divisible(out * width)
            act = nn.Hardswish if hs else nn.ReLU
            squeeze = _divisible(exp // 4) if se else None
            layers.append(
                _InvertedResidual(cin, exp, cout, kernel, stride, squeeze, act, nn.Hardsigmoid, nn.ReLU)
            )
            cin = cout
        last = 6 * cin
        layers.append(_conv_bn(cin, last, 1, 1, 1, nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        hidden = _divisible(1280 * width)
        self.classifier = nn.Sequential(
            nn.Linear(last, hidden), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(hidden, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))  # type: ignore[no-any-return]


#: (expand ratio, kernel, stride, in, out, layers): torchvision's efficientnet_b0 stages.
EFFICIENTNET_B0 = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


class EfficientNet(nn.Module):
    def __init__(self, width: float, stages: int, classes: int) -> None:
        super().__init__()
        table = EFFICIENTNET_B0[:stages]
        stem = _divisible(32 * width)
        layers: list[nn.Module] = [_conv_bn(3, stem, 3, 2, 1, nn.SiLU)]
        cin = stem
        for expand, kernel, stride, first_in, out, count in table:
            cout = _divisible(out * width)
            for i in range(count):
                exp = _divisible(cin * expand)
                squeeze = max(1, _divisible(first_in * width) // 4)  # torchvision: input channels / 4
                layers.append(
                    _InvertedResidual(
                        cin, exp, cout, kernel, stride if i == 0 else 1, squeeze, nn.SiLU, nn.Sigmoid, nn.SiLU
                    )
                )
                cin = cout
        last = 4 * _divisible(320 * width) if stages == len(EFFICIENTNET_B0) else 4 * cin
        layers.append(_conv_bn(cin, last, 1, 1, 1, nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))  # type: ignore[no-any-return]


# --- text ---------------------------------------------------------------------------------------------
class TextEncoder(nn.Module):
    """An `nn.TransformerEncoder` over token embeddings, mean-pooled, as in PyTorch's tutorials."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, positions: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.empty(1, positions, dim).normal_(std=0.02))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = (
            self.embed(input_ids) * math.sqrt(self.embed.embedding_dim)
            + self.position[:, : input_ids.shape[1]]
        )
        return self.head(self.encoder(x).mean(1))  # type: ignore[no-any-return]


class _ClsVector(nn.Module):
    """A transformers encoder's first-token hidden state (what a classifier head reads)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]  # type: ignore[no-any-return]


def _bert(hidden: int, layers: int, heads: int, vocab: int) -> nn.Module:
    from transformers import BertConfig, BertModel  # noqa: PLC0415 (transformers is heavy)

    config = BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
    )
    return _ClsVector(BertModel(config, add_pooling_layer=False))


def _distilbert(hidden: int, layers: int, heads: int, vocab: int) -> nn.Module:
    from transformers import DistilBertConfig, DistilBertModel  # noqa: PLC0415 (transformers is heavy)

    config = DistilBertConfig(
        vocab_size=vocab,
        dim=hidden,
        n_layers=layers,
        n_heads=heads,
        hidden_dim=4 * hidden,
        max_position_embeddings=512,
    )
    return _ClsVector(DistilBertModel(config))


# --- entry points -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Family:
    """One architecture: how to build it at a size, and the inputs it takes."""

    build: Callable[[bool], nn.Module]
    kind: str  # "image" (x: [N, 3, H, W]) or "text" (input_ids[, attention_mask]: [N, S])
    image: tuple[int, int] = (32, 224)  # (small, full) input size of image families
    mask: bool = False  # text: takes an attention mask too
    vocab: tuple[int, int] = (1000, 30522)

    def source(self, full: bool = False) -> TorchSource:
        torch.manual_seed(SEED)
        module = self.build(full).eval()
        if self.kind == "image":
            size = self.image[1] if full else self.image[0]
            return TorchSource(module, (torch.randn(2, 3, size, size),), ("x",), ("y",))
        ids = torch.randint(0, self.vocab[1] if full else self.vocab[0], (2, 16))
        if not self.mask:
            return TorchSource(module, (ids,), ("input_ids",), ("y",), {"input_ids": {1: "sequence"}})
        return TorchSource(
            module,
            (ids, torch.ones_like(ids)),
            ("input_ids", "attention_mask"),
            ("y",),
            {"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}},
        )


FAMILIES: dict[str, Family] = {
    "vit": Family(
        lambda full: ViT(224, 16, 768, 12, 12, 3072, 1000) if full else ViT(32, 8, 32, 2, 2, 64, 10), "image"
    ),
    "convnext": Family(
        lambda full: (
            ConvNeXt((96, 192, 384, 768), (3, 3, 9, 3), 1000) if full else ConvNeXt((8, 16), (1, 1), 10)
        ),
        "image",
    ),
    "resnet": Family(
        lambda full: ResNet(64, (3, 4, 6, 3), 1000) if full else ResNet(8, (1, 1, 1, 1), 10), "image"
    ),
    "mobilenetv3": Family(
        lambda full: MobileNetV3(1.0, 15, 1000) if full else MobileNetV3(0.25, 6, 10), "image"
    ),
    "efficientnet": Family(
        lambda full: EfficientNet(1.0, 7, 1000) if full else EfficientNet(0.25, 3, 10), "image"
    ),
    "bert": Family(
        lambda full: _bert(768, 12, 12, 30522) if full else _bert(32, 2, 2, 1000), "text", mask=True
    ),
    "distilbert": Family(
        lambda full: _distilbert(768, 6, 12, 30522) if full else _distilbert(32, 2, 2, 1000),
        "text",
        mask=True,
    ),
    "transformer_encoder": Family(
        lambda full: TextEncoder(30522, 512, 8, 6, 512, 2) if full else TextEncoder(1000, 32, 2, 2, 64, 2),
        "text",
    ),
}
IMAGE_FAMILIES = tuple(k for k, f in FAMILIES.items() if f.kind == "image")
TEXT_FAMILIES = tuple(k for k, f in FAMILIES.items() if f.kind == "text")


def source(name: str, full: bool = False) -> TorchSource:
    return FAMILIES[name].source(full)


# `source.torch: "tests.support.torch_zoo:<family>"` entry points (small sizes).
def vit() -> TorchSource:
    return source("vit")


def convnext() -> TorchSource:
    return source("convnext")


def resnet() -> TorchSource:
    return source("resnet")


def mobilenetv3() -> TorchSource:
    return source("mobilenetv3")


def efficientnet() -> TorchSource:
    return source("efficientnet")


def bert() -> TorchSource:
    return source("bert")


def distilbert() -> TorchSource:
    return source("distilbert")


def transformer_encoder() -> TorchSource:
    return source("transformer_encoder")


def unexportable() -> TorchSource:
    """A module neither exporter can take: an operator with no ONNX translation."""
    return TorchSource(_Mystery(), (torch.zeros(2, 3),), ("x",), ("y",))


@torch.library.custom_op("tritonkit_test::mystery", mutates_args=())
def _mystery(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_mystery.register_fake
def _mystery_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _Mystery(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _mystery(x) + 1  # type: ignore[no-any-return]


#: torchvision's builder per image family (weights=None: random), used at full size where it imports.
TORCHVISION = {
    "vit": "vit_b_16",
    "convnext": "convnext_tiny",
    "resnet": "resnet50",
    "mobilenetv3": "mobilenet_v3_large",
    "efficientnet": "efficientnet_b0",
}


def _redraw_zero_linears(module: nn.Module) -> None:
    """Random weights for every all-zero `nn.Linear` (torchvision's ViT zero-initialises its head): a
    head of zeros answers 0 for every image in every precision, and the gates would measure nothing."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear) and not layer.weight.detach().any():
            with torch.no_grad():
                layer.weight.normal_(std=0.02)


def vit_zero_head() -> TorchSource:
    """The small ViT with torchvision's initialisation of the head (weights and bias zero): the FP32
    reference answers 0 for every image, the FP16 graph too."""
    built = source("vit")
    head = built.module.head
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
    return built


def torchvision_missing() -> str | None:
    """Why torchvision's models cannot be used here (None: they can)."""
    try:
        import torchvision  # noqa: F401, PLC0415 (optional: the CPU machines' wheel does not import)
    except Exception as exc:  # ImportError, or a CUDA build's missing operators (RuntimeError)
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def full(name: str) -> TorchSource:
    """Family ``name`` at full size: torchvision's model where torchvision imports, else this module's."""
    if name in TORCHVISION and torchvision_missing() is None:
        from torchvision import models  # noqa: PLC0415 (checked above)

        torch.manual_seed(SEED)
        module = getattr(models, TORCHVISION[name])(weights=None).eval()
        _redraw_zero_linears(module)
        return TorchSource(module, (torch.randn(2, 3, 224, 224),), ("x",), ("y",))
    return source(name, full=True)


# `source.torch: "tests.support.torch_zoo:full_<family>"` entry points (scripts/gpu/zoo.py).
def full_vit() -> TorchSource:
    return full("vit")


def full_convnext() -> TorchSource:
    return full("convnext")


def full_resnet() -> TorchSource:
    return full("resnet")


def full_mobilenetv3() -> TorchSource:
    return full("mobilenetv3")


def full_efficientnet() -> TorchSource:
    return full("efficientnet")


def full_bert() -> TorchSource:
    return full("bert")


def full_distilbert() -> TorchSource:
    return full("distilbert")


def full_transformer_encoder() -> TorchSource:
    return full("transformer_encoder")


def local_class() -> TorchSource:
    """A module whose class is defined inside the entry point: it cannot be pickled to the build's
    worker, which then calls this entry point itself."""

    class Local(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) * 2

    return TorchSource(Local(), (torch.zeros(2, 4),), ("x",), ("y",))
