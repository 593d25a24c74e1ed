"""Text in, embedding out: the configurations that let a flagship text model take raw strings.

Either one python model tokenizes and runs the encoder (the ``text_embedding`` runner, portable
target), or an ensemble ``<model>_text`` chains a tokenizer model and the tensor model (always for
the onnxruntime and tensorrt targets, whose backends cannot tokenize).
"""

from __future__ import annotations

from tritonkit.config import DynamicBatching, EnsembleStep, InstanceGroup, ModelConfig, TensorConfig
from tritonkit.convert.graph.source import Source
from tritonkit.convert.spec.buildspec import BuildSpec

__all__ = [
    "TEXT_INPUT",
    "TEXT_OUTPUT",
    "dynamic_batching",
    "ensemble_config",
    "text_ensemble",
    "text_runner_config",
    "tokenizer_config",
    "tokenizer_name",
]

TEXT_INPUT = "TEXT"
TEXT_OUTPUT = "EMBEDDING"


def dynamic_batching(spec: BuildSpec, mbs: int) -> DynamicBatching | None:
    """The spec's dynamic batching for a model of max batch ``mbs`` (None when it does not batch)."""
    if mbs <= 0:
        return None
    return DynamicBatching(
        max_queue_delay_microseconds=spec.batching.max_queue_delay_us,
        preferred_batch_size=list(spec.batching.preferred_batch_sizes),
    )


def text_ensemble(spec: BuildSpec) -> bool:
    """Whether text reaches the model through a tokenizer step of an ensemble."""
    return spec.preprocessing.kind == "text" and (
        spec.target != "portable" or spec.preprocessing.tokenize == "ensemble"
    )


def tokenizer_name(spec: BuildSpec) -> str:
    return f"{spec.name}_tokenizer"


def _embedding_dim(source: Source) -> int:
    return int(source.graph.outputs[0].shape[-1])


def tokenizer_config(spec: BuildSpec, source: Source, mbs: int) -> ModelConfig:
    """The ensemble's first step: the text runner in ``tokenize`` mode (python backend, CPU)."""
    return ModelConfig(
        name=tokenizer_name(spec),
        backend="python",
        max_batch_size=mbs,
        inputs=[TensorConfig(TEXT_INPUT, "BYTES", [1])],
        outputs=[TensorConfig("input_ids", "INT64", [-1]), TensorConfig("attention_mask", "INT64", [-1])],
        dynamic_batching=dynamic_batching(spec, mbs),
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=spec.instances.count)],
        parameters={
            "mode": "tokenize",
            "max_seq_length": str(source.max_seq_length),
            "pad_to_multiple_of": "16",
        },
    )


def ensemble_config(spec: BuildSpec, source: Source, model: str, mbs: int) -> ModelConfig:
    """``<model>_text``: TEXT → tokenizer → ``model`` → EMBEDDING."""
    return ModelConfig(
        name=f"{model}_text",
        platform="ensemble",
        max_batch_size=mbs,
        inputs=[TensorConfig(TEXT_INPUT, "BYTES", [1])],
        outputs=[TensorConfig(TEXT_OUTPUT, "FP32", [_embedding_dim(source)])],
        ensemble_steps=[
            EnsembleStep(
                model_name=tokenizer_name(spec),
                input_map={TEXT_INPUT: TEXT_INPUT},
                output_map={"input_ids": "_input_ids", "attention_mask": "_attention_mask"},
            ),
            EnsembleStep(
                model_name=model,
                input_map={"input_ids": "_input_ids", "attention_mask": "_attention_mask"},
                output_map={source.output_names[0]: TEXT_OUTPUT},
            ),
        ],
    )


def text_runner_config(spec: BuildSpec, source: Source, name: str, mbs: int) -> ModelConfig:
    """One python model (``text_embedding`` runner) that tokenizes and encodes: TEXT → EMBEDDING."""
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=mbs,
        inputs=[TensorConfig(TEXT_INPUT, "BYTES", [1])],
        outputs=[TensorConfig(TEXT_OUTPUT, "FP32", [_embedding_dim(source)])],
        dynamic_batching=dynamic_batching(spec, mbs),
        instance_groups=[InstanceGroup(kind=spec.instances.kind or "KIND_CPU", count=spec.instances.count)],
        parameters={"max_seq_length": str(source.max_seq_length), "intra_op_threads": "1"},
    )
