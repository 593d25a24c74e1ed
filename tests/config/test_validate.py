"""Validation: one case per rule, each breaking a valid config in one place and asserting the message."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tritonkit import config
from tritonkit.config import (
    Accelerator,
    DynamicBatching,
    EnsembleStep,
    ExecutionAccelerators,
    InstanceGroup,
    ModelConfig,
    ModelWarmup,
    Optimization,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
    WarmupInput,
)
from tritonkit.errors import ConfigError

Mutator = Callable[[ModelConfig], object]


def _set(**fields: object) -> Mutator:
    def apply(cfg: ModelConfig) -> None:
        for key, value in fields.items():
            setattr(cfg, key, value)

    return apply


def _batching(**fields: object) -> Mutator:
    def apply(cfg: ModelConfig) -> None:
        assert cfg.dynamic_batching is not None
        for key, value in fields.items():
            setattr(cfg.dynamic_batching, key, value)

    return apply


def _input(**fields: object) -> Mutator:
    def apply(cfg: ModelConfig) -> None:
        for key, value in fields.items():
            setattr(cfg.inputs[0], key, value)

    return apply


def _output(**fields: object) -> Mutator:
    def apply(cfg: ModelConfig) -> None:
        for key, value in fields.items():
            setattr(cfg.outputs[0], key, value)

    return apply


def _all(*mutators: Mutator) -> Mutator:
    def apply(cfg: ModelConfig) -> None:
        for mutate in mutators:
            mutate(cfg)

    return apply


def _step(index: int, **fields: object) -> Mutator:
    def apply(cfg: ModelConfig) -> None:
        for key, value in fields.items():
            setattr(cfg.ensemble_steps[index], key, value)

    return apply


def _add_step(step: EnsembleStep) -> Mutator:
    return lambda cfg: cfg.ensemble_steps.append(step)


def _group(**fields: object) -> Mutator:
    return _set(instance_groups=[InstanceGroup(**fields)])  # type: ignore[arg-type]


def _warmup(batch_size: int = 1, **inputs: WarmupInput) -> Mutator:
    return _set(model_warmup=[ModelWarmup("w", batch_size, dict(inputs))])


ZERO4 = WarmupInput("FP32", [4], zero_data=True)

CASES: list[tuple[str, Mutator, str]] = [
    # --- identity, platform and backend ---
    ("name", _set(name=""), "`name` is empty; expected a model name"),
    (
        "negative max_batch_size",
        _set(max_batch_size=-1, dynamic_batching=None),
        "`max_batch_size` is -1; expected 0 (no batching) or >= 1",
    ),
    (
        "platform or backend",
        _set(backend=None),
        "neither `platform` nor `backend` is set; expected a backend (e.g. 'python', 'onnxruntime', "
        "'tensorrt') or a platform (e.g. 'tensorrt_plan', 'onnxruntime_onnx', 'ensemble')",
    ),
    (
        "unknown platform",
        _set(backend=None, platform="onnx"),
        "`platform` is 'onnx'; expected one of tensorrt_plan, onnxruntime_onnx, pytorch_libtorch, "
        "tensorflow_savedmodel, tensorflow_graphdef, ensemble",
    ),
    (
        "tensorrt_plan needs tensorrt",
        _set(platform="tensorrt_plan", backend="onnxruntime"),
        "`platform` 'tensorrt_plan' does not match `backend` 'onnxruntime'; expected `backend` 'tensorrt'",
    ),
    (
        "onnxruntime_onnx needs onnxruntime",
        _set(platform="onnxruntime_onnx", backend="tensorrt"),
        "`platform` 'onnxruntime_onnx' does not match `backend` 'tensorrt'; expected `backend` 'onnxruntime'",
    ),
    # --- tensors ---
    ("no inputs", _set(inputs=[]), "`input` is empty; expected at least one input tensor"),
    ("no outputs", _set(outputs=[]), "`output` is empty; expected at least one output tensor"),
    (
        "unique input names",
        lambda c: c.inputs.append(TensorConfig("X", "FP32", [2])),
        "`input` name 'X' appears more than once; expected unique input names",
    ),
    (
        "unique output names",
        lambda c: c.outputs.append(TensorConfig("Y", "FP32", [2])),
        "`output` name 'Y' appears more than once; expected unique output names",
    ),
    ("tensor name", _output(name=""), "`output[0].name` is empty; expected a tensor name"),
    (
        "data type set",
        _input(data_type=""),
        "`input[0].data_type` is not set (input 'X'); expected one of BOOL, UINT8, UINT16, UINT32, "
        "UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES, BF16",
    ),
    (
        "known data type",
        _output(data_type="FLOAT32"),
        "`output[0].data_type` 'FLOAT32' is unknown (output 'Y'); expected one of BOOL, UINT8, UINT16, "
        "UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES, BF16",
    ),
    (
        "dims >= 1 or -1",
        _input(dims=[3, 0, -2]),
        "`input[0].dims` [3, 0, -2] has 0, -2; expected every dim -1 or >= 1",
    ),
    (
        "dims required with batching",
        _input(dims=[]),
        "`input[0].dims` is empty (input 'X'); expected [1] for one value per batch element",
    ),
    (
        "dims carry the full shape without batching",
        _set(max_batch_size=0, dynamic_batching=None, outputs=[TensorConfig("Y", "FP32", [])]),
        "`output[0].dims` is empty (output 'Y'); expected the full shape",
    ),
    (
        "reshape dims",
        _input(reshape=[0]),
        "`input[0].reshape.shape` [0] has 0; expected every dim -1 or >= 1",
    ),
    (
        "reshape keeps the element count",
        _input(reshape=[3]),
        "`input[0].reshape.shape` [3] holds 3 elements but `input[0].dims` [4] holds 4 (input 'X'); "
        "expected the same element count",
    ),
    (
        "optional is input-only",
        _output(optional=True),
        "`output[0].optional` is set (output 'Y'); expected it on inputs only",
    ),
    (
        "ragged batch is input-only",
        _output(allow_ragged_batch=True),
        "`output[0].allow_ragged_batch` is set (output 'Y'); expected it on inputs only",
    ),
    (
        "labels are output-only",
        _input(label_filename="labels.txt"),
        "`input[0].label_filename` is set (input 'X'); expected it on outputs only",
    ),
    # --- dynamic batching ---
    (
        "dynamic batching needs max_batch_size",
        _set(max_batch_size=0, dynamic_batching=DynamicBatching()),
        "`dynamic_batching` is set but `max_batch_size` is 0; expected `max_batch_size` >= 1 "
        "(dims then exclude the batch dimension)",
    ),
    (
        "preferred <= max_batch_size",
        _set(max_batch_size=16, dynamic_batching=DynamicBatching(preferred_batch_size=[32])),
        "`dynamic_batching.preferred_batch_size` 32 exceeds `max_batch_size` 16; "
        "expected every preferred size <= 16",
    ),
    (
        "preferred >= 1",
        _batching(preferred_batch_size=[0]),
        "`dynamic_batching.preferred_batch_size` 0 is below 1; expected sizes >= 1",
    ),
    (
        "preferred unique",
        _batching(preferred_batch_size=[4, 4]),
        "`dynamic_batching.preferred_batch_size` 4 appears more than once; expected unique sizes",
    ),
    (
        "queue delay >= 0",
        _batching(max_queue_delay_microseconds=-5),
        "`dynamic_batching.max_queue_delay_microseconds` is -5; expected >= 0",
    ),
    (
        "queue size >= 0",
        _batching(default_queue_policy=QueuePolicy(max_queue_size=-1)),
        "`dynamic_batching.default_queue_policy.max_queue_size` is -1; expected >= 0 (0 = unbounded)",
    ),
    (
        "queue timeout >= 0",
        _batching(default_queue_policy=QueuePolicy(default_timeout_microseconds=-1)),
        "`dynamic_batching.default_queue_policy.default_timeout_microseconds` is -1; "
        "expected >= 0 (0 = no timeout)",
    ),
    (
        "timeout action",
        _batching(default_queue_policy=QueuePolicy(timeout_action="DROP")),
        "`dynamic_batching.default_queue_policy.timeout_action` is 'DROP'; expected one of REJECT, DELAY",
    ),
    (
        "priority levels >= 0",
        _batching(priority_levels=-1),
        "`dynamic_batching.priority_levels` is -1; expected >= 0",
    ),
    (
        "default priority level in range",
        _batching(priority_levels=2, default_priority_level=3),
        "`dynamic_batching.default_priority_level` is 3; expected 1..2 (`priority_levels`)",
    ),
    (
        "priority queue policy level in range",
        _batching(priority_levels=1, default_priority_level=1, priority_queue_policy={2: QueuePolicy()}),
        "`dynamic_batching.priority_queue_policy` has level 2; expected 1..1 (`priority_levels`)",
    ),
    (
        "one scheduler",
        _set(extra={"sequence_batching": {}}),
        "`dynamic_batching` and `sequence_batching` are both set; expected one scheduler",
    ),
    # --- instance groups ---
    (
        "legal instance kind",
        _group(kind="CPU"),
        "`instance_group[0].kind` is 'CPU'; expected one of KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL",
    ),
    ("count >= 1", _group(kind="KIND_CPU", count=0), "`instance_group[0].count` is 0; expected >= 1"),
    (
        "gpus only for KIND_GPU",
        _group(kind="KIND_CPU", gpus=[0]),
        "`instance_group[0].gpus` is [0] with kind KIND_CPU; expected `gpus` only with KIND_GPU",
    ),
    (
        "profile only for KIND_GPU",
        _group(kind="KIND_AUTO", profile=["0"]),
        "`instance_group[0].profile` is ['0'] with kind KIND_AUTO; expected `profile` only with KIND_GPU",
    ),
    (
        "gpu indices >= 0",
        _group(kind="KIND_GPU", gpus=[-1]),
        "`instance_group[0].gpus` is [-1]; expected GPU indices >= 0",
    ),
    (
        "gpus unique",
        _group(kind="KIND_GPU", gpus=[0, 0]),
        "`instance_group[0].gpus` is [0, 0]; expected each GPU once",
    ),
    (
        "profile only for TensorRT models",
        _group(kind="KIND_GPU", profile=["0"]),
        "`instance_group[0].profile` is ['0'] on a 'python' model; expected `profile` only for TensorRT "
        "models (platform 'tensorrt_plan')",
    ),
    (
        "profiles are unique indices",
        _all(
            _set(platform="tensorrt_plan", backend=None), _group(kind="KIND_GPU", profile=["0", "0", "max"])
        ),
        "`instance_group[0].profile` is ['0', '0', 'max']; expected unique profile indices such as '0', '1'",
    ),
    # --- warm-up ---
    (
        "warmup batch <= max_batch_size",
        _warmup(16, X=ZERO4),
        "`model_warmup[0].batch_size` is 16; expected 1..8 (`max_batch_size` is 8)",
    ),
    (
        "warmup batch >= 1",
        _warmup(0, X=ZERO4),
        "`model_warmup[0].batch_size` is 0; expected 1..8 (`max_batch_size` is 8)",
    ),
    (
        "warmup name",
        _set(model_warmup=[ModelWarmup("", 1, {"X": ZERO4})]),
        "`model_warmup[0].name` is empty; expected a warm-up name",
    ),
    ("warmup inputs", _warmup(1), "`model_warmup[0].inputs` is empty; expected data for every model input"),
    (
        "warmup input exists",
        _warmup(1, Z=ZERO4),
        "`model_warmup[0].inputs[Z]` names input 'Z', which does not exist; expected one of X",
    ),
    (
        "warmup has one data source",
        _warmup(1, X=WarmupInput("FP32", [4], zero_data=True, random_data=True)),
        "`model_warmup[0].inputs[X]` sets 2 data sources; expected exactly one of "
        "`zero_data`, `random_data`, `input_data_file`",
    ),
    (
        "warmup data type matches the input",
        _warmup(1, X=WarmupInput("INT32", [4], random_data=True)),
        "`model_warmup[0].inputs[X].data_type` is 'INT32'; expected 'FP32' like the input",
    ),
    (
        "warmup dims are concrete",
        _all(_input(dims=[-1]), _warmup(1, X=WarmupInput("FP32", [-1], zero_data=True))),
        "`model_warmup[0].inputs[X].dims` [-1] has -1; expected every dim >= 1",
    ),
    (
        "warmup dims match the input without the batch dim",
        _warmup(1, X=WarmupInput("FP32", [1, 4], zero_data=True)),
        "`model_warmup[0].inputs[X].dims` is [1, 4]; expected a concrete shape matching input dims [4] "
        "(batch dim excluded)",
    ),
    # --- version policy ---
    (
        "latest keeps >= 1",
        _set(version_policy=VersionPolicy.latest(0)),
        "`version_policy.latest.num_versions` is 0; expected >= 1",
    ),
    (
        "specific names versions",
        _set(version_policy=VersionPolicy.specific([])),
        "`version_policy.specific.versions` is empty; expected at least one version",
    ),
    (
        "specific versions are unique and positive",
        _set(version_policy=VersionPolicy.specific([1, 1, 0])),
        "`version_policy.specific.versions` is [1, 1, 0]; expected unique version numbers >= 1",
    ),
    (
        "policy kind",
        _set(version_policy=VersionPolicy("newest")),
        "`version_policy` kind is 'newest'; expected one of latest, all, specific",
    ),
    # --- other fields ---
    (
        "ensemble steps need the ensemble platform",
        _set(ensemble_steps=[EnsembleStep("a", input_map={"x": "X"}, output_map={"y": "Y"})]),
        "`ensemble_scheduling` has 1 step(s) but `platform` is None; expected platform 'ensemble' for a "
        "model with ensemble steps",
    ),
    (
        "accelerator name",
        _set(optimization=Optimization(execution_accelerators=ExecutionAccelerators([Accelerator("")]))),
        "`optimization.execution_accelerators.gpu_execution_accelerator[0].name` is empty; "
        "expected e.g. 'tensorrt'",
    ),
    (
        "compute capability keys",
        _set(cc_model_filenames={"sm75": "model.plan"}),
        "`cc_model_filenames` key 'sm75' is not a compute capability; expected e.g. '7.5'",
    ),
    (
        "compute capability file",
        _set(cc_model_filenames={"7.5": ""}),
        "`cc_model_filenames[7.5]` is empty; expected a model file name",
    ),
    (
        "default model file",
        _set(default_model_filename=""),
        "`default_model_filename` is empty; expected a file name or None",
    ),
    (
        "extra does not shadow modelled fields",
        _set(extra={"max_batch_size": 4}),
        "`extra` has 'max_batch_size', a field ModelConfig models; expected it set through its attribute",
    ),
    (
        "parameter names",
        _set(parameters={"": "x"}),
        "`parameters` has an empty key; expected non-empty parameter names",
    ),
]


def test_valid_config_has_no_problems(valid_config: ModelConfig) -> None:
    assert config.problems(valid_config) == []
    assert config.validate(valid_config) is valid_config


@pytest.mark.parametrize(("mutate", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(valid_config: ModelConfig, mutate: Mutator, message: str) -> None:
    mutate(valid_config)
    assert config.problems(valid_config) == [message]


def ensemble_config() -> ModelConfig:
    return ModelConfig(
        "pipe",
        platform="ensemble",
        max_batch_size=8,
        inputs=[TensorConfig("TEXT", "BYTES", [1])],
        outputs=[TensorConfig("EMB", "FP32", [4])],
        ensemble_steps=[
            EnsembleStep("tok", input_map={"text": "TEXT"}, output_map={"ids": "ids"}),
            EnsembleStep("enc", model_version=1, input_map={"ids": "ids"}, output_map={"emb": "EMB"}),
        ],
    )


ENSEMBLE_CASES: list[tuple[str, Mutator, str]] = [
    (
        "no backend on ensembles",
        _set(backend="python"),
        "`platform` 'ensemble' does not match `backend` 'python'; expected no `backend`",
    ),
    (
        "ensemble needs steps",
        _set(ensemble_steps=[]),
        "`ensemble_scheduling.step` is empty; expected at least one step for platform 'ensemble'",
    ),
    (
        "step model name",
        _step(0, model_name=""),
        "`ensemble_scheduling.step[0].model_name` is empty; expected the name of a composing model",
    ),
    (
        "step model version",
        _step(1, model_version=-3),
        "`ensemble_scheduling.step[1].model_version` is -3; expected -1 (latest) or >= 1",
    ),
    (
        "step inputs mapped",
        _all(_step(0, input_map={}), _step(1, input_map={"ids": "ids", "text": "TEXT"})),
        "`ensemble_scheduling.step[0].input_map` is empty; expected at least one model input mapped",
    ),
    (
        "step outputs mapped",
        _all(
            _step(1, output_map={}),
            _add_step(EnsembleStep("post", input_map={"ids": "ids"}, output_map={"e": "EMB"})),
        ),
        "`ensemble_scheduling.step[1].output_map` is empty; expected at least one model output mapped",
    ),
    (
        "step inputs exist",
        _step(1, input_map={"ids": "tokens"}),
        "`ensemble_scheduling.step[1].input_map` maps 'ids' to 'tokens', which is neither an ensemble "
        "input nor a step output; expected one of EMB, TEXT, ids",
    ),
    (
        "ensemble outputs are produced",
        _step(1, output_map={"emb": "emb"}),
        "ensemble `output` 'EMB' is not produced by any step; expected it among the `output_map` values",
    ),
    (
        "one producer per tensor",
        lambda c: c.ensemble_steps.append(
            EnsembleStep("b", input_map={"t": "TEXT"}, output_map={"i": "ids"})
        ),
        "ensemble tensor 'ids' is produced by more than one step; expected one producer",
    ),
    (
        "steps do not overwrite inputs",
        _step(0, output_map={"ids": "ids", "echo": "TEXT"}),
        "`ensemble_scheduling.step[0].output_map` writes ensemble input 'TEXT'; expected a new tensor name",
    ),
    (
        "no dynamic batching on ensembles",
        _set(dynamic_batching=DynamicBatching()),
        "`dynamic_batching` is set on an ensemble; expected the composing models to batch",
    ),
    (
        "no instance groups on ensembles",
        _set(instance_groups=[InstanceGroup("KIND_CPU")]),
        "`instance_group` is set on an ensemble; expected instance groups on the composing models",
    ),
]


def test_valid_ensemble_has_no_problems() -> None:
    assert config.problems(ensemble_config()) == []


@pytest.mark.parametrize(
    ("mutate", "message"), [c[1:] for c in ENSEMBLE_CASES], ids=[c[0] for c in ENSEMBLE_CASES]
)
def test_ensemble_rule(mutate: Mutator, message: str) -> None:
    cfg = ensemble_config()
    mutate(cfg)
    assert config.problems(cfg) == [message]


def test_validate_raises_every_problem_on_one_line(valid_config: ModelConfig) -> None:
    valid_config.name = "bad"
    valid_config.inputs[0].dims = [0]
    valid_config.instance_groups[0].count = 0
    with pytest.raises(ConfigError) as info:
        config.validate(valid_config)
    assert str(info.value) == (
        "model `bad`: `input[0].dims` [0] has 0; expected every dim -1 or >= 1; "
        "`instance_group[0].count` is 0; expected >= 1"
    )


def test_problems_are_single_lines_naming_fields_in_backticks() -> None:
    cfg = ModelConfig("", platform="x", backend="y", max_batch_size=-1)
    found = config.problems(cfg)
    assert len(found) >= 4
    for line in found:
        assert "\n" not in line and "`" in line and "expected" in line


def test_full_shape_adds_the_implicit_batch_dim(valid_config: ModelConfig) -> None:
    assert valid_config.full_shape(valid_config.input("X")) == [-1, 4]
    valid_config.max_batch_size = 0
    assert valid_config.full_shape(valid_config.output("Y")) == [4]
    with pytest.raises(ConfigError, match="no input named 'Z'; expected one of: X"):
        valid_config.input("Z")
