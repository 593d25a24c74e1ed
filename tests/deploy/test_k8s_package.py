"""``tritonkit k8s package``: a user's spec, torch module, data and ONNX file laid out for the build Job.

Before, the build Jobs ran ``tritonkit build model_repository/<spec>.yaml`` for the repository's own
specs only: a user's model had no route to the cluster. The package command writes
``<output>/inputs/<model>/{spec.yaml, modules/, data/, model.onnx}``, the layout the Jobs build from the
workspace volume (tests/deploy/test_build_jobs.py runs the Job script on such a folder). Paths that leave
the spec's folder, symlinks leading out and missing files are refused with one line, nothing written.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from tritonkit import deploy
from tritonkit.cli import main
from tritonkit.convert.spec.buildspec import load_spec
from tritonkit.errors import DeployError

#: A torch entry point with no dynamic axis past the batch (``k8s package`` calls it to learn its axes).
STATIC_MODULE = (
    "import torch\nfrom tritonkit.convert.graph.export import TorchSource\n\n\ndef build():\n"
    "    return TorchSource(torch.nn.Linear(4, 4), [torch.zeros(1, 4)], ['x'], ['y'])\n"
)


def _user(root: Path, source: str = "torch: mynet.model:build", data: str = "data/cal.npz") -> Path:
    (root / "mynet").mkdir(parents=True)
    (root / "mynet" / "__init__.py").write_text("")
    (root / "mynet" / "model.py").write_text(STATIC_MODULE)  # called by package's TensorRT checks
    (root / "mynet" / "__pycache__").mkdir()
    (root / "mynet" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"x")
    (root / "weights").mkdir()
    (root / "weights" / "w.bin").write_bytes(b"\0" * 8)
    (root / "data").mkdir()
    np.savez(root / "data" / "cal.npz", x=np.arange(64 * 4, dtype=np.float32).reshape(64, 4))
    np.savez(root / "ev.npz", x=-np.arange(8 * 4, dtype=np.float32).reshape(8, 4) - 1)
    spec = root / "mynet.yaml"
    spec.write_text(
        f"name: mynet\nsource:\n  {source}\nprecisions: [fp32, fp16]\n"
        f"calibration:\n  data: {data}\nevaluation:\n  data: ev.npz\n"
    )
    return spec


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_spec_with_torch_module_and_data_is_packed(tmp_path: Path) -> None:
    spec = _user(tmp_path / "user")
    out = tmp_path / "out"
    folder = deploy.package_spec(spec, out, include=["weights"])
    assert folder == out / deploy.INPUTS_DIR / "mynet"
    assert _files(folder) == [
        "data/data/cal.npz",
        "data/ev.npz",
        "modules/mynet/__init__.py",
        "modules/mynet/model.py",
        "modules/weights/w.bin",
        "spec.yaml",
    ]
    packed = yaml.safe_load((folder / "spec.yaml").read_text())
    assert (
        packed["calibration"]["data"] == "data/data/cal.npz" and packed["evaluation"]["data"] == "data/ev.npz"
    )
    assert packed["source"] == {"torch": "mynet.model:build"} and packed["precisions"] == ["fp32", "fp16"]
    loaded = load_spec(folder / "spec.yaml")  # what the Job reads, from where it reads it
    assert np.load(loaded.resolve(loaded.calibration.data))["x"].shape == (64, 4)
    assert os.listdir(out / deploy.INPUTS_DIR) == ["mynet"]  # no staging folder left


def _onnx(path: Path, *, external: bool = False) -> bytes:
    """A tiny real ONNX model (Y = X + W); with ``external`` W lives in ``<name>.weights`` beside it."""

    weight = numpy_helper.from_array(np.ones((1, 4), dtype=np.float32), name="W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if external:
        onnx.save_model(
            model, str(path), save_as_external_data=True, location=f"{path.stem}.weights", size_threshold=0
        )
    else:
        onnx.save_model(model, str(path))
    return path.read_bytes()


def test_spec_with_onnx_source_and_onnx_file_with_flags(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    onnx_bytes = _onnx(user / "m.onnx", external=True)
    (user / "m.yaml").write_text("name: m\nsource:\n  onnx: m.onnx\n")
    folder = deploy.package_spec(user / "m.yaml", tmp_path / "out")
    assert _files(folder) == ["m.weights", "model.onnx", "spec.yaml"]  # external data beside the graph
    assert yaml.safe_load((folder / "spec.yaml").read_text())["source"] == {"onnx": "model.onnx"}

    np.savez(user / "ev.npz", X=np.zeros((8, 4), dtype=np.float32))
    np.savez(user / "cal.npz", X=np.ones((32, 4), dtype=np.float32))
    folder = deploy.package_onnx(
        user / "m.onnx", tmp_path / "out", name="m2", precisions=["fp32", "int8"],
        calibration_data=user / "cal.npz", eval_data=user / "ev.npz",
    )  # fmt: skip
    assert _files(folder) == [
        "data/calibration.npz",
        "data/evaluation.npz",
        "m.weights",
        "model.onnx",
        "spec.yaml",
    ]
    spec = load_spec(folder / "spec.yaml")
    assert (
        spec.precisions == ["fp32", "int8"]
        and spec.resolve(spec.source.onnx or "").read_bytes() == onnx_bytes
    )


def _escape(root: Path) -> Path:
    return _user(root, data="../outside.txt")


def _absolute_elsewhere(root: Path) -> Path:
    (root.parent / "outside.txt").write_text("x")
    return _user(root, data=str(root.parent / "outside.txt"))


def _symlink_out(root: Path) -> Path:
    (root.parent / "outside.txt").write_text("x")
    spec = _user(root, data="link.txt")
    (root / "link.txt").symlink_to(root.parent / "outside.txt")
    return spec


def _symlink_in_module(root: Path) -> Path:
    (root.parent / "secret.py").write_text("x")
    spec = _user(root)
    (root / "mynet" / "leak.py").symlink_to(root.parent / "secret.py")
    return spec


def _missing_data(root: Path) -> Path:
    return _user(root, data="nope.txt")


def _missing_module(root: Path) -> Path:
    return _user(root, source="torch: othernet.model:build")


REFUSALS = [
    (_escape, "spec key `calibration.data`: `../outside.txt` is a path outside the spec's folder"),
    (_absolute_elsewhere, "is a path outside the spec's folder"),
    (_symlink_out, "spec key `calibration.data`: `link.txt` is a symlink leading outside the spec's folder"),
    (_symlink_in_module, "leak.py` is a symlink leading outside the spec's folder"),
    (_missing_data, "spec key `calibration.data`: `nope.txt` not found in"),
    (
        _missing_module,
        "spec key `source.torch`: module `othernet.model` not found; expected othernet/ or othernet.py",
    ),
]


@pytest.mark.parametrize(("make", "message"), REFUSALS, ids=[m.__name__.strip("_") for m, _ in REFUSALS])
def test_refusals_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, message: str
) -> None:
    spec = make(tmp_path / "user")  # type: ignore[operator]
    out = tmp_path / "out"
    assert main(["k8s", "package", str(spec), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (out / deploy.INPUTS_DIR).exists() or os.listdir(out / deploy.INPUTS_DIR) == []


def test_include_outside_and_existing_model_are_refused(tmp_path: Path) -> None:
    spec = _user(tmp_path / "user")
    with pytest.raises(
        DeployError, match=r"spec key `--include`: `\.\./x` is a path outside the spec's folder"
    ):
        deploy.package_spec(spec, tmp_path / "out", include=["../x"])
    deploy.package_spec(spec, tmp_path / "out")
    with pytest.raises(DeployError, match=r"already exists; expected a new model name, or --force"):
        deploy.package_spec(spec, tmp_path / "out")
    assert deploy.package_spec(spec, tmp_path / "out", force=True).is_dir()


def test_onnx_without_its_external_data_or_not_onnx_is_refused(tmp_path: Path) -> None:
    _onnx(tmp_path / "m.onnx", external=True)
    (tmp_path / "m.weights").unlink()
    with pytest.raises(DeployError, match=r"keeps weights in 'm.weights', which is not a file beside it"):
        deploy.package_onnx(tmp_path / "m.onnx", tmp_path / "out")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(DeployError, match=r"`bad.onnx` is not a valid ONNX model"):
        deploy.package_onnx(tmp_path / "bad.onnx", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_packs_and_names_the_next_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _onnx(tmp_path / "m.onnx")
    assert (
        main(["k8s", "package", "--onnx", str(tmp_path / "m.onnx"), "--output", str(tmp_path / "out")]) == 0
    )
    out = capsys.readouterr().out
    assert f"packed {tmp_path / 'out' / 'inputs' / 'm'} (2 files: model.onnx, spec.yaml)" in out
    assert "next: copy" in out
    assert (
        main(
            [
                "k8s",
                "package",
                "--onnx",
                str(tmp_path / "m.onnx"),
                "--precision",
                "fp16",
                "-o",
                str(tmp_path / "o2"),
            ]
        )
        == 1
    )
    assert "fp16/int8 builds of an ONNX file need held-out data" in capsys.readouterr().err
    assert main(["k8s", "package", "-o", str(tmp_path / "o3")]) == 1
    assert "expected a build spec or --onnx FILE, exactly one of them" in capsys.readouterr().err
