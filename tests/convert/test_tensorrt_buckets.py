"""The TensorRT target's profiles from shape buckets (issue 39, item 4): one optimization profile per
bucket in the lazy Polygraphy loader graph (inspected without TensorRT), the engine gate's batches on
profiles that cover them, the config's ``shape_buckets`` with ``pad_at: client``, and the checks that
``tritonkit k8s package`` runs before it packs (a dynamic axis with no longest length is one line)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from tritonkit.backends.runners.shape_buckets import PARAMETER, Buckets
from tritonkit.cli import main
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.graph.source import Source
from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.convert.spec.gpu_profiles import PROFILES
from tritonkit.convert.targets.buckets import apply_buckets
from tritonkit.convert.targets.engine_io import EngineDescription, EngineTensor, engine_config
from tritonkit.convert.targets.tensorrt import builder_flags, evaluation_profiles, plan_for_spec
from tritonkit.convert.targets.tensorrt_buckets import (
    bucketed_plan,
    check_lengths,
    check_spec,
    plan_with_buckets,
)
from tritonkit.convert.targets.tensorrt_loaders import engine_loader_graph
from tritonkit.errors import SpecError
from tritonkit.repository.onnx_io import GraphIO, read_io

T4 = PROFILES["T4"]
IO = GraphIO(
    inputs=(TensorSpec("ids", "INT64", (-1, -1)), TensorSpec("mask", "INT64", (-1, -1))),
    outputs=(TensorSpec("hidden", "FP32", (-1, -1, 8)),),
    opset=17,
)
SEQ = Buckets(
    axes={"seq": (32, 64, 128)},
    inputs={"ids": {1: "seq"}, "mask": {1: "seq"}},
    outputs={"hidden": {1: "seq"}},
)


def _spec(**extra: Any) -> Any:
    data: dict[str, Any] = {
        "name": "m",
        "source": {"onnx": "m.onnx"},
        "target": "tensorrt",
        "precisions": ["fp16"],
        "batching": {"max_batch_size": 32},
    }
    data.update(extra)
    return parse_spec(data)


def _ranges(profile: Any, name: str) -> tuple[tuple[int, ...], ...]:
    return tuple(profile[name].min), tuple(profile[name].opt), tuple(profile[name].max)


def test_one_profile_per_bucket_in_the_loader_graph(tmp_path: Path) -> None:
    spec = _spec(serving={"shape_buckets": {"seq": [32, 64, 128]}})
    plan = plan_with_buckets(plan_for_spec(spec, T4), spec, SEQ, IO.inputs)
    assert plan.buckets == SEQ and plan.max_batch == 32
    graph = engine_loader_graph(
        tmp_path / "fp32.onnx",
        tmp_path / "m.plan",
        plan,
        builder_flags(plan, "fp16", 10, T4),
        IO,
        workspace_key="WORKSPACE",
        timing_cache=tmp_path / "timing.cache",
    )
    profiles = graph._engine._config.profiles
    # bucket k: previous edge + 1 .. edge, OPT at the edge (the first from 1); batch 1 / 16 / 32
    assert [_ranges(p, "ids") for p in profiles] == [
        ((1, 1), (16, 32), (32, 32)),
        ((1, 33), (16, 64), (32, 64)),
        ((1, 65), (16, 128), (32, 128)),
    ]
    assert [_ranges(p, "mask") for p in profiles] == [_ranges(p, "ids") for p in profiles]
    assert "tensorrt" not in sys.modules


def test_engine_gate_batches_run_on_the_profile_of_their_bucket() -> None:
    spec = _spec()
    plan = plan_with_buckets(plan_for_spec(spec, T4), spec, SEQ, IO.inputs)

    def feed(batch: int, seq: int) -> dict[str, Any]:
        ids = np.ones((batch, seq), np.int64)
        return {"ids": ids, "mask": ids}

    assert evaluation_profiles(plan, IO, [feed(32, 20), feed(3, 64), feed(1, 65), feed(8, 128)]) == [
        0,
        1,
        2,
        2,
    ]
    with pytest.raises(SpecError, match="no TensorRT profile covers") as info:
        evaluation_profiles(plan, IO, [feed(1, 129)])
    assert "\n" not in str(info.value) and "serving.shape_buckets" in str(info.value)


def test_two_bucketed_axes_make_one_profile_per_combination() -> None:
    io = GraphIO(inputs=(TensorSpec("image", "FP32", (-1, 3, -1, -1)),), outputs=(), opset=17)
    buckets = Buckets(axes={"h": (224, 448), "w": (224, 448)}, inputs={"image": {2: "h", 3: "w"}})
    spec = _spec()
    plan = plan_with_buckets(plan_for_spec(spec, T4), spec, buckets, io.inputs)
    spans = [(p.shapes["image"].min, p.shapes["image"].max) for p in plan.profiles]
    assert spans == [
        ((3, 1, 1), (3, 224, 224)),
        ((3, 1, 225), (3, 224, 448)),
        ((3, 225, 1), (3, 448, 224)),
        ((3, 225, 225), (3, 448, 448)),
    ]
    many = Buckets(axes={"h": tuple(range(8, 64, 8)), "w": tuple(range(8, 64, 8))}, inputs=buckets.inputs)
    with pytest.raises(
        SpecError, match=r"makes 49 TensorRT profiles \(h 7 x w 7 buckets\); expected at most 32"
    ):
        plan_with_buckets(plan, spec, many, io.inputs)


def test_given_profiles_are_kept_and_must_hold_every_edge() -> None:
    profiles = [
        {
            "batch": [1, 16, 32],
            "shapes": {n: {"min": [1], "opt": [64], "max": [128]} for n in ("ids", "mask")},
        }
    ]
    spec = _spec(tensorrt={"profiles": profiles})
    plan = plan_for_spec(spec, T4)
    kept = plan_with_buckets(plan, spec, SEQ, IO.inputs)
    assert kept.profiles == plan.profiles and kept.buckets == SEQ
    longer = Buckets(axes={"seq": (64, 256)}, inputs=SEQ.inputs)
    with pytest.raises(SpecError) as info:
        plan_with_buckets(plan, spec, longer, IO.inputs)
    assert str(info.value) == (
        "shape bucket 256 of axis `seq` (input `ids` axis 1) is outside every `tensorrt.profiles` range "
        "(1..128); give `serving.shape_buckets.seq` edges inside them, or leave `tensorrt.profiles` out "
        "(one profile per bucket)"
    )


def test_the_engine_config_names_the_buckets_for_clients_to_pad() -> None:
    def tensor(name: str, mode: str, shape: tuple[int, ...]) -> EngineTensor:
        ranges = (((1, 1), (16, 32), (32, 32)),) if mode == "input" else ()
        return EngineTensor(name, mode, "INT32" if mode == "input" else "FP32", shape, ranges)

    description = EngineDescription(
        (
            tensor("ids", "input", (-1, -1)),
            tensor("mask", "input", (-1, -1)),
            tensor("hidden", "output", (-1, -1, 8)),
        )
    )
    config = engine_config("m_fp16_trt", description, compute_capability="7.5")
    assert apply_buckets(config, SEQ) == {}  # no helper file: TensorRT's backend pads nothing
    written = Buckets.parse(config.parameters[PARAMETER])
    assert written is not None and written.pad_at == "client" and written.axes == SEQ.axes
    assert not any(t.allow_ragged_batch for t in config.inputs)


def _seq_onnx(path: Path) -> Path:
    """ids [batch, seq] -> hidden [batch, seq, 1] (a Cast and an Unsqueeze), seq a named dim."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", 1])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [2])
    nodes = [
        helper.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["f", "axes"], ["hidden"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [ids], [out], [axes]), opset_imports=[helper.make_opsetid("", 17)]
    )
    onnx.save_model(model, str(path))
    return path


