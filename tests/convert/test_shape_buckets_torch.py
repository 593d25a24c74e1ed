"""The torch engine serves a dynamic sequence axis: one ``torch.export`` program whose sequence axis
stays dynamic up to the last bucket, served by the torch runner (here on the CPU; on a GPU each
(batch bucket, shape bucket) is a captured CUDA graph) through the real tritonserver: mixed lengths
batched in one execute, each padded to its bucket, token-level outputs cut back."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from numpy.typing import NDArray
from tests.convert.test_shape_buckets_build import tokens
from tritonclient import http

from tritonkit.backends.runners.shape_buckets import Buckets
from tritonkit.config import DynamicBatching, ModelConfig, TensorConfig, load, save
from tritonkit.convert.spec.execution import ServingSpec, plan_execution
from tritonkit.convert.targets.buckets import apply_buckets
from tritonkit.convert.targets.torch_program import write_torch_version
from tritonkit.serve import EmbeddedServer, ServerOptions

BUCKETS = Buckets(
    axes={"seq": (8, 16, 32)},
    inputs={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}},
    outputs={"hidden": {1: "seq"}},
)


def _call(url: str, ids: NDArray[Any]) -> dict[str, NDArray[Any]]:
    feeds = []
    for name, value in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
        tensor = http.InferInput(name, list(value.shape), "INT64")
        tensor.set_data_from_numpy(value)
        feeds.append(tensor)
    with http.InferenceServerClient(url) as client:
        result = client.infer("tok", feeds)
        return {"hidden": result.as_numpy("hidden"), "pooled": result.as_numpy("pooled")}


@pytest.mark.slow
def test_torch_runner_pads_batches_and_cuts_mixed_lengths(tmp_path: Path) -> None:
    source = tokens()
    examples = dict(zip(source.input_names, source.example_inputs, strict=True))
    plan = plan_execution(ServingSpec(engine="torch"), max_batch_size=16, gpus=[])
    version = write_torch_version(
        tmp_path / "repo",
        "tok",
        source.module,
        examples,
        list(source.output_names),
        plan,
        max_batch_size=16,
        buckets=BUCKETS,
        max_queue_delay_us=200000,
    )
    config = load(tmp_path / "repo" / "tok" / "config.pbtxt")
    assert [list(t.dims) for t in config.inputs] == [[-1], [-1]]
    assert [list(t.dims) for t in config.outputs] == [[-1, 8], [8]]
    assert json.loads(config.parameters["shape_buckets"])["pad_at"] == "server"
    assert (version / "shape_buckets.py").is_file()
    # The GPU config's preferred sizes (every batch bucket, 1 included) send a lone request at once;
    # here the batcher waits for all of them, so one execute meets every length.
    assert config.dynamic_batching is not None
    config.dynamic_batching.preferred_batch_size = []
    save(config, tmp_path / "repo" / "tok" / "config.pbtxt")

    rng = np.random.default_rng(3)
    lengths = [2, 31, 9, 16, 17, 5, 32, 11]
    sent = [rng.integers(1, 100, (1 + i % 2, n)).astype(np.int64) for i, n in enumerate(lengths)]
    with EmbeddedServer(tmp_path / "repo", ServerOptions(exit_timeout=1)) as server:
        url = server.http_url
        _call(url, sent[0])
        with http.InferenceServerClient(url) as client:
            before = client.get_inference_statistics("tok")["model_stats"][0]
        got: dict[int, dict[str, NDArray[Any]]] = {}
        threads = [
            threading.Thread(target=lambda i=i: got.__setitem__(i, _call(url, sent[i])))
            for i in range(len(sent))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with http.InferenceServerClient(url) as client:
            after = client.get_inference_statistics("tok")["model_stats"][0]
    executions = after["execution_count"] - before["execution_count"]
    assert after["inference_count"] - before["inference_count"] == sum(len(s) for s in sent)
    assert executions < len(sent) / 2, f"{executions} executes for {len(sent)} mixed-length requests"
    for i, ids in enumerate(sent):
        with torch.no_grad():
            hidden, pooled = source.module(torch.from_numpy(ids), torch.ones_like(torch.from_numpy(ids)))
        assert got[i]["hidden"].shape == (len(ids), lengths[i], 8)
        np.testing.assert_allclose(got[i]["hidden"], hidden.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[i]["pooled"], pooled.numpy(), rtol=1e-4, atol=1e-5)


def test_a_gpu_torch_version_gathers_four_graph_batches_per_execute() -> None:
    config = ModelConfig(
        name="m",
        backend="python",
        max_batch_size=64,
        inputs=[TensorConfig("input_ids", "INT64", [-1]), TensorConfig("attention_mask", "INT64", [-1])],
        outputs=[TensorConfig("hidden", "FP32", [-1, 8]), TensorConfig("pooled", "FP32", [8])],
        dynamic_batching=DynamicBatching(preferred_batch_size=[1, 2, 4, 8, 16, 32, 64]),
        parameters={"engine": "torch", "device": "cuda"},
    )
    files = apply_buckets(config, BUCKETS)
    assert set(files) == {"shape_buckets.py"}
    assert config.max_batch_size == 256 and config.parameters["graph_max_batch"] == "64"
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.preferred_batch_size == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert all(t.allow_ragged_batch for t in config.inputs)
    cpu = ModelConfig(
        name="c",
        backend="python",
        max_batch_size=64,
        inputs=[TensorConfig("input_ids", "INT64", [-1])],
        parameters={"engine": "torch", "device": "cpu"},
    )
    apply_buckets(cpu, BUCKETS)
    assert cpu.max_batch_size == 64 and "graph_max_batch" not in cpu.parameters
