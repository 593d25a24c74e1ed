"""One request in flight: the generator's blocking path against its asyncio path and raw tritonclient.

Builds (once, under --work) a native-backend version taking one FP32 image [3, 224, 224] (602 KB a row),
serves it with the embedded tritonserver, and measures in interleaved rounds the p50 of a lone request
through HTTP and gRPC: raw ``tritonclient`` (InferInput built once), the load generator of profile/tune/plan
at concurrency 1 as it runs now (blocking calls, ``Target.blocking_single``), and the same level through
its asyncio loop. Writes a markdown table with the machine named.

    .venv/bin/python scripts/tune/lone_request.py [--rounds 4] [--out docs/benchmarks-lone-request.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools")]

import numpy as np  # noqa: E402

from tritonkit.machine import description  # noqa: E402
from tritonkit.measure.levels import MeasureOptions, Measurer  # noqa: E402
from tritonkit.measure.loadgen import Level, Target, WindowSpec  # noqa: E402
from tritonkit.measure.stats import StabilityRule  # noqa: E402
from tritonkit.serve.embedded import EmbeddedServer  # noqa: E402

SHAPE = (1, 3, 224, 224)
CLIENTS = ("raw tritonclient", "generator, blocking (as run)", "generator, asyncio loop")


def build(repo: Path) -> None:
    import torch  # noqa: PLC0415 (heavy)

    from tritonkit.convert.spec.execution import ServingSpec, plan_execution  # noqa: PLC0415
    from tritonkit.convert.targets.torch_program import write_torch_version  # noqa: PLC0415

    class Head(torch.nn.Module):
        def forward(self, image: torch.Tensor) -> torch.Tensor:
            return image.flatten(1)[:, :1000] * 2

    plan = plan_execution(ServingSpec(engine="torch", runner="native"), max_batch_size=8, gpus=[])
    write_torch_version(repo, "img", Head().eval(), {"image": torch.randn(2, *SHAPE[1:])}, ["logits"], plan,
                        max_batch_size=8)  # fmt: skip


def raw(protocol: str, url: str, seconds: float) -> float:
    import tritonclient.grpc as grpcclient  # noqa: PLC0415
    import tritonclient.http as httpclient  # noqa: PLC0415

    x = np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
    lib: Any = httpclient if protocol == "http" else grpcclient
    client = lib.InferenceServerClient(url)
    tensor = lib.InferInput("image", list(SHAPE), "FP32")
    if protocol == "http":
        tensor.set_data_from_numpy(x, binary_data=True)
    else:
        tensor.set_data_from_numpy(x)
    client.infer("img", [tensor])
    latencies, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        client.infer("img", [tensor])
        latencies.append(time.perf_counter() - t)
    client.close()
    return statistics.median(latencies) * 1e3


def generator(protocol: str, url: str, seconds: float, blocking: bool, headers: dict[str, str]) -> float:
    options = MeasureOptions(window=WindowSpec(seconds / 2), stability=StabilityRule(2, 1.0), max_windows=2)
    target = Target(url, "img", protocol, headers=headers, blocking_single=blocking)
    with Measurer(target, options) as measurer:
        return measurer.measure(Level("concurrency", 1)).p50_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--work", default="/tmp/tritonkit-lone-request")
    parser.add_argument("--out", default="docs/benchmarks-lone-request.md")
    args = parser.parse_args()
    repo = Path(args.work) / "repo"
    if not (repo / "img" / "config.pbtxt").exists():
        build(repo)
    figures: dict[tuple[str, str], list[float]] = {}
    with EmbeddedServer(repo) as server:
        urls = {"http": server.http_url, "grpc": server.grpc_url}
        for _ in range(args.rounds):
            for protocol in ("http", "grpc"):
                url = urls[protocol]
                for name in CLIENTS:
                    if name == CLIENTS[0]:
                        p50 = raw(protocol, url, args.seconds)
                    else:
                        blocking = name == CLIENTS[1]
                        p50 = generator(protocol, url, args.seconds, blocking, server.admin_headers)
                    figures.setdefault((protocol, name), []).append(p50)
    lines = [
        "# One request in flight: the load generator against raw tritonclient",
        "",
        f"Machine: {description()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"`scripts/tune/lone_request.py --rounds {args.rounds} --seconds {args.seconds:g}`: a native-backend",
        "version taking one FP32 image [3, 224, 224] (602 KB) on the CPU, the embedded tritonserver, one",
        f"request in flight for {args.seconds:g} s per figure, the three clients interleaved round after round.",
        "",
        "| protocol | client | p50 ms (median of rounds) | rounds |",
        "|---|---|---:|---|",
    ]
    for (protocol, name), values in figures.items():
        shown = ", ".join(f"{v:.3f}" for v in values)
        lines.append(
            f"| {protocol.upper() if protocol == 'http' else 'gRPC'} | {name} | {statistics.median(values):.3f} | {shown} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
