"""Does tritonkit measure the server? Four models this project's benchmark never used, built and served
through the commands a user types, each measured by `tritonkit profile` (default flags: its generator
sized to the host, perf_analyzer's figure beside each level) on one `tritonkit serve`; then `tritonkit
tune` with default flags on the image model, timed, and the config it wrote measured again by
perf_analyzer alone.

Models (seeded random weights, `tritonkit build SPEC` with `serving: {device: gpu}`):
  bert   BERT-base encoder (transformers' `BertModel`), sequence 128, token ids and mask in (2 KB a
         request), the [CLS] vector out; fp16
  image  timm's MobileViTv2-100 at 256 px where timm imports (786 KB a request), else a small
         convolutional net of the same input; fp16
  tiny   a DLRM-style recommender: 26 INT64 ids (208 B) into 26 embedding tables, an MLP, one logit; fp16
  seg    torchvision's LRASPP-MobileNetV3-Large at 384 px where torchvision imports, else a small
         convolutional net of the same tensors: FP32 logits [21, 384, 384] out (12.4 MB an answer); fp32

Usage (a GPU host, after `source scripts/gpu/setup.sh`, perf_analyzer in .whl/):
    python3 scripts/gpu/measure_check.py [--parts build,profile,tune] [--models bert,image,tiny,seg]
``--small`` (the CPU: 2-layer BERT, fp32, `serving: {device: cpu}`, levels 1,4) tries the script itself.
Writes $OUT/measure.json (every figure, as it goes) and $OUT/measure.md; logs in $WORK (default
/tmp/tk-measure), packed into $OUT/measure-logs.tgz.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path
from typing import Any

WORK = Path(os.environ.get("WORK", "/tmp/tk-measure"))
OUT = Path(os.environ.get("OUT", "/tmp/gpu-out"))
RESULTS: dict[str, Any] = {}

MODULES = """
import torch
from tritonkit.convert.graph.export import TorchSource

LAYERS = {layers}


class Cls(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        self.bert = BertModel(BertConfig(num_hidden_layers=LAYERS), add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        ids = input_ids.remainder(30522)  # any generator's ids stay in the vocabulary
        return self.bert(input_ids=ids, attention_mask=attention_mask).last_hidden_state[:, 0]


def bert() -> TorchSource:
    ids = torch.randint(1000, 30000, (2, 128))
    return TorchSource(Cls().eval(), (ids, torch.ones_like(ids)), ("input_ids", "attention_mask"), ("cls",))


def _convnet(out_channels: int, upsample: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(3, 32, 3, 2, 1), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, 2, 1), torch.nn.ReLU()]
    if upsample:
        layers += [torch.nn.Conv2d(64, out_channels, 1), torch.nn.Upsample(scale_factor=4.0)]
    else:
        layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, out_channels)]
    return torch.nn.Sequential(*layers)


def image() -> TorchSource:
    try:
        import timm

        torch.manual_seed(0)
        module = timm.create_model("mobilevitv2_100", pretrained=False)
    except ImportError:
        module = _convnet(1000, upsample=False)
    return TorchSource(module.eval(), (torch.randn(2, 3, 256, 256),), ("x",), ("y",))


class _Seg(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        out = self.inner(x)
        return out["out"] if isinstance(out, dict) else out


def seg() -> TorchSource:
    try:
        from torchvision.models.segmentation import lraspp_mobilenet_v3_large

        torch.manual_seed(0)
        module = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21)
    except ImportError:
        module = _convnet(21, upsample=True)
    return TorchSource(_Seg(module).eval(), (torch.randn(2, 3, 384, 384),), ("x",), ("y",))


class Dlrm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.tables = torch.nn.ModuleList(torch.nn.Embedding(1000, 32) for _ in range(26))
        self.mlp = torch.nn.Sequential(torch.nn.Linear(26 * 32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))

    def forward(self, ids):
        ids = ids.remainder(1000)
        return self.mlp(torch.cat([t(ids[:, i]) for i, t in enumerate(self.tables)], dim=1))


def tiny() -> TorchSource:
    return TorchSource(Dlrm().eval(), (torch.randint(0, 1000, (2, 26)),), ("ids",), ("score",))
