"""The preflight (tritonkit.convert.inputs.preflight): every shape, batch-axis and data problem of issue 21 is
one line naming the file (and the array), a non-zero exit, before any build work (no worker step
runs), in `tritonkit build` and in `tritonkit k8s package`. The model is the `onnx` package's own
light_resnet50 (opset 9, IR 3, batch fixed at 1). The data files it reads are handed on to the build:
none is read twice."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from tritonkit import cli
from tritonkit.convert import isolate
from tritonkit.convert.graph.source import prepare_source
from tritonkit.convert.inputs import preflight
from tritonkit.convert.inputs.datasets import prepare_data
from tritonkit.convert.spec.buildspec import parse_spec

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
INPUT = "gpu_0/data_0"


def _images(count: int, seed: int, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 3, 224, 224)).astype(dtype)


@pytest.fixture
def no_build_work(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fails the test if any native step (export, clean-up, precision, gate) is started."""
    started: list[str] = []

    def refuse(step: str, *args: Any, **kwargs: Any) -> Any:
        started.append(step)
        raise AssertionError(f"build work started before the preflight refused: {step}")

    monkeypatch.setattr(isolate, "run", refuse)
    yield started


@pytest.fixture
def data(tmp_path: Path) -> Callable[..., Path]:
    def save(name: str, **arrays: np.ndarray) -> Path:
        path = tmp_path / name
        np.savez(path, **{k.replace("__", "/"): v for k, v in arrays.items()})
        return path

    return save


def _spec(tmp_path: Path, cal: Path | str, ev: Path | str, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "resnet",
        "source": {"onnx": str(LIGHT)},
        "precisions": ["fp32", "fp16", "int8"],
        "calibration": {"data": str(cal), "samples": 8, "min_samples": 4},
        "evaluation": {"data": str(ev), "samples": 4},
        "batching": {"max_batch_size": 0},
    }
    spec.update(overrides)
    return spec


def _refused(tmp_path: Path, spec: dict[str, Any], capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    assert cli.main(["build", str(path), "--repo", str(tmp_path / "repo"), *flags]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "repo").exists()
    return err


def _arrays(**arrays: np.ndarray) -> dict[str, np.ndarray]:
    return {INPUT.replace("/", "__"): v for v in arrays.values()}


def test_batching_a_fixed_first_axis_is_refused_with_both_ways_out(
    tmp_path: Path, data: Callable[..., Path], capsys: pytest.CaptureFixture[str], no_build_work: list[str]
) -> None:
    cal, ev = data("cal.npz", **_arrays(x=_images(8, 1))), data("ev.npz", **_arrays(x=_images(4, 2)))
    err = _refused(tmp_path, _spec(tmp_path, cal, ev, batching={"max_batch_size": 64}), capsys)
    assert (
        "`light_resnet50.onnx` has a fixed first axis (input `gpu_0/data_0` [1, 3, 224, 224]); "
        "`batching.max_batch_size` 64 needs a dynamic one: set `source.dynamic_batch: true` (--dynamic-batch) "
        "to rewrite it, or set `batching.max_batch_size: 0`"
    ) in err


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "float64_overflow",
            "cal.npz: array `gpu_0/data_0` is float64; the model's input is float32 and casting",
        ),
        (
            "same_file",
            "calibration and evaluation data are the same file cal.npz; evaluation samples must be held out",
        ),
        (
            "overlap",
            "1 evaluation samples of ev.npz are also calibration samples in cal.npz (evaluation sample 2 = calibration sample 5)",
        ),
        (
            "text_npz",
            "calibration data '{tmp}/cal.npz' is not an .npz archive (numpy.savez): it starts with b'0.1 0.2 0.3 '",
        ),
        (
            "text_npy",
            "evaluation data '{tmp}/ev.npy' is not a .npy array (numpy.save): it starts with b'0.1 0.2 0.3 '",
        ),
        (
            "missing",
            "evaluation data ev.npz lacks inputs ['gpu_0/data_0']; expected arrays ['gpu_0/data_0'], got ['data']",
        ),
        (
            "shape",
            "evaluation array `gpu_0/data_0` has shape [4, 3, 64, 64]; the model expects [1, 3, 224, 224]",
        ),
        ("nan", "calibration data cal.npz: array `gpu_0/data_0` has NaN or Inf values (sample 3 first)"),
        ("counts", "calibration data cal.npz lacks inputs"),
        (
            "pydoc",
            "spec key `evaluation.data`: `pydoc` is English text, for `preprocessing.kind: text` models",
        ),
        (
            "few",
            "too few calibration samples: expected at least 4, got 2 (in cal.npz; `calibration.min_samples`)",
        ),
    ],
)
def test_each_data_problem_is_one_line_before_any_build_work(
    tmp_path: Path,
    data: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
    no_build_work: list[str],
    case: str,
    message: str,
) -> None:
    cal = data("cal.npz", **_arrays(x=_images(8, 1)))
    ev = data("ev.npz", **_arrays(x=_images(4, 2)))
    if case == "float64_overflow":
        big = _images(8, 1, np.float64)
        big[0, 0, 0, 0] = 1e300
        cal = data("cal.npz", **_arrays(x=big))
    elif case == "same_file":
        ev = cal
    elif case == "overlap":
        images = _images(4, 2)
        images[2] = _images(8, 1)[5]
        ev = data("ev.npz", **_arrays(x=images))
    elif case == "text_npz":
        cal.write_text("0.1 0.2 0.3 0.4\n")
    elif case == "text_npy":
        ev = tmp_path / "ev.npy"
        ev.write_text("0.1 0.2 0.3 0.4\n")
    elif case == "missing":
        ev = data("ev.npz", data=_images(4, 2))
    elif case == "shape":
        ev = data("ev.npz", **_arrays(x=np.zeros((4, 3, 64, 64), np.float32)))
    elif case == "nan":
        images = _images(8, 1)
        images[3, 1, 2, 3] = np.nan
        cal = data("cal.npz", **_arrays(x=images))
    elif case == "counts":
        cal = data("cal.npz", other=_images(8, 1))
    elif case == "pydoc":
        ev = "pydoc"
    elif case == "few":
        cal = data("cal.npz", **_arrays(x=_images(2, 1)))
    err = _refused(tmp_path, _spec(tmp_path, cal, ev), capsys)
    assert message.format(tmp=tmp_path) in err, err
    assert no_build_work == []


