"""A `source.torch` module as users write them, beyond the zoo's single-tensor models: inputs taken by
keyword (keyword-only `forward`, transformers' GPT-2 whose second parameter is `past_key_values`),
dict / `ModelOutput` results read by output name, a module torch will not pickle (weight_norm:
Wav2Vec2), and the torch-program engine's half programs and fast files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
import yaml
from tests.support import torch_zoo_more
from torch import nn

from tritonkit import cli
from tritonkit.backends.runners import load_runner
from tritonkit.config import InstanceGroup
from tritonkit.convert.graph import torch_io
from tritonkit.convert.graph.export import TorchSource
from tritonkit.convert.spec.execution import ExecutionPlan, ServingSpec, plan_execution
from tritonkit.convert.targets.torch_program import write_torch_version
from tritonkit.errors import BuildError, ModelImportError


class KeywordOnly(nn.Module):
    """forward(*, x, scale) returning a dict: by keyword in, by name out."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 8)
        self.b = nn.Linear(16, 3)

    def forward(self, *, x: torch.Tensor, scale: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"probs": self.b(x).softmax(-1), "emb": self.a(x) * scale, "unused": x.sum(-1)}


def keyword_only() -> TorchSource:
    torch.manual_seed(0)
    return TorchSource(
        KeywordOnly().eval(), (torch.randn(2, 16), torch.ones(2, 1)), ("x", "scale"), ("emb", "probs")
    )


def misnamed() -> TorchSource:
    torch.manual_seed(0)
    return TorchSource(KeywordOnly().eval(), (torch.randn(2, 16), torch.ones(2, 1)), ("a", "b"), ("emb",))


def wav2vec2() -> TorchSource:
    return torch_zoo_more.source("wav2vec2")