"""

#: per model: its precision (the answer's dtype follows) and the closed-loop levels profiled
MODELS: dict[str, tuple[str, str]] = {
    "bert": ("fp16", "1,64,256"),
    "image": ("fp16", "1,32,128"),
    "tiny": ("fp16", "1,64,256"),
    "seg": ("fp32", "1,8,32"),
}


def model_of(name: str, small: bool) -> str:
    """The served model a build of ``name`` writes (``<name>_<precision>``): parts run in separate calls
    find it without any record of the build."""
    return f"{name}_{'fp32' if small else MODELS[name][0]}"


def save() -> None:
    (OUT / "measure.json").write_text(json.dumps(RESULTS, indent=1, default=str))


def run(cmd: list[str], log: Path, timeout: float) -> tuple[int, float]:
    """(exit status, seconds) of one command, its output in ``log`` (124: timed out)."""
    began = time.monotonic()
    with log.open("w") as out:
        try:
            code = subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return code, round(time.monotonic() - began, 1)


def build(models: list[str], small: bool) -> None:
    import yaml  # noqa: PLC0415

    (WORK / "mc_models.py").write_text(MODULES.format(layers=2 if small else 12))
    for name in models:
        precision = model_of(name, small).rsplit("_", 1)[1]
        spec = {
            "name": name,
            "source": {"torch": f"mc_models:{name}"},
            "precisions": [precision],
            "serving": {"device": "cpu" if small else "gpu"},
            "batching": {"max_batch_size": 64},
        }
        path = WORK / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        code, took = run(
            [sys.executable, "-m", "tritonkit", "build", str(path), "--repo", str(WORK / "repo")],
            WORK / f"build-{name}.log",
            900,
        )
        RESULTS.setdefault("builds", {})[name] = {"exit": code, "s": took, "model": model_of(name, small)}
        print(f"build {name}: exit {code} in {took} s", flush=True)
        save()


def _ready(port: int, seconds: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as answer:
                if answer.status == 200:
                    return round(time.monotonic() - began, 1)
        except OSError:
            time.sleep(1)
    return None


def profile(models: list[str], small: bool) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "serve", "--repo", str(WORK / "repo"), "--http-port", "18000",
         "--grpc-port", "18001", "--metrics-port", "18002", "--log-file", str(WORK / "tritonserver.log")],
        stdout=(WORK / "serve.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        RESULTS["ready_s"] = _ready(18000, 600)
        print(f"serve ready after {RESULTS['ready_s']} s", flush=True)
        for name in models:
            model = model_of(name, small)
            levels = "1,4" if small else MODELS[name][1]
            out = WORK / f"profile-{name}.json"
            code, took = run(
                [sys.executable, "-m", "tritonkit", "profile", "--model", model, "--url", "127.0.0.1:18001",
                 "--http-url", "127.0.0.1:18000", "--protocol", "grpc", "--concurrency", levels,
                 "--json", str(out)],
                WORK / f"profile-{name}.txt", 300,
            )  # fmt: skip
            RESULTS.setdefault("profile", {})[name] = {
                "exit": code,
                "s": took,
                "text": (WORK / f"profile-{name}.txt").read_text()[-6000:],
                "json": json.loads(out.read_text()) if out.is_file() else None,
            }
            print(
                f"== profile {name} (exit {code}, {took} s)\n{RESULTS['profile'][name]['text']}", flush=True
            )
            save()
    finally:
        server.terminate()
        server.wait(timeout=60)


def tune(model: str, budget_ms: float) -> None:
    """`tritonkit tune` as a user types it, then the written config measured by perf_analyzer alone."""
    report = WORK / "tune-report"
    code, took = run(
        [sys.executable, "-m", "tritonkit", "tune", "--repo", str(WORK / "repo"), "--model", model,
         "--latency-budget-ms", str(budget_ms), "--report", str(report)],
        WORK / "tune.txt", 480,
    )  # fmt: skip
    summary = json.loads((report / "tune.json").read_text()) if (report / "tune.json").is_file() else {}
    RESULTS["tune"] = {
        "exit": code,
        "s": took,
        "text": (WORK / "tune.txt").read_text()[-5000:],
        "winner": summary.get("winner"),
        "verdict": summary.get("verdict"),
        "chosen": summary.get("chosen"),
    }
    print(f"== tune (exit {code}, {took} s)\n{RESULTS['tune']['text']}", flush=True)
    save()
    winner = summary.get("winner") or {}
    level = winner.get("concurrency")
    if not level:
        return
    out = WORK / "confirm.json"
    code, took = run(
        [sys.executable, "-m", "tritonkit", "profile", "--repo", str(WORK / "repo"), "--model", model,
         "--protocol", "grpc", "--generator", "perf_analyzer", "--concurrency", str(level), "--json", str(out)],
        WORK / "confirm.txt", 240,
    )  # fmt: skip
    RESULTS["confirm"] = {
        "exit": code,
        "s": took,
        "level": level,
        "text": (WORK / "confirm.txt").read_text()[-3000:],
        "json": json.loads(out.read_text()) if out.is_file() else None,
    }
    print(f"== perf_analyzer on the written config (exit {code})\n{RESULTS['confirm']['text']}", flush=True)
    save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="build,profile,tune")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tune-model", default="image")
    parser.add_argument("--latency-budget-ms", type=float, default=25.0)
    parser.add_argument("--small", action="store_true", help="the CPU: a 2-layer BERT, fp32, levels 1,4")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    models, parts = args.models.split(","), args.parts.split(",")
    try:
        if "build" in parts:
            build(models, args.small)
        if "profile" in parts:
            profile(models, args.small)
        if "tune" in parts:
            tune(model_of(args.tune_model, args.small), args.latency_budget_ms)
    finally:
        save()
        with tarfile.open(OUT / "measure-logs.tgz", "w:gz") as tar:
            for log in [*WORK.glob("*.log"), *WORK.glob("*.txt")]:
                tar.add(log, arcname=log.name)
            report = WORK / "tune-report"
            if report.is_dir():
                for item in report.glob("*.*"):
                    if item.suffix in (".json", ".md", ".jsonl"):
                        tar.add(item, arcname=f"tune-report/{item.name}")


if __name__ == "__main__":
    main()