def test_casts_unused_arrays_and_the_fixed_batch_are_warnings(
    tmp_path: Path, data: Callable[..., Path]
) -> None:
    """float64 that fits float32 is cast, arrays no input takes are named, and a model whose batch
    is fixed at 1 gets evaluation batches of 1 instead of the default 32."""
    cal = data("cal.npz", **_arrays(x=_images(8, 1, np.float64)), extra=np.zeros(8))
    ev = data("ev.npz", **_arrays(x=_images(4, 2)))
    spec = _spec(tmp_path, cal, ev)
    del spec["evaluation"]["samples"]
    checked = preflight.check_build(parse_spec(spec))
    assert checked.warnings == [
        "evaluation batches hold 1 samples, not `evaluation.batch_size` 32: `light_resnet50.onnx` has a fixed first axis of 1",
        "calibration data cal.npz: array `extra` is not an input of the model (inputs: ['gpu_0/data_0']); it is not used",
        "calibration data cal.npz: array `gpu_0/data_0` is float64; cast to float32, the model's type",
        "calibration batches hold 1 samples, not `calibration.batch_size` 16: `light_resnet50.onnx` has a fixed first axis of 1",
    ]


def _mixing_model(path: Path) -> Path:
    """Batch fixed at 1, and a ReduceSum over the first axis: rewriting the axis would mix samples."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [0])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_graph_that_cannot_take_a_dynamic_batch_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {"name": "mix", "source": {"onnx": str(_mixing_model(tmp_path / "mix.onnx"))}}
    err = _refused(tmp_path, spec, capsys, "--dynamic-batch")
    assert err.endswith(
        "`mix.onnx` cannot take a dynamic batch: output `y` on 2 samples differs from each sample run alone "
        "(the graph mixes samples or fixes the batch inside); build it without batching "
        "(`batching.max_batch_size: 0`) or re-export it with a dynamic first axis"
    ), err


def test_k8s_package_runs_the_same_checks(
    tmp_path: Path, data: Callable[..., Path], capsys: pytest.CaptureFixture[str], no_build_work: list[str]
) -> None:
    cal, ev = data("cal.npz", **_arrays(x=_images(32, 1))), data("ev.npz", **_arrays(x=_images(4, 2)))
    out = tmp_path / "out"
    args = ["k8s", "package", "--onnx", str(LIGHT), "--precision", "fp32,fp16,int8", "-o", str(out)]
    assert cli.main([*args, "--calibration-data", str(cal), "--eval-data", str(cal)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "are the same file cal.npz" in err, err
    assert not (out / "inputs" / "light_resnet50").exists()
    # A fixed-batch model packs as `tritonkit build --onnx` builds it: unbatched, or rewritten.
    assert cli.main([*args, "--calibration-data", str(cal), "--eval-data", str(ev), "--dynamic-batch"]) == 0
    packed = yaml.safe_load((out / "inputs" / "light_resnet50" / "spec.yaml").read_text())
    assert packed["batching"] == {"max_batch_size": None} and packed["source"]["dynamic_batch"] is True
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                **_spec(tmp_path, "cal.npz", "ev.npz"),
                "source": {"onnx": "m.onnx"},
                "batching": {"max_batch_size": 64},
            }
        )
    )
    (tmp_path / "m.onnx").write_bytes(LIGHT.read_bytes())
    assert cli.main(["k8s", "package", str(spec), "-o", str(tmp_path / "out2")]) == 1
    assert "`m.onnx` has a fixed first axis" in capsys.readouterr().err


_COUNT_OPENS = """
import json, os, sys
from tritonkit.convert.inputs import data
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.spec.buildspec import load_spec

