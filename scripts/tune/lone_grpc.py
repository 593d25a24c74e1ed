"""A lone gRPC request: tritonkit profile's concurrency 1 against perf_analyzer's, on the same server.

Builds (once, under --work) two ONNX versions (onnxruntime, CPU): ``small`` (X FP32 [4] -> X + 1, 16 B)
and ``image`` (one FP32 image [3, 224, 224], 602 KB, -> its 3 channel means), serves them with the
embedded tritonserver (gRPC direct, no guard), and measures one request in flight over gRPC, in
interleaved rounds: perf_analyzer (NVIDIA's C++ client, tritonkit's requests as its input data),
tritonkit's generator as profile runs it (:class:`~tritonkit.measure.lone_grpc.LoneGrpcTransport`, HTTP/2
on a socket) and the same generator on tritonclient's grpcio stub (``Target.lone_grpc_socket=False``,
what it ran before). Each figure is a level's p50 (windows of --seconds, 3 kept); the ratios are taken
within each round, then their median. Needs perf_analyzer (``make perf-analyzer``;
``TRITONKIT_PERF_ANALYZER`` names the binary).

    .venv/bin/python scripts/tune/lone_grpc.py [--rounds 3] [--seconds 1] [--out docs/benchmarks-lone-request.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools")]
os.environ.setdefault(
    "TRITONKIT_PERF_ANALYZER", str(ROOT / ".cache" / "perf_analyzer" / "bin" / "perf_analyzer")
)

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from tritonkit.convert.onnx_import import import_onnx  # noqa: E402
from tritonkit.machine import description  # noqa: E402
from tritonkit.measure.levels import MeasureOptions, Measurer  # noqa: E402
from tritonkit.measure.loadgen import Level, Target, WindowSpec  # noqa: E402
from tritonkit.measure.perf_analyzer import PerfAnalyzerMeasurer  # noqa: E402
from tritonkit.measure.stats import StabilityRule  # noqa: E402
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions  # noqa: E402

MODELS = {"small": "FP32 [4] (16 B)", "image": "FP32 [3, 224, 224] (602 KB)"}
CLIENTS = ("perf_analyzer", "tritonkit, socket (as run)", "tritonkit, grpcio stub (before)")


def build(repo: Path, work: Path) -> None:
    f32 = TensorProto.FLOAT
    graphs = {
        "small": helper.make_graph(
            [helper.make_node("Add", ["X", "one"], ["Y"])],
            "small",
            [helper.make_tensor_value_info("X", f32, ["batch", 4])],
            [helper.make_tensor_value_info("Y", f32, ["batch", 4])],
            [helper.make_tensor("one", f32, [], [1.0])],
        ),
        "image": helper.make_graph(
            [helper.make_node("ReduceMean", ["X"], ["Y"], axes=[2, 3], keepdims=0)],
            "image",
            [helper.make_tensor_value_info("X", f32, ["batch", 3, 224, 224])],
            [helper.make_tensor_value_info("Y", f32, ["batch", 3])],
        ),
    }
    work.mkdir(parents=True, exist_ok=True)
    for name, graph in graphs.items():
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.save(model, work / f"{name}.onnx")
        import_onnx(work / f"{name}.onnx", repo, name, max_batch_size=8)


def p50(client: str, target: Target, options: MeasureOptions) -> float:
    level = Level("concurrency", 1)
    if client == CLIENTS[0]:
        with PerfAnalyzerMeasurer(target, options, export=False) as pa:
            return pa.measure(level).p50_ms
    with Measurer(target, options) as measurer:
        return measurer.measure(level).p50_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--work", default="/tmp/tritonkit-lone-grpc")
    parser.add_argument("--out", default="docs/benchmarks-lone-request.md")
    args = parser.parse_args()
    work = Path(args.work)
    repo = work / "repo"
    if not all((repo / name / "config.pbtxt").exists() for name in MODELS):
        build(repo, work)
    options = MeasureOptions(
        window=WindowSpec(args.seconds), stability=StabilityRule(3, 0.5), max_windows=8, workers=1
    )
    figures: dict[tuple[str, str], list[float]] = {}
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        for _ in range(args.rounds):
            for model in MODELS:
                for client in CLIENTS:
                    target = Target(server.grpc_url, model, "grpc", headers=server.admin_headers,
                                    lone_grpc_socket=client != CLIENTS[2])  # fmt: skip
                    figures.setdefault((model, client), []).append(p50(client, target, options))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "",
        "## gRPC: tritonkit profile's concurrency 1 against perf_analyzer",
        "",
        f"Machine: {description()}; {stamp}.",
        f"`scripts/tune/lone_grpc.py --rounds {args.rounds} --seconds {args.seconds:g}`: ONNX versions on the",
        "CPU (onnxruntime), the embedded tritonserver, gRPC direct (no guard), one request in flight; each",
        f"figure a level's p50 over windows of {args.seconds:g} s (3 within ±50 %: a shared host), the clients interleaved",
        "round after round on the same server. Ratios: to perf_analyzer's p50 of the same round, their median.",
        "",
        "| request | client | p50 ms (median of rounds) | rounds | / perf_analyzer | - perf_analyzer ms |",
        "|---|---|---:|---|---:|---:|",
    ]
    for (model, client), values in figures.items():
        # a level that never held still has no p50 (0): its round is left out of the ratios
        pairs = [
            (v, base) for v, base in zip(values, figures[(model, CLIENTS[0])], strict=True) if v and base
        ]
        ratio = f"{statistics.median(v / base for v, base in pairs):.2f}" if pairs else "-"
        gap = f"{statistics.median(v - base for v, base in pairs):+.3f}" if pairs else "-"
        shown = ", ".join(f"{v:.3f}" if v else "unstable" for v in values)
        middle = statistics.median([v for v in values if v] or [0.0])
        lines.append(f"| {MODELS[model]} | {client} | {middle:.3f} | {shown} | {ratio} | {gap} |")
    out = Path(args.out)
    text = out.read_text(encoding="utf-8") if out.is_file() else ""
    head = text.split("\n## gRPC: tritonkit profile's concurrency 1")[0].rstrip("\n")
    out.write_text(head + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
