"""``make demo``: the main job on the embedded default, end to end.

Builds the flagship models from their committed specs (skipping those already built), checks the
repository, serves it with the embedded Triton and calls each model once over gRPC and HTTP, then
runs a short load-test ramp on ``minilm_int8`` and prints the capacity report. Every step goes
through the same public entry points a user has (the CLI and :class:`tritonkit.client.Client`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tritonkit import cli
from tritonkit.client import Client
from tritonkit.errors import TritonKitError
from tritonkit.repository.store import ModelRepository
from tritonkit.serve.embedded import EmbeddedServer

#: spec file → the models it builds
SPECS: dict[str, tuple[str, ...]] = {
    "minilm.yaml": ("minilm_fp32", "minilm_fp16", "minilm_int8"),
    "resnet50.yaml": ("resnet50_fp32", "resnet50_fp16", "resnet50_int8"),
}


def _step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def _built(repo: Path, models: Sequence[str]) -> bool:
    if not repo.is_dir():
        return False
    repository = ModelRepository(repo)
    return all((repo / name).is_dir() and repository.versions(name) for name in models)


def build(repo: Path, *, rebuild: bool) -> None:
    for spec, models in SPECS.items():
        if _built(repo, models) and not rebuild:
            print(f"{spec}: {', '.join(models)} already built (make demo ARGS=--rebuild to rebuild)")
            continue
        args = ["build", str(repo / spec), "--repo", str(repo)] + (["--force"] if rebuild else [])
        started = time.perf_counter()
        code = cli.main(args)
        if code != 0:
            raise SystemExit(code)
        print(f"{spec}: built in {time.perf_counter() - started:.0f} s")


def call_models(repo: Path) -> None:

    sentences = ["A T4 serves sentence embeddings.", "Sentence embeddings are served by a T4 GPU."]
    with EmbeddedServer(repo) as server:
        print(f"serving {repo} at http={server.http_url} grpc={server.grpc_url}")
        with Client(server.grpc_url, protocol="grpc") as grpc_client, Client(server.http_url) as http_client:
            reference = grpc_client.infer("minilm_fp32", {"TEXT": [[s] for s in sentences]})["EMBEDDING"]
            for name in ("minilm_fp16", "minilm_int8"):
                emb = http_client.infer(name, {"TEXT": [[s] for s in sentences]})["EMBEDDING"]
                cosine = np.sum(emb * reference, axis=1) / (
                    np.linalg.norm(emb, axis=1) * np.linalg.norm(reference, axis=1)
                )
                agreement = float(cosine.min())
                between = float(emb[0] @ emb[1])
                print(
                    f"{name}: EMBEDDING {emb.shape} {emb.dtype}; cosine to fp32 >= {agreement:.4f}; "
                    f"the two paraphrases score {between:.3f}"
                )
            image_input = grpc_client.metadata("resnet50_int8").inputs[0]
            shape = [2, *image_input.shape[1:]]  # metadata shapes lead with -1, the batch axis
            images = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            for name in ("resnet50_fp32", "resnet50_int8"):
                outputs = grpc_client.infer(name, {image_input.name: images})
                logits = next(iter(outputs.values()))
                print(f"{name} (synthetic weights): top-1 classes {np.argmax(logits, axis=1).tolist()}")


def load_test(repo: Path, report: Path, duration: str) -> int:
    """A short ramp on ``minilm_int8``; the load-test command prints ``summary.md`` itself."""
    return cli.main(
        [
            "loadtest",
            "--repo",
            str(repo),
            "--model",
            "minilm_int8",
            "--scenario",
            "ramp",
            "--users",
            "8",
            "--duration",
            duration,
            "--slo-p95-ms",
            "250",
            "--wrk",
            "--report",
            str(report),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tritonkit.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("model_repository"))
    parser.add_argument("--report", type=Path, default=Path("reports/demo"))
    parser.add_argument("--duration", default="40s", help="length of the load-test ramp")
    parser.add_argument("--rebuild", action="store_true", help="rebuild models that are already built")
    parser.add_argument("--build-only", action="store_true", help="only build the flagships (make bench)")
    args = parser.parse_args(argv)
    try:
        _step("1/4 build the flagship models (fp32, fp16, int8) from their specs")
        build(args.repo, rebuild=args.rebuild)
        if args.build_only:
            return 0
        _step("2/4 check the repository")
        if cli.main(["check", "--repo", str(args.repo)]) != 0:
            return 1
        _step("3/4 serve with the embedded Triton and call each model")
        call_models(args.repo)
        _step("4/4 load-test minilm_int8 (ramp) through the embedded server")
        return load_test(args.repo, args.report, args.duration)
    except TritonKitError as err:
        print(f"demo: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