spec_file, repo, *files = sys.argv[1:]
names = {os.path.realpath(f): f for f in files}
opens = dict.fromkeys(files, 0)


def count(event, args):
    if event == "open" and isinstance(args[0], (str, os.PathLike)):
        path = os.fspath(args[0])
        if path in opens:
            opens[path] += 1
        elif path in names:
            opens[names[path]] += 1


sys.addaudithook(count)
build_from_spec(load_spec(spec_file), repo)
build = dict(opens)
for f in files:
    data.read_arrays(f)
print(json.dumps({f: [build[f], opens[f] - build[f]] for f in files}))
"""


def test_a_build_reads_each_data_file_once(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    """The preflight hands the arrays it read on to the datasets step: a real build on the CPU (fp16
    and int8, calibrated and gated) opens each .npz as often as one read of it does. Opens are
    counted by an audit hook in a fresh interpreter (its own build worker, which reads no data)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(tiny_onnx, *tiny_data)), encoding="utf-8")
    files = [str(f) for f in tiny_data]
    run = subprocess.run(
        [sys.executable, "-c", _COUNT_OPENS, str(spec), str(tmp_path / "repo"), *files],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    opens = json.loads(run.stdout.strip().splitlines()[-1])
    for name in files:
        in_build, one_read = opens[name]
        assert one_read > 0 and in_build == one_read, (
            f"{name}: {in_build} opens in the build, {one_read} per read"
        )
    assert (tmp_path / "repo" / "tiny_int8" / "1" / "build.json").is_file()


def test_the_datasets_step_takes_the_preflights_fitted_arrays(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    """The sets made from what the preflight read are the sets a fresh read makes (same batches, same
    record), and hold the preflight's fitted arrays themselves: fitted once, not copied."""
    spec = parse_spec(tiny_spec(tiny_onnx, *tiny_data))
    checked = preflight.check_build(spec)
    source = prepare_source(spec, tmp_path, checked.torch)
    handed = prepare_data(spec, source, True, read=checked.arrays)
    fresh = prepare_data(spec, source, True)
    assert handed.details == fresh.details
    for section in ("calibration", "evaluation"):
        fitted = checked.arrays[section].fitted
        assert fitted is not None
        feeds, again = getattr(handed, section), getattr(fresh, section)
        assert len(feeds) == len(again) > 0
        for batch, other in zip(feeds, again, strict=True):
            assert np.array_equal(batch["x"], other["x"]) and np.shares_memory(batch["x"], fitted["x"])
            assert not np.shares_memory(other["x"], fitted["x"])