def _build(
    tmp_path: Path, name: str, entry: str, precisions: list[str], arrays: dict[str, Any]
) -> tuple[int, Path]:
    np.savez(tmp_path / "cal.npz", **{k: v[:8] for k, v in arrays.items()})
    np.savez(tmp_path / "eval.npz", **{k: v[8:] for k, v in arrays.items()})
    spec = {
        "name": name,
        "source": {"torch": f"tests.convert.test_torch_sources:{entry}"},
        "precisions": precisions,
        "calibration": {"data": "cal.npz", "samples": 8, "min_samples": 8, "batch_size": 4},
        "evaluation": {"data": "eval.npz", "samples": 4, "batch_size": 4},
        "accuracy": {"metric": "cosine", "int8": {"mean": 0.95, "min": 0.8}},
        "batching": {"max_batch_size": 8},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    repo = tmp_path / "repo"
    return cli.main(["build", str(tmp_path / "spec.yaml"), "--repo", str(repo)]), repo


def test_keyword_only_inputs_and_dict_outputs_build_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    data = {
        "x": rng.standard_normal((12, 16)).astype(np.float32),
        "scale": rng.random((12, 1)).astype(np.float32),
    }
    code, repo = _build(tmp_path, "kw", "keyword_only", ["fp32", "fp16"], data)
    assert code == 0, capsys.readouterr().err
    session = ort.InferenceSession(str(repo / "kw_fp32" / "1" / "model.onnx"))
    assert [o.name for o in session.get_outputs()] == ["emb", "probs"]
    emb, probs = session.run(None, {"x": data["x"][:3], "scale": data["scale"][:3]})
    with torch.no_grad():
        want = keyword_only().module(
            x=torch.from_numpy(data["x"][:3]), scale=torch.from_numpy(data["scale"][:3])
        )
    np.testing.assert_allclose(emb, want["emb"].numpy(), atol=1e-5)
    np.testing.assert_allclose(probs, want["probs"].numpy(), atol=1e-5)


def test_names_that_miss_keyword_only_arguments_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, repo = _build(
        tmp_path,
        "kw",
        "misnamed",
        ["fp32"],
        {"a": np.zeros((12, 16), np.float32), "b": np.ones((12, 1), np.float32)},
    )
    err = capsys.readouterr().err.strip()
    assert code == 1 and not repo.exists()
    assert (
        "KeywordOnly.forward takes keyword-only argument(s) x, scale; expected input_names naming them, given a, b"
        in err
    )
    assert len(err.splitlines()) == 1


def test_inputs_go_by_keyword_where_positions_would_bind_them_wrong() -> None:
    class Decoder(nn.Module):  # transformers' GPT2LMHeadModel: past_key_values comes second
        def forward(self, input_ids: Any, past_key_values: Any = None, attention_mask: Any = None) -> Any:
            assert past_key_values is None
            return input_ids * attention_mask

    ids, mask = torch.ones(2, 3), torch.zeros(2, 3)
    assert torch_io.keyword_binding(Decoder(), ["input_ids", "attention_mask"])
    assert not torch_io.keyword_binding(Decoder(), ["input_ids", "past_key_values"])  # positions agree
    assert not torch_io.keyword_binding(Decoder(), ["ids", "mask"])  # names it does not take: positional
    adapted = torch_io.adapt(Decoder(), [ids, mask], ["input_ids", "attention_mask"], ["y"])
    assert torch.equal(adapted(ids, mask)[0], torch.zeros(2, 3))


def test_an_output_count_that_differs_from_the_names_is_one_line() -> None:
    class Two(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x + 1, x * 2

    with pytest.raises(
        ModelImportError,
        match=r"^the module returns 2 tensor\(s\); expected one per output name, given 1 \(y\)$",
    ):
        torch_io.adapt(Two(), [torch.zeros(2, 3)], ["x"], ["y"])
    plain = Two()
    assert torch_io.adapt(plain, [torch.zeros(2, 3)], ["x"], ["y", "z"]) is plain  # nothing to adapt


@pytest.mark.slow
def test_an_unpicklable_module_wav2vec2_builds_fp32_fp16_int8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Wav2Vec2's positional convolution is weight-normalised (a parametrization torch refuses to
    pickle): the worker calls the entry point itself. Float audio [batch, samples], frames out."""
    data = torch_zoo_more.arrays(wav2vec2(), 12, seed=1)
    code, repo = _build(tmp_path, "w2v", "wav2vec2", ["fp32", "fp16", "int8"], data)
    assert code == 0, capsys.readouterr().err
    for precision in ("fp16", "int8"):
        accuracy = json.loads((repo / f"w2v_{precision}" / "1" / "build.json").read_text())["accuracy"]
        assert accuracy["passed"] and accuracy["mean"] > 0.99 and not accuracy.get("warning")
    session = ort.InferenceSession(str(repo / "w2v_fp32" / "1" / "model.onnx"))
    short = data["input_values"][:2, :1200]  # another length: the samples axis stays dynamic
    with torch.no_grad():
        want = wav2vec2().module(torch.from_numpy(short)).last_hidden_state.numpy()
    np.testing.assert_allclose(session.run(None, {"input_values": short})[0], want, atol=1e-4)


def _fp16_plan() -> ExecutionPlan:
    return ExecutionPlan(
        "gpu", "torch", "fp16", (1, 2, 4, 8), False, (InstanceGroup("KIND_GPU", 1, [0]),), "test"
    )


def test_a_half_program_of_a_module_casting_to_float32_is_one_line(tmp_path: Path) -> None:
    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
            return self.linear(x * keep.to(torch.float32))  # type: ignore[no-any-return]

    examples = {"x": torch.randn(4, 4), "keep": torch.ones(4, 4, dtype=torch.bool)}
    with pytest.raises(
        BuildError,
        match=r"^the fp16 program does not run on its example inputs: .*Half.*serving\.engine: onnxruntime or at fp32\)$",
    ):
        write_torch_version(
            tmp_path / "repo", "masked", Masked(), examples, ["y"], _fp16_plan(), max_batch_size=8
        )
    assert not (tmp_path / "repo" / "masked").exists()


def test_an_lstm_program_whose_fast_file_cannot_load_serves_from_the_program(tmp_path: Path) -> None:
    """torch.load re-traces a saved fx module: nn.LSTM's zeros([layers, batch, hidden]) with a symbolic
    batch fails there, and the runner failed to load the model. The build drops that file now."""
    built = torch_zoo_more.source("lstm")
    examples = {"input_ids": torch.from_numpy(torch_zoo_more.arrays(built, 4, seed=1)["input_ids"])}
    plan = plan_execution(ServingSpec(engine="torch"), max_batch_size=8, gpus=[])
    version = write_torch_version(
        tmp_path / "repo", "lstm", built.module, examples, ["y"], plan, max_batch_size=8
    )
    assert not (version / "model.fx.pt").exists() and (version / "model.pt2").is_file()
    module, _ = load_runner("torch_runner").load_program(str(version / "model.pt2"), "cpu")
    ids = examples["input_ids"][:3]
    with torch.no_grad():
        torch.testing.assert_close(module(ids), built.module(ids))
