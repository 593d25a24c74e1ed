"""An image classifier with the ResNet-50 architecture (bottleneck blocks [3, 4, 6, 3], 1000
classes), written here with **seeded synthetic weights**: it is for throughput work, its
predictions mean nothing. Input ``image`` (FP32, [batch, 3, H, W], dynamic batch); output
``logits`` (FP32, [batch, 1000]).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritonkit.convert.graph.export import export_model

__all__ = ["INPUT", "OUTPUT", "SEED", "build_resnet50", "export_resnet50"]

INPUT = "image"
OUTPUT = "logits"
SEED = 50


def build_resnet50(num_classes: int = 1000, seed: int = SEED) -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))
    from torch import nn  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch.manual_seed(seed)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes: int, planes: int, stride: int) -> None:
            super().__init__()
            out = planes * self.expansion
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(out)
            # Zero-init of the last BN scale keeps the residual stream's variance bounded with random weights.
            nn.init.constant_(self.bn3.weight, 0.2)
            self.relu = nn.ReLU(inplace=True)
            self.down: nn.Module = nn.Identity()
            if stride != 1 or inplanes != out:
                self.down = nn.Sequential(
                    nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
                )

        def forward(self, x: Any) -> Any:
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + self.down(x))

    class ResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
                nn.BatchNorm2d(64),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, stride=2, padding=1),
            )
            layers: list[nn.Module] = []
            inplanes = 64
            for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(blocks):
                    layers.append(Bottleneck(inplanes, planes, stride if i == 0 else 1))
                    inplanes = planes * Bottleneck.expansion
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(inplanes, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x: Any) -> Any:
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    return ResNet50().eval()


def export_resnet50(path: str | Path, image_size: int = 224) -> Path:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    example = (torch.zeros(1, 3, image_size, image_size),)
    export_model(
        build_resnet50(),
        example,
        path,
        input_names=(INPUT,),
        output_names=(OUTPUT,),
        exporter="torchscript",  # traces as it always has: no need for the slower dynamo export
        dynamic_axes={INPUT: {0: "batch"}, OUTPUT: {0: "batch"}},
    )
    return Path(path)