def test_bucketed_plan_resolves_the_sources_axes(tmp_path: Path) -> None:
    path = _seq_onnx(tmp_path / "m.onnx")
    source = Source(onnx=path, origin=path, graph=read_io(path))
    spec = _spec(source={"onnx": str(path)}, serving={"shape_buckets": {"seq": [16, 48]}})
    plan = bucketed_plan(plan_for_spec(spec, T4), spec, source)
    assert [(p.shapes["ids"].min, p.shapes["ids"].opt) for p in plan.profiles] == [
        ((1,), (16,)),
        ((17,), (48,)),
    ]
    assert plan.buckets is not None and plan.buckets.outputs == {"hidden": {1: "seq"}}
    bare = _spec(source={"onnx": str(path)})
    with pytest.raises(SpecError, match="nothing gives the longest length"):
        bucketed_plan(plan_for_spec(bare, T4), bare, source)


def test_longest_length_comes_from_the_spec_the_model_or_the_tokenizer() -> None:
    carried = {"ids": {1: "seq"}}
    with pytest.raises(SpecError) as info:
        check_lengths(_spec(), carried)
    assert str(info.value) == (
        "input `ids` has a dynamic axis 1 (`seq`) and nothing gives the longest length the TensorRT engine "
        "takes: give `serving.shape_buckets.seq` (edges, the last the longest length; one engine profile per "
        "bucket) or `tensorrt.profiles[0].shapes.ids` min/opt/max"
    )
    check_lengths(_spec(serving={"shape_buckets": {"seq": [64, 128]}}), carried)
    check_lengths(_spec(), carried, positions=512)  # the module's max_position_embeddings
    check_lengths(_spec(preprocessing={"kind": "text"}), carried)  # the tokenizer truncates
    with pytest.raises(SpecError, match="ends at 1024, above the model's max_position_embeddings 512"):
        check_lengths(_spec(serving={"shape_buckets": {"seq": [128, 1024]}}), carried, positions=512)


