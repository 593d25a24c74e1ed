"""A spec that names no data (``calibration.data``/``evaluation.data`` at their default ``auto``): text
models get the bundled text, one image input seeded images, every other model seeded random samples
shaped like its inputs (integer inputs inside the values of its example inputs), said in a warning and
in build.json; what the model cannot say (an ONNX integer input, int8 scales) is refused in one line
before any build work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from onnx import TensorProto, helper, save_model

from tritonkit import cli
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.inputs import seeded_data
from tritonkit.errors import SpecError

MODULE = """
import torch
from tritonkit.convert.graph.export import TorchSource


class Pool(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.embed(ids).mean(dim=1) + x


def make() -> TorchSource:
    torch.manual_seed(0)
    ids = torch.randint(3, 50, (2, 6))
    return TorchSource(Pool().eval(), (ids, torch.randn(2, 8)), ("ids", "x"), ("y",))
"""


def _write(folder: Path, spec: dict[str, object]) -> Path:
    (folder / "pool.py").write_text(MODULE)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _spec(**extra: object) -> dict[str, object]:
    return {"name": "pool", "source": {"torch": "pool:make"}, "precisions": ["fp32", "fp16"], **extra}


@pytest.mark.slow
def test_a_torch_spec_without_data_builds_fp16_on_random_samples_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    assert cli.main(["build", str(_write(tmp_path, _spec())), "--repo", str(repo)]) == 0
    said = capsys.readouterr()
    assert "evaluation.data: no data given; the gate runs on seeded random samples" in said.out + said.err
    record = json.loads((repo / "pool_fp16" / "1" / "build.json").read_text())
    data = record["extra"]["data"]
    assert data["evaluation"] == "random" and data["evaluation_samples"] == 500


def test_random_samples_keep_integer_inputs_inside_the_example_values() -> None:
    import torch  # noqa: PLC0415 (torch is heavy)

    ids = torch.tensor([[3, 9, 49], [7, 7, 12]])
    inputs = [TensorSpec("ids", "INT64", (-1, -1)), TensorSpec("x", "FP16", (-1, 4))]
    samples = seeded_data.random_samples(64, inputs, (ids, torch.zeros(2, 4)), seed=1, section="evaluation")
    assert samples["ids"].shape == (64, 3) and samples["ids"].dtype == np.int64  # the example's length
    assert samples["ids"].min() >= 3 and samples["ids"].max() <= 49 and len(np.unique(samples["ids"])) > 10
    assert samples["x"].dtype == np.float16 and samples["x"].std() > 0.5
    again = seeded_data.random_samples(64, inputs, (ids, torch.zeros(2, 4)), seed=1, section="evaluation")
    np.testing.assert_array_equal(samples["ids"], again["ids"])  # seeded


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [TensorSpec("ids", "INT64", (-1, 8))],
            "input `ids` is INT64 and the model does not say which values",
        ),
        ([TensorSpec("x", "FP32", (-1, -1))], "input `x` has a dynamic axis [-1, -1] and no example length"),
        ([TensorSpec("t", "BYTES", (-1, 1))], "input `t` is BYTES and the model does not say which values"),
    ],
)
def test_what_an_onnx_model_cannot_say_is_refused(inputs: list[TensorSpec], message: str) -> None:
    with pytest.raises(SpecError) as info:
        seeded_data.random_samples(4, inputs, None, seed=1, section="evaluation")
    assert message in str(info.value) and "give an .npz file" in str(info.value)


def test_auto_means_the_set_that_fits_the_model() -> None:
    image = [TensorSpec("x", "FP32", (-1, 3, 32, 32))]
    table = [TensorSpec("x", "FP32", (-1, 16))]
    assert seeded_data.resolve("auto", True, table) == "pydoc"
    assert seeded_data.resolve("auto", False, image) == "synthetic"
    assert seeded_data.resolve("auto", False, table) == "random"
    assert seeded_data.resolve("auto", False, None) == "auto"  # not known yet (k8s package)
    assert seeded_data.resolve("cal.npz", False, table, "calibration") == "cal.npz"
    assert seeded_data.resolve("random", False, table, "calibration") == "random"  # said outright
    with pytest.raises(SpecError, match="int8 calibration needs inputs like the model's real traffic"):
        seeded_data.resolve("auto", False, table, "calibration")


@pytest.mark.parametrize(
    ("dtype", "precisions", "message"),
    [
        (
            TensorProto.INT64,
            ["fp32", "fp16"],
            "spec key `evaluation.data`: input `ids` is INT64 and the model",
        ),
        (
            TensorProto.FLOAT,
            ["fp32", "int8"],
            "spec key `calibration.data`: int8 calibration needs inputs like",
        ),
    ],
)
def test_a_spec_without_data_is_refused_in_one_line_before_any_build_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: int, precisions: list[str], message: str
) -> None:
    ids = helper.make_tensor_value_info("ids", dtype, ["batch", 8])
    out = helper.make_tensor_value_info("y", dtype, ["batch", 8])
    graph = helper.make_graph([helper.make_node("Identity", ["ids"], ["y"])], "g", [ids], [out])
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    spec = {"name": "ids", "source": {"onnx": "m.onnx"}, "precisions": precisions}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    repo = tmp_path / "repo"
    assert cli.main(["build", str(tmp_path / "spec.yaml"), "--repo", str(repo)]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert not repo.exists() or not any(repo.iterdir())
