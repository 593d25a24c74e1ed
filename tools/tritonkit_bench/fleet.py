"""The fleet plan's worked example, end to end: models built, tuned, planned, checked by a separate load test.

``python -m tritonkit_bench.fleet --out reports/fleet-demo`` (CPU: the demo's ``minilm_int8`` and
``resnet50_int8``, built by ``python -m tritonkit.demo --build-only`` into ``model_repository``, and a
seeded 3-layer MLP built here into ``OUT/repo``: a fleet's models may come from several repositories) or ``--gpu`` (the GPU benchmark's MiniLM and ResNet-50 architectures, FP16 torch programs on
KIND_GPU instances, built here; what ``scripts/gpu/fleet.sh`` runs on a GPU host). Each model is tuned
with a small grid into ``OUT/tune/<model>``, the fleet file is written to ``OUT/fleet.yaml`` (targets and
budgets below; prices only when given with ``--price TYPE=USD``: none is assumed), and
``tritonkit plan --fleet`` runs with ``--verify`` into ``OUT/plan``. ``--finish OUT/plan`` checks the
overlays and draws the pictures of a plan made on a host without kubectl or matplotlib (the GPU host).
``docs/fleet.md`` quotes a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tritonkit.fleet.devices import local_type
from tritonkit.fleet.openloop import MeasureSettings
from tritonkit.fleet.planner import PlanOptions
from tritonkit.fleet.run import FleetRunOptions, finish, run_fleet
from tritonkit.measure.levels import MeasureOptions
from tritonkit.measure.loadgen import WindowSpec
from tritonkit.measure.payloads import parse_batch_mix
from tritonkit.measure.stats import StabilityRule
from tritonkit.tune.tuner import TuneOptions, tune

__all__ = ["CPU_MODELS", "GPU_MODELS", "Target", "build_gpu_models", "build_mlp", "main"]


@dataclasses.dataclass(frozen=True)
class Target:
    rate: float
    p99_ms: float
    batch_mix: str = "1"
    #: the tune's grid
    max_batch_sizes: tuple[int, ...] = (8, 64)
    delays_us: tuple[int | str, ...] = ("off", 2000)
    instances: tuple[int, ...] = (1, 2)


#: CPU example: three models of very different cost per request
CPU_MODELS: dict[str, Target] = {
    "minilm_int8": Target(rate=4.0, p99_ms=800.0, batch_mix="1:0.9,4:0.1"),
    "resnet50_int8": Target(rate=2.0, p99_ms=1000.0),
    "mlp": Target(rate=100.0, p99_ms=50.0, delays_us=("off", 500)),
}
#: GPU example: two torch FP16 programs on KIND_GPU instances
GPU_MODELS: dict[str, Target] = {
    "minilm_fp16": Target(rate=800.0, p99_ms=25.0, max_batch_sizes=(16, 64), delays_us=("off", 500)),
    "resnet50_fp16": Target(rate=300.0, p99_ms=50.0, max_batch_sizes=(16, 32), delays_us=("off", 500)),
}


def build_mlp(repo: Path, name: str = "mlp") -> None:
    """A seeded MLP (256 -> 1024 -> 1024 -> 10, ReLU) served by the portable runner: cheap per request."""
    if (repo / name / "config.pbtxt").exists():
        return
    import onnx  # noqa: PLC0415 (only the example builds models)
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    from tritonkit.convert.onnx_import import import_onnx  # noqa: PLC0415

    rng = np.random.default_rng(0)
    dims = [256, 1024, 1024, 10]
    nodes, inits, previous = [], [], "X"
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        inits += [
            numpy_helper.from_array((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), f"W{i}"),
            numpy_helper.from_array(np.zeros(b, np.float32), f"B{i}"),
        ]
        last = i == len(dims) - 2
        out = "Y" if last else f"G{i}"
        nodes.append(helper.make_node("Gemm", [previous, f"W{i}", f"B{i}"], [out]))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"H{i}"]))
            previous = f"H{i}"
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 256])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 10])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = repo.parent / f"{name}.onnx"
    onnx.save(model, path)
    import_onnx(path, repo, name)


def build_gpu_models(repo: Path, gpus: list[int] | None = None) -> None:
    """MiniLM and ResNet-50 architectures (seeded) as FP16 torch programs on the GPU, batch buckets left
    to the runner (powers of two up to the config's max batch), as the GPU tune bench builds them.
    ``gpus`` (None: ask nvidia-smi) lets a CPU machine build the same versions."""
    from tritonkit.convert.graph.flagship.resnet import OUTPUT as LOGITS  # noqa: PLC0415
    from tritonkit.convert.graph.flagship.resnet import build_resnet50  # noqa: PLC0415
    from tritonkit.convert.spec.execution import ServingSpec, plan_execution  # noqa: PLC0415
    from tritonkit.convert.targets.torch_program import write_torch_version  # noqa: PLC0415
    from tritonkit_bench.gpu_models import image_examples, minilm, text_examples  # noqa: PLC0415

    for name, module, feeds, output, top in (
        ("minilm_fp16", minilm(), text_examples(2), "EMBEDDING", 64),
        ("resnet50_fp16", build_resnet50(), image_examples(2), LOGITS, 32),
    ):
        if (repo / name / "config.pbtxt").exists():
            continue
        plan = plan_execution(  # the python runner, as the fleet figures were measured
            ServingSpec(engine="torch", precision="fp16", runner="python"), max_batch_size=top, gpus=gpus
        )
        plan = dataclasses.replace(plan, batch_buckets=())
        write_torch_version(
            repo, name, module, feeds, [output], plan, max_batch_size=top, max_queue_delay_us=500
        )
        print(f"built {name}", flush=True)


def tune_model(repo: Path, name: str, target: Target, report: Path, *, window_s: float, gpu: bool) -> None:
    if (report / "tune.json").exists():
        print(f"{name}: tune.json already in {report}", flush=True)
        return
    mix = parse_batch_mix(target.batch_mix)
    batch = max(mix.items(), key=lambda kv: (kv[1], -kv[0]))[0]  # the batch most requests carry
    tune(
        TuneOptions(
            name, target.p99_ms, report, repo=repo, write="none", plots=False, batch_size=batch,
            resume=(report / "trials.jsonl").exists(),
            max_batch_sizes=list(target.max_batch_sizes), delays_us=list(target.delays_us),
            instances=list(target.instances), preferred=False, queue=False, gpu=gpu, require_stable=False,
            measure=MeasureOptions(window=WindowSpec(window_s), stability=StabilityRule(3, 0.15), max_windows=4),
            stream=sys.stdout,
        )
    )  # fmt: skip


def fleet_file(
    repos: dict[str, Path], out: Path, models: dict[str, Target], gpu_type: str, prices: dict[str, float]
) -> Path:
    data: dict[str, Any] = {
        "headroom": 0.3,
        "min_replicas": 2,
        "gpus": [{"type": gpu_type, **({"price_per_hour": prices[gpu_type]} if gpu_type in prices else {})}],
        "models": [
            {
                "name": name, "repository": str(repos[name].resolve()), "rate": t.rate, "p99_ms": t.p99_ms,
                "batch_mix": t.batch_mix, "tune": {gpu_type: str((out / "tune" / name).resolve())},
            }
            for name, t in models.items()
        ],
    }  # fmt: skip
    path = out / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _prices(values: list[str]) -> dict[str, float]:
    out = {}
    for value in values:
        kind, _, price = value.partition("=")
        out[kind] = float(price)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tritonkit_bench.fleet", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--out", type=Path, default=Path("reports/fleet-demo"))
    parser.add_argument(
        "--repo",
        type=Path,
        default=Path("model_repository"),
        help="the demo's models (CPU example; default model_repository)",
    )
    parser.add_argument(
        "--gpu", action="store_true", help="the GPU example (two torch FP16 models on KIND_GPU)"
    )
    parser.add_argument(
        "--price", action="append", default=[], metavar="TYPE=USD", help="your price per GPU-hour"
    )
    parser.add_argument("--verify-seconds", type=float, default=60.0)
    parser.add_argument("--window-s", type=float, default=1.0, help="the tunes' window (default 1 s)")
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument(
        "--only-tune", action="store_true", help="build and tune the models, then stop (a later run plans)"
    )
    parser.add_argument(
        "--finish", type=Path, metavar="PLAN_DIR",
        help="only check the overlays and draw the pictures of a plan written on a host without kubectl or matplotlib",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.finish is not None:
        data = finish(args.finish)
        bad = [p for o in data["overlays"] for p in o["problems"]]
        print(f"{args.finish}: overlays {'ok' if not bad else f'{len(bad)} problems'}; pictures drawn")
        return 1 if bad else 0
    args.out.mkdir(parents=True, exist_ok=True)
    models = GPU_MODELS if args.gpu else CPU_MODELS
    own = args.out / "repo"  # what this example builds: the MLP (CPU), both models (GPU)
    own.mkdir(parents=True, exist_ok=True)
    if args.gpu:
        build_gpu_models(own)
    else:
        build_mlp(own)
    repos = {name: own if args.gpu or name == "mlp" else args.repo for name in models}
    for name, target in models.items():
        tune_model(repos[name], name, target, args.out / "tune" / name, window_s=args.window_s, gpu=args.gpu)
    if args.only_tune:
        print(f"tuned: {', '.join(models)} in {args.out / 'tune'}")
        return 0
    gpu_type = local_type()
    fleet = fleet_file(repos, args.out, models, gpu_type, _prices(args.price))
    settings = MeasureSettings(max_seconds=args.max_seconds)
    data, code = run_fleet(
        FleetRunOptions(fleet, args.out / "plan", PlanOptions(settings=settings, stream=sys.stdout), verify=True,
                        verify_seconds=args.verify_seconds, force=True)
    )  # fmt: skip
    cheapest = data["cheapest"]
    print(
        f"cheapest fleet: {cheapest['gpus']} GPUs; one model per pod: {data['one_model_per_pod'][gpu_type]['gpus']} GPUs"
    )
    print(f"wrote {args.out / 'plan'}/fleet-plan.md (exit {code})")
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
