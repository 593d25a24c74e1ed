"""What of ``serving`` applies on a GPU only (``engine``, ``runner``) is never ignored without a word: a spec
that asks for the CPU outright and names them is refused in one line when it is read; a version that lands
on the CPU because no GPU is visible says, in its build line, that they apply on a GPU only."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tritonkit import cli
from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.errors import SpecError

MODULE = """
import torch
from tritonkit.convert.graph.export import TorchSource


def make() -> TorchSource:
    torch.manual_seed(0)
    return TorchSource(torch.nn.Linear(4, 2).eval(), (torch.randn(2, 4),), ("x",), ("y",))
"""


@pytest.mark.parametrize(
    ("serving", "named"),
    [
        ({"device": "cpu", "runner": "native"}, "serving.runner native"),
        ({"device": "cpu", "engine": "torch"}, "serving.engine torch"),
        (
            {"device": "cpu", "engine": "onnxruntime", "runner": "python"},
            "serving.engine onnxruntime and serving.runner python",
        ),
    ],
)
def test_cpu_outright_with_gpu_settings_is_refused_in_one_line(serving: dict[str, str], named: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({"name": "m", "source": {"onnx": "m.onnx"}, "serving": serving})
    message = str(info.value)
    assert (
        message.startswith(f"{named} serve on a GPU; with serving.device cpu the portable runner")
        and "\n" not in message
    )


@pytest.mark.slow
def test_a_version_on_the_cpu_for_want_of_a_gpu_says_its_gpu_settings_wait_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible, on any machine
    (tmp_path / "lin.py").write_text(MODULE)
    spec = {
        "name": "lin",
        "source": {"torch": "lin:make"},
        "serving": {"engine": "torch", "runner": "native"},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert cli.main(["build", str(tmp_path / "spec.yaml"), "--repo", str(tmp_path / "repo")]) == 0
    out = capsys.readouterr().out
    assert (
        "lin_fp32 executes on cpu (no GPU visible here; serving.engine torch and serving.runner native apply on a GPU only)"
        in out
    )
