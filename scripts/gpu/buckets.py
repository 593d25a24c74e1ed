"""Variable-length traffic on a GPU, through the commands a user types: a BERT-base encoder ([CLS] out)
with a dynamic sequence axis, built by `tritonkit build` with `serving: {device: gpu}` and no bucket
edges (the defaults), served by `tritonkit serve`, measured on a short-text length mix by NVIDIA's
perf_analyzer and by `tritonkit profile` on the same input file; against it the same module in-process
(FP16, one CUDA graph per (batch 64, bucket), the served model's own edges, the same lengths), the same
model built with one bucket at 256 (every request padded to the mix's longest), and a 4-layer
token-level twin (its output carries the sequence axis) answered at each request's own length.

Usage (a GPU host, after `source scripts/gpu/setup.sh`, perf_analyzer's wheel in .whl/):
    python3 scripts/gpu/buckets.py [--parts build,engine,serve] [--seconds 3] [--runner native]
``--runner`` is every spec's ``serving.runner`` (default ``auto``: the native C++ backend where it compiles,
one traced method and CUDA graph per (batch, shape) bucket; ``python``: the python-backend torch runner);
``RESULTS["runner"]`` and each version's ``build.json`` record which served.
Writes $OUT/buckets.json (every figure) and $OUT/buckets.md, the servers' logs in $OUT/buckets-logs.tgz.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
WORK = Path(os.environ.get("WORK", "/tmp/tk-buckets"))
OUT = Path(os.environ.get("OUT", "/tmp/gpu-out"))
RESULTS: dict[str, Any] = {}
SPECS: list[str] = ["bert_dyn", "bert_pad", "bert_tok"]
RUNNER: list[str] = ["auto"]  # serving.runner of every spec (--runner)

MODULE = '''
import torch
from transformers import BertConfig, BertModel

from tritonkit.convert.graph.export import TorchSource


class Cls(torch.nn.Module):
    """BERT-base (random weights, seeded) returning the [CLS] vector."""

    def __init__(self, layers: int = 12) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bert = BertModel(BertConfig(num_hidden_layers=layers), add_pooling_layer=False)
        self.config = self.bert.config  # max_position_embeddings: the longest length

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]


class Tokens(Cls):
    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _source(module, out_axes):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (4, 64), generator=g)
    axes = {"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}, **out_axes}
    return TorchSource(module.eval(), (ids, torch.ones_like(ids)), ("input_ids", "attention_mask"), ("y",), axes)


def cls():
    return _source(Cls(12), {})


def tokens():
    return _source(Tokens(4), {"y": {1: "seq"}})
'''


def mix(count: int, seed: int = 0) -> list[int]:
    """Half 8-32 tokens, 30 % 33-96, 15 % 97-192, 5 % 193-256 (mean ~66, median ~38)."""
    rng = np.random.default_rng(seed)
    ranges = [(8, 32, 0.50), (33, 96, 0.30), (97, 192, 0.15), (193, 256, 0.05)]
    which = rng.choice(len(ranges), size=count, p=[r[2] for r in ranges])
    return [int(rng.integers(ranges[w][0], ranges[w][1] + 1)) for w in which]


def input_file(path: Path, lengths: list[int], seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    data = []
    for n in lengths:
        ids = rng.integers(1000, 30000, n).tolist()
        data.append(
            {
                "input_ids": {"content": ids, "shape": [n]},
                "attention_mask": {"content": [1] * n, "shape": [n]},
            }
        )
    path.write_text(json.dumps({"data": data}))
    return path


def run(cmd: list[str], log: Path, timeout: float, env: dict[str, str] | None = None) -> int:
    started = time.time()
    with log.open("w") as out:
        code = subprocess.run(
            cmd, check=False, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, env=env
        ).returncode
    print(f"[{time.time() - started:6.1f} s] rc {code}: {' '.join(cmd)[:160]}", flush=True)
    if code:
        print(log.read_text()[-3000:], flush=True)
    return code


def build() -> None:
    (WORK / "bert_dynamic.py").write_text(MODULE)
    rng = np.random.default_rng(2)
    ids = rng.integers(1000, 30000, (48, 64)).astype(np.int64)
    mask = np.ones_like(ids)
    for row, n in enumerate(rng.integers(8, 64, 48)):
        mask[row, n:] = 0
    np.savez(WORK / "cal.npz", input_ids=ids[:16], attention_mask=mask[:16])
    np.savez(WORK / "eval.npz", input_ids=ids[16:], attention_mask=mask[16:])
    base = {
        "source": {"torch": "bert_dynamic:cls"},
        "precisions": ["fp16"],
        "calibration": {"data": "cal.npz", "samples": 16, "min_samples": 8, "batch_size": 8},
        "evaluation": {"data": "eval.npz", "samples": 32, "batch_size": 8},
        "accuracy": {"metric": "cosine"},
        "batching": {"max_batch_size": 64},
    }
    serving = {"device": "gpu", "runner": RUNNER[0]}
    specs = {
        "bert_dyn": {**base, "serving": serving},
        "bert_pad": {**base, "serving": {**serving, "shape_buckets": {"seq": [256]}}},
        "bert_tok": {**base, "source": {"torch": "bert_dynamic:tokens"}, "serving": serving},
    }
    import yaml  # noqa: PLC0415

    for name, spec in specs.items():
        if name not in SPECS:
            continue
        path = WORK / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"name": name, **spec}))
        code = run(
            [sys.executable, "-m", "tritonkit", "build", str(path), "--repo", str(WORK / "repo")],
            WORK / f"build-{name}.log",
            1200,  # the native program traces a method per (batch, shape) bucket: 66 for bert_dyn
        )
        RESULTS.setdefault("builds", {})[name] = code
    for name in SPECS:  # which runner each version got, and the native program's method count
        record = WORK / "repo" / f"{name}_fp16" / "1" / "build.json"
        if record.is_file():
            extra = json.loads(record.read_text())["extra"]
            RESULTS.setdefault("served_by", {})[name] = {
                "runner": extra.get("execution", {}).get("runner"),
                "runner_reason": extra.get("execution", {}).get("runner_reason", ""),
                "native_methods": extra.get("native_methods"),
            }
    if "bert_dyn" in SPECS and os.environ.get("BUCKETS_DIAGNOSE"):  # host split and a torch.profiler table
        from tritonkit.config import load, save  # noqa: PLC0415

        path = WORK / "repo" / "bert_dyn_fp16" / "config.pbtxt"
        config = load(path)
        config.parameters.update(
            {
                "stats_interval_s": "4",
                "profile_dir": str(WORK / "prof"),
                "profile_skip": "100",
                "profile_executes": "60",
            }
        )
        save(config, path)
    check = subprocess.run(
        [sys.executable, "-m", "tritonkit", "check", "--repo", str(WORK / "repo")],
        check=False,
        capture_output=True,
        text=True,
    )
    RESULTS["check"] = check.stdout.strip().splitlines()
    print(check.stdout, flush=True)


def engine(lengths: list[int]) -> None:
    """The module in-process at FP16: per bucket a CUDA graph at batch 64 and at 1, timed."""
    import torch  # noqa: PLC0415

    sys.path.insert(0, str(WORK))
    from bert_dynamic import Cls  # noqa: PLC0415

    from tritonkit.backends.runners.shape_buckets import Buckets, edge_for  # noqa: PLC0415
    from tritonkit.config import load  # noqa: PLC0415

    config = load(WORK / "repo" / "bert_dyn_fp16" / "config.pbtxt")
    buckets = Buckets.parse(config.parameters["shape_buckets"])
    assert buckets is not None
    edges = list(buckets.axes["seq"])
    times: dict[str, dict[int, float]] = {"64": {}, "1": {}, "program-64": {}, "program-1": {}}
    sys.path.insert(0, str(ROOT / "tools" / "tritonkit" / "backends" / "runners"))
    from torch_runner import load_program  # noqa: PLC0415

    program, _ = load_program(str(WORK / "repo" / "bert_dyn_fp16" / "1" / "model.pt2"), "cuda:0")
    for batch in (64, 1):  # the served program itself (torch.export), same graphs
        for edge in edges:
            times[f"program-{batch}"][edge] = _graph_ms(program, batch, edge)
    module = Cls(12).eval().half().cuda()
    for batch in (64, 1):
        for edge in edges + ([256] if 256 not in edges else []):
            times[str(batch)][edge] = _graph_ms(module, batch, edge)
    counts: dict[int, int] = {}
    for n in lengths:
        counts[edge_for(n, edges)] = counts.get(edge_for(n, edges), 0) + 1
    bucketed = len(lengths) / (sum(-(-c // 64) * times["64"][e] for e, c in counts.items()) / 1000)
    padded = 64 / (times["64"][256] / 1000)
    RESULTS["engine"] = {
        "edges": edges,
        "ms": times,
        "bucketed_seq_per_s": bucketed,
        "padded_256_seq_per_s": padded,
        "gpu": torch.cuda.get_device_name(0),
    }
    print(json.dumps(RESULTS["engine"], indent=1), flush=True)


def _graph_ms(module: Any, batch: int, edge: int) -> float:
    import torch  # noqa: PLC0415

    ids = torch.randint(1000, 30000, (batch, edge), device="cuda")
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        for _ in range(3):
            module(ids, mask)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            module(ids, mask)
    runs = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end))
    return statistics.median(runs)


def _pa_binary() -> str:
    target = Path("/tmp/pa/perf_analyzer")
    if not target.is_file():
        wheel = next((ROOT / ".whl").glob("perf_analyzer-*.whl"))
        target.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as whl:
            target.write_bytes(whl.read("perf_analyzer/bin/perf_analyzer"))
        target.chmod(0o755)
    return str(target)


def perf_analyzer(model: str, data: Path, level: int, tag: str, seconds: float) -> dict[str, Any]:
    csv = WORK / f"pa-{tag}.csv"
    cmd = [
        _pa_binary(), "-m", model, "-u", "127.0.0.1:8001", "-i", "grpc", "--input-data", str(data),
        "--concurrency-range", f"{level}:{level}", "-p", str(int(seconds * 1000)), "--stability-percentage", "10",
        "--max-trials", "8", "-f", str(csv), "--verbose-csv",
    ]  # fmt: skip
    code = run(cmd, WORK / f"pa-{tag}.log", 120)
    row: dict[str, Any] = {"rc": code}
    if code == 0 and csv.is_file():
        lines = csv.read_text().splitlines()
        head, values = lines[0].split(","), lines[1].split(",")
        row.update(dict(zip(head, values, strict=False)))
    RESULTS.setdefault("perf_analyzer", {})[tag] = row
    return row


def serve(lengths: list[int], seconds: float) -> None:
    mixed = input_file(WORK / "mix.json", lengths)
    lone = input_file(WORK / "lone40.json", [40] * 64)
    logs = WORK / "serve.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "serve", "--repo", str(WORK / "repo"), "--http-port", "8000", "--grpc-port", "8001",
         "--metrics-port", "8002", "--log-file", str(WORK / "tritonserver.log")],
        stdout=logs.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        # the native backend captures and times a graph per (batch, shape) bucket at load
        deadline = time.time() + 600
        while time.time() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8000/v2/health/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(1)
        RESULTS["ready_s"] = 600 - (deadline - time.time())
        print(f"ready after {RESULTS['ready_s']:.0f} s", flush=True)
        if "bert_tok" in SPECS:
            _token_answers()
        perf_analyzer("bert_dyn_fp16", mixed, 256, "dyn-mix-c256-first", seconds)
        perf_analyzer("bert_dyn_fp16", lone, 1, "dyn-lone40-c1", seconds)
        for level in (1, 64, 256, 512):
            perf_analyzer("bert_dyn_fp16", mixed, level, f"dyn-mix-c{level}", seconds)
        if "bert_pad" in SPECS:
            perf_analyzer("bert_pad_fp16", mixed, 256, "pad-mix-c256", seconds)
        for level in (1, 256):
            out = WORK / f"profile-c{level}.json"
            run(
                [sys.executable, "-m", "tritonkit", "profile", "--url", "127.0.0.1:8001", "--protocol", "grpc", "--model", "bert_dyn_fp16",
                 "--input-data", str(mixed), "--concurrency", str(level), "--json", str(out), "--no-cross-check"],
                WORK / f"profile-c{level}.log", 150,
            )  # fmt: skip
            if out.is_file():
                RESULTS.setdefault("profile", {})[f"c{level}"] = json.loads(out.read_text())
    finally:
        server.terminate()
        server.wait(timeout=60)


def _token_answers() -> None:
    """The token-level twin answers each length at that length, against eager FP32 (cosine per row)."""
    import torch  # noqa: PLC0415
    from tritonclient import grpc  # noqa: PLC0415

    sys.path.insert(0, str(WORK))
    from bert_dynamic import Tokens  # noqa: PLC0415

    module = Tokens(4).eval()
    client = grpc.InferenceServerClient("127.0.0.1:8001")
    rows = []
    for n in (5, 31, 33, 64, 100, 200, 256):
        ids = np.random.default_rng(n).integers(1000, 30000, (1, n)).astype(np.int64)
        feeds = []
        for name, value in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
            tensor = grpc.InferInput(name, list(value.shape), "INT64")
            tensor.set_data_from_numpy(value)
            feeds.append(tensor)
        got = client.infer("bert_tok_fp16", feeds).as_numpy("y")
        with torch.no_grad():
            want = module(torch.from_numpy(ids), torch.ones_like(torch.from_numpy(ids))).numpy()
        a, b = (
            got.reshape(-1, got.shape[-1]).astype(np.float64),
            want.reshape(-1, want.shape[-1]).astype(np.float64),
        )
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        rows.append({"length": n, "shape": list(got.shape), "cosine_min": float(cos.min())})
    RESULTS["token_level"] = rows
    print(json.dumps(rows), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="build,engine,serve")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--specs", default=",".join(SPECS), help="models built and measured")
    parser.add_argument(
        "--runner", choices=("auto", "python", "native"), default="auto", help="serving.runner of every spec"
    )
    args = parser.parse_args()
    SPECS[:] = args.specs.split(",")
    RUNNER[:] = [args.runner]
    RESULTS["runner"] = args.runner
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    lengths = mix(2000)
    RESULTS["mix"] = {
        "count": len(lengths),
        "mean": float(np.mean(lengths)),
        "median": float(np.median(lengths)),
    }
    parts = args.parts.split(",")
    try:
        if "build" in parts:
            build()
        if "engine" in parts:
            engine(lengths)
        if "serve" in parts:
            serve(lengths, args.seconds)
    finally:
        (OUT / "buckets.json").write_text(json.dumps(RESULTS, indent=1, default=str))
        with tarfile.open(OUT / "buckets-logs.tgz", "w:gz") as tar:
            for log in WORK.glob("*.log"):
                tar.add(log, arcname=log.name)
            for csv in WORK.glob("*.csv"):
                tar.add(csv, arcname=csv.name)
            for table in (WORK / "prof").glob("*.txt"):
                tar.add(table, arcname=f"prof-{table.name}")


if __name__ == "__main__":
    main()
