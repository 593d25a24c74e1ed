"""A model with a dynamic sequence axis, built, served and called as a user would: requests of
different lengths batched in one execute through the real tritonserver (ragged batching into the
runner, each request padded to its shape bucket), token-level answers cut back to each request's own
length, a request above the last bucket refused by the server in one line."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from numpy.typing import NDArray
from torch import nn
from tritonclient import http
from tritonclient.utils import InferenceServerException

from tritonkit import cli
from tritonkit.backends.runners.shape_buckets import Buckets
from tritonkit.config import load
from tritonkit.convert.graph.export import TorchSource
from tritonkit.serve import EmbeddedServer, ServerOptions

EDGES = [8, 16, 32]


class Tokens(nn.Module):
    """Token ids and mask -> per-token features (seq axis) and their masked mean: padding-invariant."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.proj = nn.Linear(16, 8)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mask = attention_mask.unsqueeze(-1).to(torch.float32)
        hidden = self.proj(self.embed(input_ids)) * mask
        return hidden, hidden.sum(1) / mask.sum(1).clamp(min=1.0)


def tokens() -> TorchSource:
    torch.manual_seed(0)
    ids = torch.randint(1, 100, (4, 12))
    return TorchSource(
        Tokens().eval(),
        (ids, torch.ones_like(ids)),
        ("input_ids", "attention_mask"),
        ("hidden", "pooled"),
        dynamic_axes={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}, "hidden": {1: "seq"}},
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("buckets")
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 100, (24, 12)).astype(np.int64)
    arrays = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    np.savez(root / "cal.npz", **{k: v[:16] for k, v in arrays.items()})
    np.savez(root / "eval.npz", **{k: v[16:] for k, v in arrays.items()})
    spec = {
        "name": "tokens",
        "source": {"torch": "tests.convert.test_shape_buckets_build:tokens"},
        "precisions": ["fp32"],
        "calibration": {"data": "cal.npz", "samples": 16, "min_samples": 8, "batch_size": 4},
        "evaluation": {"data": "eval.npz", "samples": 8, "batch_size": 4},
        "accuracy": {"metric": "cosine"},
        "batching": {"max_batch_size": 16, "max_queue_delay_us": 200000},
        "serving": {"device": "cpu", "shape_buckets": {"seq": EDGES}},
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    repo = root / "repo"
    assert cli.main(["build", str(root / "spec.yaml"), "--repo", str(repo)]) == 0
    return repo


def _infer(url: str, length: int, seed: int) -> dict[str, NDArray[Any]]:
    ids = np.random.default_rng(seed).integers(1, 100, (1, length)).astype(np.int64)
    client = http.InferenceServerClient(url)
    feeds = []
    for name, value in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
        tensor = http.InferInput(name, list(value.shape), "INT64")
        tensor.set_data_from_numpy(value)
        feeds.append(tensor)
    result = client.infer("tokens_fp32", feeds)
    return {"ids": ids, "hidden": result.as_numpy("hidden"), "pooled": result.as_numpy("pooled")}


@pytest.mark.slow
def test_build_writes_buckets_ragged_inputs_and_the_helper(built: Path) -> None:
    config = load(built / "tokens_fp32" / "config.pbtxt")
    buckets = Buckets.parse(config.parameters["shape_buckets"])
    assert buckets is not None and buckets.axes == {"seq": tuple(EDGES)} and buckets.pad_at == "server"
    assert buckets.outputs == {"hidden": {1: "seq"}}
    assert all(t.allow_ragged_batch for t in config.inputs)
    assert (built / "tokens_fp32" / "1" / "shape_buckets.py").is_file()
    manifest = json.loads((built / "tokens_fp32" / "1" / "build.json").read_text())
    assert manifest["extra"]["shape_buckets"]["axes"] == {"seq": EDGES}


@pytest.mark.slow
def test_check_names_the_buckets(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--repo", str(built)]) == 0
    assert (
        "tokens_fp32 version 1 shape buckets: seq [8, 16, 32] (longest 32), padded on the server"
        in capsys.readouterr().out
    )


@pytest.mark.slow
def test_mixed_lengths_batch_in_one_execute_and_come_back_at_their_own_length(built: Path) -> None:
    module = tokens().module
    lengths = [3, 9, 17, 32, 5, 12, 30, 8, 1, 20, 15, 26]
    with EmbeddedServer(built, ServerOptions(exit_timeout=1)) as server:
        url = server.http_url
        _infer(url, 4, 99)  # warm
        before = http.InferenceServerClient(url).get_inference_statistics("tokens_fp32")["model_stats"][0]
        answers: dict[int, dict[str, NDArray[Any]]] = {}
        threads = [
            threading.Thread(target=lambda n=n, i=i: answers.__setitem__(i, _infer(url, n, i)))
            for i, n in enumerate(lengths)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        after = http.InferenceServerClient(url).get_inference_statistics("tokens_fp32")["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == len(lengths)
    assert executions < len(lengths) / 2, f"{executions} executes for {inferences} mixed-length requests"
    for i, n in enumerate(lengths):
        got = answers[i]
        ids = torch.from_numpy(got["ids"])
        with torch.no_grad():
            hidden, pooled = module(ids, torch.ones_like(ids))
        assert got["hidden"].shape == (1, n, 8)
        np.testing.assert_allclose(got["hidden"], hidden.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got["pooled"], pooled.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_request_above_the_last_bucket_is_refused_in_one_line(built: Path) -> None:
    with EmbeddedServer(built, ServerOptions(exit_timeout=1)) as server:
        with pytest.raises(InferenceServerException) as caught:
            _infer(server.http_url, 33, 0)
        _infer(server.http_url, 32, 0)  # still serving
    message = str(caught.value)
    assert "is 33 long on axis seq; the model takes at most 32" in message and "\n" not in message


def test_an_output_axis_that_names_no_input_axis_gets_no_default_buckets_and_refuses_named_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnx import TensorProto, helper  # noqa: PLC0415
    from tests.support.onnx_zoo import make_model, save_model  # noqa: PLC0415

    # `ids` [batch, seq] -> `twice` [batch, seq2] (the ids twice over): no request's length cuts it back
    model = make_model(
        [helper.make_node("Concat", ["ids", "ids"], ["twice"], axis=1)],
        [("ids", TensorProto.INT64, ["batch", "seq"])],
        [("twice", TensorProto.INT64, ["batch", "seq2"])],
    )
    save_model(model, tmp_path / "twice.onnx")
    spec: dict[str, Any] = {
        "name": "twice",
        "source": {"onnx": "twice.onnx"},
        "precisions": ["fp32"],
        "serving": {"device": "cpu"},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert cli.main(["build", str(tmp_path / "spec.yaml"), "--repo", str(tmp_path / "repo")]) == 0
    config = load(tmp_path / "repo" / "twice_fp32" / "config.pbtxt")
    assert "shape_buckets" not in config.parameters and not any(t.allow_ragged_batch for t in config.inputs)
    capsys.readouterr()
    spec["serving"] = {"device": "cpu", "shape_buckets": {"seq": [8, 16]}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert cli.main(["build", str(tmp_path / "spec.yaml"), "--repo", str(tmp_path / "repo2")]) != 0
    err = capsys.readouterr().err.strip()
    assert "output `twice` axis 1 is dynamic and names no input axis" in err and "\n" not in err
    assert not (tmp_path / "repo2").exists()
