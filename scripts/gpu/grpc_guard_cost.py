"""The gRPC guard's cost: perf_analyzer over gRPC through the guard vs Triton's own gRPC port, one server.

One ``EmbeddedServer`` (guards on) serves the models; perf_analyzer (``-i grpc``, ``--input-data zero``)
runs alternately against the guard's public port and Triton's private loopback port, ROUNDS rounds per
concurrency, interleaved; prints and writes ($OUT/grpc_guard_cost.md) the median throughput of each, the
ratio guard/direct, and the p50 latency of each at concurrency 1 (the lone request; acceptance: ratio
>= 0.9 at the peak, lone request within +0.1 ms).

Without --repo it builds two python-backend models in a temporary repository: ``add_one`` (FP32 [4], a
small request) and ``image_sum`` (FP32 [3, 224, 224]: 602 KB per request, a scalar answer). On the GPU
host give the BERT-base repository and model, e.g.::

  python scripts/gpu/grpc_guard_cost.py --repo /work/bert_repo --model bert_base --concurrency 1,8,32,64,128

``--quick`` (the two built models, concurrency 1,8,32, two rounds of 1 s windows) takes about two
minutes::

  python scripts/gpu/grpc_guard_cost.py --quick

perf_analyzer is ``$TRITONKIT_PERF_ANALYZER``, else ``.cache/perf_analyzer/bin/perf_analyzer`` (``make
perf-analyzer``), else ``perf_analyzer`` on PATH.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent
sys.path[:0] = [str(SRC / "tools"), str(SRC)]

from tritonkit.config import save  # noqa: E402
from tritonkit.config.model_config import InstanceGroup, ModelConfig, TensorConfig  # noqa: E402
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions  # noqa: E402

SUM = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = x.reshape(x.shape[0], -1)[:, :4] + 1
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y.astype(np.float32))]))
        return out
"""


def _model(repo: Path, name: str, dims: list[int]) -> None:
    config = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("X", "FP32", dims)],
        outputs=[TensorConfig("Y", "FP32", [4])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(SUM))
    save(config, repo / name / "config.pbtxt")


def _perf_analyzer() -> str:
    local = SRC / ".cache" / "perf_analyzer" / "bin" / "perf_analyzer"
    found = os.environ.get("TRITONKIT_PERF_ANALYZER") or (str(local) if local.exists() else None)
    found = found or shutil.which("perf_analyzer")
    if not found:
        raise SystemExit("perf_analyzer not found: run `make perf-analyzer` or set TRITONKIT_PERF_ANALYZER")
    return found


def _measure(pa: str, url: str, model: str, concurrency: int, seconds: float) -> tuple[float, float] | None:
    """(inferences/s, p50 latency in ms) of one perf_analyzer run; None where it failed twice.

    Stability is not asked of it (``--stability-percentage 999``): on a loaded host a level is rarely
    stable, and the rounds' median is what counts."""
    why = ""
    for _ in range(2):
        with tempfile.TemporaryDirectory() as folder:
            report = Path(folder) / "pa.csv"
            command = [
                pa, "-m", model, "-u", url, "-i", "grpc", "--input-data", "zero", "-b", "1",
                "--concurrency-range", str(concurrency), "--measurement-interval", str(int(seconds * 1000)),
                "--stability-percentage", "999", "--max-trials", "3", "-f", str(report),
            ]  # fmt: skip
            try:  # 3 windows and perf_analyzer's start: a run past 60 s is stuck (a loaded host)
                done = subprocess.run(
                    command, capture_output=True, text=True, check=False, timeout=60 + 10 * seconds
                )
            except subprocess.TimeoutExpired:
                why = [f"no answer within {60 + 10 * seconds:.0f} s"]
                continue
            if done.returncode == 0 and report.exists():
                row = next(csv.DictReader(report.open()))
                return float(row["Inferences/Second"]), float(row["p50 latency"]) / 1000.0
            why = (done.stdout + done.stderr).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            why = [f"exit {done.returncode}: {why[0]}"]
    print(f"perf_analyzer failed twice on {url} ({model}, c{concurrency}): {why[0][:200]}", file=sys.stderr)
    return None


def _row(model: str, level: int, runs: dict[str, list[tuple[float, float]]]) -> str:
    if not runs["direct"] or not runs["guard"]:
        return f"| {model} | {level} | failed | | | | | |"
    rate = {side: statistics.median(r for r, _ in got) for side, got in runs.items()}
    p50 = {side: statistics.median(p for _, p in got) for side, got in runs.items()}
    return (
        f"| {model} | {level} | {rate['direct']:.0f} | {rate['guard']:.0f} | "
        f"{rate['guard'] / rate['direct']:.2f} | {p50['direct']:.3f} | {p50['guard']:.3f} | "
        f"{p50['guard'] - p50['direct']:+.3f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", help="model repository (default: two tiny models in a temporary one)")
    parser.add_argument("--model", action="append", help="model(s) to measure (default: each built one)")
    parser.add_argument("--concurrency", default="1,4,16", help="comma-separated levels (default 1,4,16)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="perf_analyzer measurement window")
    parser.add_argument(
        "--quick", action="store_true", help="about two minutes: concurrency 1,8,32, 2 rounds of 1 s windows"
    )
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.rounds, args.seconds = "1,8,32", 2, 1.0
    began = time.monotonic()
    pa = _perf_analyzer()
    folder = Path(tempfile.mkdtemp(prefix="grpc-guard-cost-"))
    repo = Path(args.repo) if args.repo else folder / "repo"
    models = args.model or ["add_one", "image_sum"]
    if not args.repo:
        _model(repo, "add_one", [4])
        _model(repo, "image_sum", [3, 224, 224])
    lines = [
        "| model | concurrency | direct inf/s | guard inf/s | ratio | direct p50 ms | guard p50 ms | p50 +ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1, guard=True)) as server:
        assert server._triton_grpc_port is not None
        urls = {"direct": f"127.0.0.1:{server._triton_grpc_port}", "guard": server.grpc_url}
        for model in models:
            for level in (int(c) for c in args.concurrency.split(",")):
                runs: dict[str, list[tuple[float, float]]] = {"direct": [], "guard": []}
                for _ in range(args.rounds):
                    for side, url in urls.items():
                        got = _measure(pa, url, model, level, args.seconds)
                        if got is not None:
                            runs[side].append(got)
                line = _row(model, level, runs)
                if not server.is_running():
                    line += f" tritonserver stopped: {'; '.join(server.problems())[:200]}"
                lines.append(line)
                print(line, flush=True)
        refused = server.refused
    took = time.monotonic() - began
    text = "\n".join(lines) + (
        f"\n\nrefused by the guards: {refused} (expected 0); cores: {os.cpu_count()}; {took:.0f} s\n"
    )
    out = Path(os.environ.get("OUT", folder))
    out.mkdir(parents=True, exist_ok=True)
    (out / "grpc_guard_cost.md").write_text(text)
    print(text)
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
