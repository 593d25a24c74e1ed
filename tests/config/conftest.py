"""Shared fixtures for the config tests: the configs behind the golden files, and a writer for
python-backend models the real server can load."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.support.python_models import model_source

from tritonkit import config
from tritonkit.config import (
    Accelerator,
    CudaOptimization,
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

GOLDEN_DIR = Path(__file__).parent / "golden"


# A python-backend model that adds one to X; it accepts any batch the config allows.
ADD_ONE_MODEL_PY = model_source(
    """
    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = _numpy_in(request, "X")
                responses.append(pb_utils.InferenceResponse([_tensor_out("Y", x + 1)]))
            return responses
    """
)


def python_onnx_runner() -> ModelConfig:
    """A portable version: python backend running an ONNX file, dynamic batching with a bounded queue."""
    return ModelConfig(
        name="minilm_portable",
        backend="python",
        max_batch_size=32,
        inputs=[
            TensorConfig("input_ids", "INT64", [-1]),
            TensorConfig("attention_mask", "INT64", [-1]),
            TensorConfig("token_type_ids", "INT64", [-1], optional=True),
        ],
        outputs=[TensorConfig("sentence_embedding", "FP32", [384])],
        dynamic_batching=DynamicBatching(
            max_queue_delay_microseconds=2000,
            preferred_batch_size=[8, 16],
            preserve_ordering=True,
            default_queue_policy=QueuePolicy(
                max_queue_size=256,
                default_timeout_microseconds=500_000,
                allow_timeout_override=True,
                timeout_action="REJECT",
            ),
        ),
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=2)],
        model_warmup=[
            ModelWarmup(
                name="seq128",
                batch_size=8,
                inputs={
                    "input_ids": WarmupInput("INT64", [128], zero_data=True),
                    "attention_mask": WarmupInput("INT64", [128], zero_data=True),
                },
            )
        ],
        version_policy=VersionPolicy.latest(2),
        parameters={"onnx_file": "model.onnx", "intra_op_threads": "1"},
    )


def tensorrt_plan() -> ModelConfig:
    """A TensorRT engine with two optimization profiles, one instance group each, per-GPU plan files."""
    return ModelConfig(
        name="minilm_trt",
        platform="tensorrt_plan",
        backend="tensorrt",
        max_batch_size=64,
        inputs=[
            TensorConfig("input_ids", "INT32", [128]),
            TensorConfig("attention_mask", "INT32", [128]),
        ],
        outputs=[TensorConfig("sentence_embedding", "FP16", [384])],
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=1000, preferred_batch_size=[16, 64]),
        instance_groups=[
            InstanceGroup(kind="KIND_GPU", count=1, gpus=[0], profile=["0"]),
            InstanceGroup(kind="KIND_GPU", count=1, gpus=[0], profile=["1"]),
        ],
        optimization=Optimization(
            cuda=CudaOptimization(graphs=True), input_pinned_memory=True, output_pinned_memory=True
        ),
        cc_model_filenames={"7.5": "model_t4.plan", "8.6": "model_a10.plan"},
        default_model_filename="model.plan",
    )


def onnxruntime_trt_accelerator() -> ModelConfig:
    """ONNX Runtime on GPU with its TensorRT execution provider in FP16, response cache on."""
    return ModelConfig(
        name="minilm_ort",
        platform="onnxruntime_onnx",
        backend="onnxruntime",
        max_batch_size=16,
        inputs=[TensorConfig("input", "FP32", [3, 224, 224])],
        outputs=[TensorConfig("logits", "FP32", [1000], label_filename="labels.txt")],
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=500),
        instance_groups=[InstanceGroup(kind="KIND_GPU", count=2)],
        optimization=Optimization(
            execution_accelerators=ExecutionAccelerators(
                gpu_execution_accelerator=[
                    Accelerator(
                        "tensorrt",
                        {
                            "precision_mode": "FP16",
                            "max_workspace_size_bytes": "1073741824",
                            "trt_engine_cache_enable": "true",
                        },
                    )
                ]
            )
        ),
        version_policy=VersionPolicy.specific([1, 2]),
        response_cache=True,
    )


def ensemble() -> ModelConfig:
    """Tokenizer (python) then encoder, exposed as one model taking raw text."""
    return ModelConfig(
        name="minilm_text",
        platform="ensemble",
        max_batch_size=16,
        inputs=[TensorConfig("TEXT", "BYTES", [1])],
        outputs=[TensorConfig("EMBEDDING", "FP32", [384])],
        ensemble_steps=[
            EnsembleStep(
                model_name="tokenizer",
                model_version=-1,
                input_map={"TEXT": "TEXT"},
                output_map={"input_ids": "ids", "attention_mask": "mask"},
            ),
            EnsembleStep(
                model_name="minilm_portable",
                model_version=1,
                input_map={"input_ids": "ids", "attention_mask": "mask"},
                output_map={"sentence_embedding": "EMBEDDING"},
            ),
        ],
    )


GOLDEN_BUILDERS: dict[str, Callable[[], ModelConfig]] = {
    "python_onnx_runner": python_onnx_runner,
    "tensorrt_plan_two_profiles": tensorrt_plan,
    "onnxruntime_trt_accelerator": onnxruntime_trt_accelerator,
    "ensemble": ensemble,
}


@pytest.fixture(params=sorted(GOLDEN_BUILDERS))
def golden(request: pytest.FixtureRequest) -> tuple[ModelConfig, Path]:
    """(config built in code, path of its golden config.pbtxt)."""
    name: str = request.param
    return GOLDEN_BUILDERS[name](), GOLDEN_DIR / f"{name}.pbtxt"


@pytest.fixture
def update_golden() -> bool:
    """TRITONKIT_UPDATE_GOLDEN=1 rewrites the golden files from the builders (then review the diff)."""
    return os.environ.get("TRITONKIT_UPDATE_GOLDEN") == "1"


@pytest.fixture
def valid_config() -> ModelConfig:
    """A small valid batching config each validation test breaks in one place."""
    return ModelConfig(
        name="m",
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("X", "FP32", [4])],
        outputs=[TensorConfig("Y", "FP32", [4])],
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=100, preferred_batch_size=[4]),
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )


@pytest.fixture
def add_model() -> Callable[[Path, ModelConfig], Path]:
    """Write ``cfg`` (unchecked, so tests can hand Triton invalid ones) plus the add-one model.py."""

    def write(repo: Path, cfg: ModelConfig) -> Path:
        model_dir = repo / cfg.name
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(ADD_ONE_MODEL_PY)
        config.save(cfg, model_dir / "config.pbtxt", check=False)
        return model_dir

    return write
