"""The native runner's shape buckets on a GPU, end to end through the commands a user types: a small
masked-attention encoder with a dynamic sequence axis (per-token and pooled outputs) built by
``tritonkit build`` with ``serving: {device: DEVICE, runner: native, shape_buckets: {seq: [8, 16, 32]}}``
(fp32 + fp16), served by the embedded tritonserver, 64 requests of lengths 1-32 sent at once over gRPC;
prints each version's executes against requests, the worst cosine of each answer against the module run
in FP32 at the request's own length, and the backend's load lines (methods, cost table, graph memory).

Usage: python3 scripts/gpu/native_buckets_smoke.py [--device gpu|cpu] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT)]

import tritonclient.grpc as grpcclient  # noqa: E402

from tritonkit import cli  # noqa: E402
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions  # noqa: E402

MODULE = '''
import torch
from tritonkit.convert.graph.export import TorchSource


class Tokens(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 32)
        self.pos = torch.nn.Embedding(32, 32)
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.embed(input_ids) + self.pos(positions)
        keep = attention_mask.to(torch.bool)
        scores = (h @ h.transpose(1, 2) / 8.0).masked_fill(~keep[:, None, :], -1e4)
        hidden = self.proj(torch.softmax(scores, dim=-1) @ h)
        weights = attention_mask.to(hidden.dtype)[:, :, None]
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
        return hidden, pooled


def make() -> TorchSource:
    torch.manual_seed(0)
    ids = torch.randint(1, 50, (2, 16))
    return TorchSource(
        Tokens().eval(), (ids, torch.ones_like(ids)), ("input_ids", "attention_mask"), ("hidden", "pooled"),
        dynamic_axes={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}, "hidden": {1: "seq"}},
    )
'''

SPEC = """
name: tokens
source: {{torch: "tokens:make"}}
precisions: [fp32, fp16]
serving: {{device: {device}, runner: native, shape_buckets: {{seq: [8, 16, 32]}}}}
batching: {{max_batch_size: 8, max_queue_delay_us: 2000}}
"""


def _cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    folder = Path(args.out or tempfile.mkdtemp(prefix="native-buckets-"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokens.py").write_text(MODULE)
    (folder / "spec.yaml").write_text(textwrap.dedent(SPEC.format(device=args.device)))
    repo = folder / "repo"
    code = cli.main(["build", str(folder / "spec.yaml"), "--repo", str(repo), "--force"])
    print(f"build exit {code}", flush=True)
    if code:
        return code
    sys.path.insert(0, str(folder))
    import tokens  # noqa: PLC0415 (the spec's module, written above)
    import torch  # noqa: PLC0415 (torch is heavy)

    module = tokens.make().module
    rng = np.random.default_rng(1)
    lengths = [int(n) for n in rng.integers(1, 33, size=64)]
    requests = [rng.integers(1, 50, (1, n)).astype(np.int64) for n in lengths]
    with EmbeddedServer(repo, ServerOptions(log_verbose=1)) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        for name in ("tokens_fp32", "tokens_fp16"):
            before = client.get_inference_statistics(name).model_stats[0].execution_count

            def one(ids: Any, name: str = name) -> tuple[Any, Any]:
                feeds = []
                for key, value in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
                    tensor = grpcclient.InferInput(key, list(value.shape), "INT64")
                    tensor.set_data_from_numpy(value)
                    feeds.append(tensor)
                result = client.infer(name, feeds)
                return result.as_numpy("hidden"), result.as_numpy("pooled")

            with ThreadPoolExecutor(16) as pool:
                answers = list(pool.map(one, requests))
            executes = client.get_inference_statistics(name).model_stats[0].execution_count - before
            worst = 1.0
            for ids, (hidden, pooled) in zip(requests, answers, strict=True):
                assert hidden.shape[1] == ids.shape[1], (hidden.shape, ids.shape)  # cut back to its length
                with torch.no_grad():
                    h, p = module(torch.from_numpy(ids), torch.ones_like(torch.from_numpy(ids)))
                worst = min(worst, _cosine(hidden, h.numpy()), _cosine(pooled, p.numpy()))
            print(f"{name}: {len(requests)} requests in {executes} executes, worst cosine {worst:.6f}", flush=True)
        log = Path(server.log_file).read_text(errors="replace") if server.log_file else ""
    for line in log.splitlines():
        if "tritonkit_torch" in line and ("method" in line or "graph" in line or "cost" in line):
            print(line[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main())