# --- tritonkit k8s package runs the target's checks ----------------------------------------------
def _packable(root: Path, extra: str = "") -> Path:
    root.mkdir(parents=True)
    _seq_onnx(root / "m.onnx")
    (root / "m.yaml").write_text(f"name: m\nsource:\n  onnx: m.onnx\n{extra}")
    return root / "m.yaml"


def test_package_refuses_a_dynamic_axis_without_its_longest_length(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _packable(tmp_path / "user")
    out = tmp_path / "out"
    assert main(["k8s", "package", str(spec), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "m: the TensorRT build would refuse it: input `ids` has a dynamic axis 1 (`seq`)" in err
    assert "serving.shape_buckets.seq" in err
    assert not (out / "inputs" / "m").exists()
    # The dev overlay's target takes it as it is; so does the T4's with the lengths given.
    assert main(["k8s", "package", str(spec), "--output", str(out), "--target", "onnxruntime"]) == 0
    given = _packable(tmp_path / "given", "serving:\n  shape_buckets: {seq: [32, 128]}\n")
    assert main(["k8s", "package", str(given), "--output", str(tmp_path / "out2")]) == 0


def test_package_refuses_edges_outside_the_given_profiles(tmp_path: Path) -> None:
    extra = (
        "serving:\n  shape_buckets: {seq: [64, 512]}\n"
        "tensorrt:\n  profiles:\n    - shapes: {ids: {min: [1], opt: [64], max: [256]}}\n"
    )
    spec = parse_spec(
        {
            "name": "m",
            "source": {"onnx": str(_seq_onnx(tmp_path / "m.onnx"))},
            **yaml.safe_load(extra),
        }
    )
    with pytest.raises(SpecError, match=r"shape bucket 512 of axis `seq` .* \(1\.\.256\)"):
        check_spec(spec)


def test_package_calls_a_torch_entry_point_to_learn_its_axes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "user"
    (root / "seqnet_pkg").mkdir(parents=True)
    (root / "seqnet_pkg" / "__init__.py").write_text(
        "import torch\nfrom tritonkit.convert.graph.export import TorchSource\n\n\n"
        "def build():\n"
        "    return TorchSource(torch.nn.Embedding(64, 4), [torch.zeros(1, 8, dtype=torch.long)], ['ids'],\n"
        "                       ['hidden'], dynamic_axes={'ids': {1: 'seq'}, 'hidden': {1: 'seq'}})\n"
    )
    (root / "s.yaml").write_text("name: s\nsource:\n  torch: seqnet_pkg:build\n")
    out = tmp_path / "out"
    assert main(["k8s", "package", str(root / "s.yaml"), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "input `ids` has a dynamic axis 1 (`seq`)" in err
    assert "seqnet_pkg" not in sys.modules  # the user's module is forgotten after the check
    (root / "s.yaml").write_text(
        "name: s\nsource:\n  torch: seqnet_pkg:build\nserving: {shape_buckets: {seq: [16, 64]}}\n"
    )
    assert main(["k8s", "package", str(root / "s.yaml"), "--output", str(out)]) == 0
