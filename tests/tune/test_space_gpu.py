"""tune's config space on a GPU version as ``tritonkit build`` writes it: the kind and GPUs kept and
labelled, the GPU axes and defaults, the torch runner's buckets following every trial's max batch (the
batcher's preferred sizes equal to them), and the padded share computed by the runner's own rule."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest
import yaml

from tritonkit.backends.runners import runner_path
from tritonkit.cli import main
from tritonkit.commands import tune as tune_command
from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig, problems, to_pbtxt
from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.convert.spec.execution import ServingSpec, plan_execution
from tritonkit.convert.targets.torch_program import gpu_config
from tritonkit.errors import TritonKitError
from tritonkit.tune.report import short_label
from tritonkit.tune.search import Outcome, brute, snap
from tritonkit.tune.space import (
    apply_point,
    axes_for,
    base_point,
    buckets_of,
    describe,
    padded_share,
    same_config,
)
from tritonkit.tune.spec_file import edited_text, spec_values
from tritonkit.tune.tuner import TuneOptions
from tritonkit.tune.tuner import _axes as tuner_axes


def _built(gpus: tuple[int, ...] = (0,), max_batch: int = 128) -> ModelConfig:
    """The config `tritonkit build` writes for a torch-runner GPU version (2 instances per GPU)."""
    plan = plan_execution(
        ServingSpec(engine="torch", precision="fp16"), max_batch_size=max_batch, gpus=list(gpus)
    )
    return gpu_config(
        "bert_fp16",
        [TensorConfig("input_ids", "INT64", [128]), TensorConfig("attention_mask", "INT64", [128])],
        [TensorConfig("CLS", "FP32", [768])],
        plan,
        runner="torch_runner",
        max_batch_size=max_batch,
        max_queue_delay_us=500,
    )


def test_a_gpu_version_keeps_its_kind_and_gpus_and_gets_the_gpu_grid() -> None:
    cfg = _built(gpus=(0, 1))
    axes = {a.name: a.values for a in axes_for(cfg)}
    assert axes == {
        "instances": (2, 3, 4),  # per GPU
        "kind": ("KIND_GPU",),
        "gpus": ("0,1",),
        "max_batch_size": (32, 64, 128),
        "delay_us": (0, 100, 500),
        "buckets": ("pow2", "fine"),
    }
    base = base_point(cfg)
    assert snap(axes_for(cfg), base) == {k: base[k] for k in axes}  # the built config is on the grid
    assert (base["instances"], base["kind"], base["gpus"], base["buckets"]) == (2, "KIND_GPU", "0,1", "fine")
    assert describe(snap(axes_for(cfg), base)) == (
        "buckets=fine delay_us=500 gpus=0,1 instances=2 kind=KIND_GPU max_batch_size=128"
    )
    # --gpu on a GPU version adds nothing: it already runs there
    assert axes_for(cfg, gpu=True)[1].values == ("KIND_GPU",)


def test_a_native_version_searches_more_instances_per_gpu() -> None:
    """The native backend's instances are threads of Triton's: its grid is 2 or 4 per GPU, the built
    count (2, pipelined) on it."""
    plan = plan_execution(
        ServingSpec(engine="torch", precision="fp16", runner="native"), max_batch_size=64, gpus=[0]
    )
    cfg = gpu_config(
        "resnet50_fp16", [TensorConfig("image", "FP32", [3, 224, 224])], [TensorConfig("logits", "FP32", [1000])],
        plan, runner="torch_runner", max_batch_size=64, max_queue_delay_us=500,
    )  # fmt: skip
    cfg.backend = "tritonkit_torch"  # what torch_version sets for the native runner
    axes = {a.name: a.values for a in axes_for(cfg)}
    assert axes["instances"] == (2, 4) and axes["buckets"] == ("pow2", "fine")
    assert base_point(cfg)["instances"] == 2 == snap(axes_for(cfg), base_point(cfg))["instances"]


@pytest.mark.parametrize(("max_batch", "style"), [(16, "pow2"), (32, "fine"), (64, "fine"), (128, "pow2")])
def test_every_trial_buckets_follow_its_max_batch(
    max_batch: int, style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _built()
    point = {**base_point(cfg), "max_batch_size": max_batch, "buckets": style, "instances": 3, "delay_us": 0}
    trial = apply_point(cfg, point)
    assert problems(trial) == []
    buckets = [int(b) for b in trial.parameters["batch_buckets"].split(",")]
    assert buckets[-1] == max_batch == trial.max_batch_size and buckets == buckets_of(trial)
    assert trial.dynamic_batching is not None
    assert (
        trial.dynamic_batching.preferred_batch_size == buckets
    )  # one included: a lone request leaves at once
    (group,) = trial.instance_groups
    assert (group.kind, group.count, group.gpus) == ("KIND_GPU", 3, [0])
    # what the runner loads from that config: the same buckets, nothing refused
    monkeypatch.syspath_prepend(
        str(runner_path("torch_runner").parent)
    )  # its sibling modules, as the stub has
    spec = importlib.util.spec_from_file_location("torch_runner_space", runner_path("torch_runner"))
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    assert runner.parse_buckets(trial.parameters["batch_buckets"], trial.max_batch_size) == buckets
    # a hand-lowered max batch with the built list still loads: the runner clamps
    assert runner.parse_buckets(cfg.parameters["batch_buckets"], max_batch)[-1] == max_batch


def test_cpu_models_keep_the_cpu_grid() -> None:
    cfg = ModelConfig(
        name="add", backend="python", max_batch_size=8,
        inputs=[TensorConfig("X", "FP32", [4])], outputs=[TensorConfig("Y", "FP32", [4])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=500),
    )  # fmt: skip
    axes = {a.name: a.values for a in axes_for(cfg)}
    assert axes["kind"] == ("KIND_CPU",) and axes["instances"] == (1, 2, 3) and "gpus" not in axes
    assert axes["preferred"] == ("none", "max") and axes["queue"] == ("unbounded", "bounded")
    assert axes["delay_us"] == ("off", 0, 500, 2000) and buckets_of(cfg) == []
    assert axes_for(cfg, gpu=True)[1].values == ("KIND_CPU", "KIND_GPU")


def test_padded_share_is_the_runners_own_rule() -> None:
    spec = importlib.util.spec_from_file_location("torch_runner_pad", runner_path("torch_runner"))
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    buckets = buckets_of(_built())
    rng = random.Random(5)
    for _ in range(50):
        batches = {rng.randint(1, 300): rng.randint(1, 9) for _ in range(rng.randint(1, 6))}
        real = sum(size * n for size, n in batches.items())
        padded = sum(runner.padded_rows(size, buckets) * n for size, n in batches.items())
        assert padded_share(batches, buckets) == pytest.approx(padded / (real + padded))
    assert padded_share({"41": 2}, [1, 2, 4, 8, 16, 32, 64]) == pytest.approx(46 / 128)
    assert padded_share({}, buckets) is None and padded_share({8: 1}, []) is None


def test_points_that_make_one_config_are_one_trial() -> None:
    """The ``fine`` and ``pow2`` ladders of a max batch of 16 are the same buckets: one config, one key;
    of 32 they differ (24 is fine's). A search with that key measures such points once."""
    cfg = _built(max_batch=64)
    base = snap(axes_for(cfg, max_batch_sizes=[16, 32]), base_point(cfg))
    at = {b: {**base, "max_batch_size": 16, "buckets": b} for b in ("fine", "pow2")}
    assert same_config(cfg, at["fine"]) == same_config(cfg, at["pow2"])
    assert same_config(cfg, {**at["fine"], "max_batch_size": 32}) != same_config(
        cfg, {**at["pow2"], "max_batch_size": 32}
    )
    measured: list[str] = []

    def evaluate(point: dict[str, object]) -> Outcome:
        measured.append(describe(point))
        return Outcome(1000.0, 5.0, True)

    axes = axes_for(cfg, max_batch_sizes=[16, 32], delays_us=[500], instances=[2])
    result = brute(axes, evaluate, same=lambda p: same_config(cfg, p))
    assert len(measured) == 3  # max batch 16 once, 32 with each ladder
    assert len(result.trials) == 3


def _native(jit: bool = False) -> ModelConfig:
    plan = plan_execution(
        ServingSpec(engine="torch", precision="fp16", runner="native", jit_optimize=jit),
        max_batch_size=64,
        gpus=[0],
    )
    cfg = gpu_config(
        "resnet50_fp16", [TensorConfig("image", "FP32", [3, 224, 224])], [TensorConfig("logits", "FP32", [1000])],
        plan, runner="torch_runner", max_batch_size=64, max_queue_delay_us=500,
    )  # fmt: skip
    cfg.backend = "tritonkit_torch"  # what torch_version sets for the native runner
    return cfg


@pytest.mark.parametrize("built_on", [False, True])
def test_a_native_gpu_version_tries_the_optimised_plan_late(built_on: bool) -> None:
    """The native backend's jit_optimize is a late axis: the built plan is the start (on the grid, its
    config unchanged), the other value is the parameter set or removed, nothing else changes."""
    cfg = _native(jit=built_on)
    assert ("jit_optimize" in cfg.parameters) is built_on  # the build writes it only when on
    axes = axes_for(cfg)
    plan_axis = next(a for a in axes if a.name == "jit_optimize")
    assert plan_axis.values == ("off", "on") and plan_axis.late
    assert not any(a.late for a in axes if a.name != "jit_optimize")
    start = snap(axes, base_point(cfg))
    assert start["jit_optimize"] == ("on" if built_on else "off")
    assert same_config(cfg, start) == to_pbtxt(cfg)
    on = apply_point(cfg, {**start, "jit_optimize": "on"})
    off = apply_point(cfg, {**start, "jit_optimize": "off"})
    assert on.parameters["jit_optimize"] == "true" and "jit_optimize" not in off.parameters
    assert {k: v for k, v in on.parameters.items() if k != "jit_optimize"} == dict(off.parameters)
    assert [a.name for a in axes_for(cfg, jit_optimize=False)] == [a.name for a in axes if not a.late]
    # the plots tell the two plans apart
    assert (
        short_label({**start, "jit_optimize": "on"}) == short_label({**start, "jit_optimize": "off"}) + " jit"
    )


def test_only_a_native_gpu_version_gets_the_plan_axis() -> None:
    torch_runner = _built()
    cpu_native = _native()
    cpu_native.instance_groups = [InstanceGroup(kind="KIND_CPU", count=2)]
    for cfg in (torch_runner, cpu_native):
        assert "jit_optimize" not in {a.name for a in axes_for(cfg)}
        assert "jit_optimize" not in base_point(cfg)


@pytest.mark.parametrize(
    ("serving", "tuned", "written"),
    [
        ({"runner": "native"}, True, {"runner": "native", "jit_optimize": True}),
        ({}, True, {"runner": "native", "jit_optimize": True}),  # runner auto picked the native backend
        (None, True, {"runner": "native", "jit_optimize": True}),  # no serving section: one is made
        ({"runner": "native", "jit_optimize": True}, False, {"runner": "native", "jit_optimize": False}),
        ({"runner": "native", "jit_optimize": False}, False, {"runner": "native", "jit_optimize": False}),
        ({"runner": "native"}, False, {"runner": "native"}),
        (None, False, None),
    ],
)
def test_tune_writes_the_plan_it_chose_into_the_spec(
    serving: dict[str, object] | None, tuned: bool, written: dict[str, object] | None
) -> None:
    """``--write spec``: serving.jit_optimize follows the tuned config (true with the runner it requires;
    false only where the spec said so); the spec's other lines stay and the result is a valid spec."""
    text = (
        "name: resnet50\nsource:\n  onnx: m.onnx  # the exported program\nbatching:\n  max_batch_size: 64\n"
    )
    if serving is not None:
        text += "serving:\n  device: gpu\n" + "".join(
            f"  {k}: {str(v).lower()}\n" for k, v in serving.items()
        )
    cfg = apply_point(_native(), {"instances": 2, "max_batch_size": 64, "delay_us": 100,
                                  "jit_optimize": "on" if tuned else "off"})  # fmt: skip
    new, note = edited_text(text, spec_values(cfg, yaml.safe_load(text)))
    assert note == "" and "# the exported program" in new
    data = yaml.safe_load(new)
    got = data.get("serving")
    if got is not None:
        got = {k: v for k, v in got.items() if k in ("runner", "jit_optimize")}
    assert got == written
    assert parse_spec(data).serving.jit_optimize is tuned  # the build reads back the plan tune chose


def test_a_base_that_says_false_is_on_the_grid_and_only_exactly_true_is_on() -> None:
    """The backend reads exactly "true" or "false": a config saying "false" is the grid's `off` point
    with its text unchanged; "True" is not the optimised plan (the backend refuses it at load)."""
    cfg = _native()
    cfg.parameters["jit_optimize"] = "false"
    start = snap(axes_for(cfg), base_point(cfg))
    assert start["jit_optimize"] == "off" and same_config(cfg, start) == to_pbtxt(cfg)
    cfg.parameters["jit_optimize"] = "True"
    assert base_point(cfg)["jit_optimize"] == "off"


def test_no_jit_optimize_flag_reaches_the_grid(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`tritonkit tune --no-jit-optimize` leaves the plan axis out of a native GPU version's grid."""
    seen: list[TuneOptions] = []

    def stop_at_the_options(options: TuneOptions) -> None:  # the command's options, before any server
        seen.append(options)
        raise TritonKitError("stopped by the test")

    monkeypatch.setattr(tune_command, "tune", stop_at_the_options)
    for extra, has_axis in (([], True), (["--no-jit-optimize"], False)):
        argv = ["tune", "--model", "resnet50_fp16", "--repo", str(tmp_path), "--latency-budget-ms", "30",
                "--report", str(tmp_path / "r"), *extra]  # fmt: skip
        assert main(argv) != 0
        assert ("jit_optimize" in {a.name for a in tuner_axes(seen[-1], _native())}) is has_axis


def test_an_empty_serving_section_still_gets_the_tuned_instance_count() -> None:
    """`serving: {}` is a serving section: the write-back sets its instance count, as for any other."""
    cfg = apply_point(
        _native(), {"instances": 4, "max_batch_size": 64, "delay_us": 100, "jit_optimize": "off"}
    )
    assert spec_values(cfg, {"serving": {}})[("serving", "instances", "count")] == 4
