"""The portable target: the python-backend configuration that serves any ONNX graph with the ONNX
runner of :mod:`tritonkit.backends.runners` on the embedded server.

Owns the decisions that turn a graph's interface into a Triton configuration: ``max_batch_size``
(batching only when every input and output has a dynamic leading axis), dims (batch axis dropped
when batching, other dynamic dims as -1), dynamic batching, instance groups and the runner's ONNX
Runtime parameters. A version of this target holds ``model.onnx`` (plus any external-data files)
and ``model.py`` (the runner); :mod:`tritonkit.convert.targets.targets` makes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict, Unpack

from tritonkit.backends.runners import ONNX_RUNNER
from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.graph.source import Source
from tritonkit.convert.graph.text_models import text_ensemble, text_runner_config
from tritonkit.convert.spec.buildspec import DEFAULT_MAX_BATCH_SIZE, BuildSpec
from tritonkit.errors import ConfigError, ModelImportError
from tritonkit.repository.onnx_io import GraphIO

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_DELAY_US",
    "INSTANCE_KINDS",
    "ONNX_FILE",
    "RUNNER_FILE",
    "PortableSettings",
    "check_settings",
    "graph_config",
    "portable_config",
]

#: Small default delay: enough for concurrent requests to meet, far below any latency budget.
DEFAULT_MAX_QUEUE_DELAY_US = 500
INSTANCE_KINDS: tuple[str, ...] = ("KIND_CPU", "KIND_GPU", "KIND_AUTO")
ONNX_FILE = "model.onnx"
RUNNER_FILE = "model.py"


#: Runner parameters with a closed set of values (see ``backends/runners/onnx_runner.py``).
RUNNER_CHOICES: dict[str, tuple[str, ...]] = {
    "tensor_exchange": ("auto", "dlpack", "numpy"),
    "execution_provider": ("auto", "cuda", "cpu"),
}
RUNNER_THREAD_PARAMETERS: tuple[str, ...] = ("intra_op_threads", "inter_op_threads")


def _check_parameters(params: Mapping[str, str]) -> None:
    """Refuse runner parameters the runner would reject at load time, so the build fails instead."""
    for key, allowed in RUNNER_CHOICES.items():
        if key in params and params[key] not in allowed:
            raise ConfigError(
                f"runner parameter `{key}` must be one of {', '.join(allowed)}; got {params[key]!r}"
            )
    for key in RUNNER_THREAD_PARAMETERS:
        if key in params and not (params[key].isdigit() and int(params[key]) >= 1):
            raise ConfigError(f"runner parameter `{key}` must be an integer >= 1; got {params[key]!r}")


def _check_int(value: object, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"`{field}` must be an integer >= {minimum}; got {value!r}")
    return value


class PortableSettings(TypedDict, total=False):
    """The keyword settings of :func:`graph_config` and ``import_onnx``: ``max_batch_size`` (None:
    :data:`DEFAULT_MAX_BATCH_SIZE` when the graph can batch, else 0), ``instance_count`` (1),
    ``instance_kind`` (``KIND_CPU``), ``max_queue_delay_us`` (:data:`DEFAULT_MAX_QUEUE_DELAY_US`) and
    ``parameters``, extra runner parameters (none)."""

    max_batch_size: int | None
    instance_count: int
    instance_kind: str
    max_queue_delay_us: int
    parameters: Mapping[str, str] | None


def check_settings(settings: PortableSettings) -> tuple[int | None, int, str, int, dict[str, str]]:
    """``settings`` with their defaults: (max_batch_size, instance_count, instance_kind,
    max_queue_delay_us, parameters); ConfigError naming the first that Triton or the runner would refuse."""
    max_batch_size = settings.get("max_batch_size")
    instance_count = settings.get("instance_count", 1)
    instance_kind = settings.get("instance_kind", "KIND_CPU")
    max_queue_delay_us = settings.get("max_queue_delay_us", DEFAULT_MAX_QUEUE_DELAY_US)
    parameters = dict(settings.get("parameters") or {})
    _check_int(instance_count, "instance_count", 1)
    _check_int(max_queue_delay_us, "max_queue_delay_us", 0)
    if instance_kind not in INSTANCE_KINDS:
        raise ConfigError(
            f"`instance_kind` must be one of {', '.join(INSTANCE_KINDS)}; got {instance_kind!r}"
        )
    if max_batch_size is not None:
        _check_int(max_batch_size, "max_batch_size", 0)
    _check_parameters(parameters)
    return max_batch_size, instance_count, instance_kind, max_queue_delay_us, parameters


def _tensor(spec: TensorSpec, batching: bool) -> TensorConfig:
    dims = list(spec.shape[1:] if batching else spec.shape)
    if not dims:
        # Triton refuses empty dims; one value per batch element (or a scalar) is dims [1]
        # reshaped to [] for the model, the documented way to serve rank-1 batched tensors.
        return TensorConfig(name=spec.name, data_type=spec.datatype, dims=[1], reshape=[])
    return TensorConfig(name=spec.name, data_type=spec.datatype, dims=dims)


def graph_config(name: str, graph: GraphIO, **settings: Unpack[PortableSettings]) -> ModelConfig:
    """The python-backend config that serves ``graph`` with the portable runner.

    ``max_batch_size`` None picks :data:`DEFAULT_MAX_BATCH_SIZE` when the graph can batch and 0
    otherwise; a positive value on a graph whose leading axis is fixed is refused (Triton would
    prepend a batch axis the graph does not have). 0 serves full shapes with no batching.
    """
    max_batch_size, instance_count, instance_kind, max_queue_delay_us, parameters = check_settings(settings)
    if max_batch_size is None:
        max_batch_size = DEFAULT_MAX_BATCH_SIZE if graph.batch_dynamic else 0
    if max_batch_size > 0 and not graph.batch_dynamic:
        fixed = [f"{t.name}{list(t.shape)}" for t in graph.inputs + graph.outputs if not t.batch_dynamic]
        raise ModelImportError(
            f"`max_batch_size` {max_batch_size} needs a dynamic first axis on every input and output; "
            f"fixed in: {', '.join(fixed)} (use --max-batch-size 0)"
        )
    batching = max_batch_size > 0
    # `runner` tells `tritonkit check` this version serves the graph's own tensors.
    params = {"runner": ONNX_RUNNER, "onnx_file": ONNX_FILE, "intra_op_threads": "1", "inter_op_threads": "1"}
    params.update(parameters)
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=[_tensor(t, batching) for t in graph.inputs],
        outputs=[_tensor(t, batching) for t in graph.outputs],
        dynamic_batching=DynamicBatching(max_queue_delay_microseconds=max_queue_delay_us)
        if batching
        else None,
        instance_groups=[InstanceGroup(kind=instance_kind, count=instance_count)],
        parameters=params,
    )


def portable_config(spec: BuildSpec, source: Source, name: str, mbs: int) -> tuple[ModelConfig, str]:
    """(config, runner module name) that serve ``source`` for ``spec`` on the embedded server."""
    if spec.preprocessing.kind == "text" and not text_ensemble(spec):
        return text_runner_config(spec, source, name, mbs), "text_embedding"
    config = graph_config(
        name,
        source.graph,
        max_batch_size=mbs,
        instance_count=spec.instances.count,
        instance_kind=spec.instance_kind,
        max_queue_delay_us=spec.batching.max_queue_delay_us,
        parameters=spec.portable.parameters,
    )
    if config.dynamic_batching is not None and spec.batching.preferred_batch_sizes:
        config.dynamic_batching.preferred_batch_size = list(spec.batching.preferred_batch_sizes)
    return config, ONNX_RUNNER
