"""Importing any ONNX file as a *portable* model version (``tritonkit build --onnx``).

Owns the decisions that turn a graph's interface into a Triton configuration for the portable
runner: ``max_batch_size`` (batching only when every input and output has a dynamic leading axis),
dims (batch axis dropped when batching, other dynamic dims as -1), dynamic batching, instance
groups and the runner's ONNX Runtime parameters. The files written are ``model.onnx`` (plus any
external-data files), ``model.py`` (the runner from :mod:`tritonkit.serve.runners`), ``build.json`` and
``<model>/config.pbtxt``, all through :meth:`tritonkit.repository.ModelRepository.write_version`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritonkit.config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig
from tritonkit.errors import ConfigError, ModelImportError
from tritonkit.config.tensors import TensorSpec
from tritonkit.repository.onnx_io import GraphIO, read_io
from tritonkit.repository.store import Manifest, ModelRepository, validate_model_name
from tritonkit.serve.runners import ONNX_RUNNER, runner_path

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_MAX_QUEUE_DELAY_US",
    "INSTANCE_KINDS",
    "ONNX_FILE",
    "RUNNER_FILE",
    "import_onnx",
    "portable_config",
]

#: Used when the graph can batch and no max batch size is given (a T4 profile may pass its own).
DEFAULT_MAX_BATCH_SIZE = 64
#: Small default delay: enough for concurrent requests to meet, far below any latency budget.
DEFAULT_MAX_QUEUE_DELAY_US = 500
INSTANCE_KINDS: tuple[str, ...] = ("KIND_CPU", "KIND_GPU", "KIND_AUTO")
ONNX_FILE = "model.onnx"
RUNNER_FILE = "model.py"


#: Runner parameters with a closed set of values (see ``runner/onnx_runner.py``).
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


def _tensor(spec: TensorSpec, batching: bool) -> TensorConfig:
    dims = list(spec.shape[1:] if batching else spec.shape)
    if not dims:
        # Triton refuses empty dims; one value per batch element (or a scalar) is dims [1]
        # reshaped to [] for the model, the documented way to serve rank-1 batched tensors.
        return TensorConfig(name=spec.name, data_type=spec.datatype, dims=[1], reshape=[])
    return TensorConfig(name=spec.name, data_type=spec.datatype, dims=dims)


def portable_config(
    name: str,
    graph: GraphIO,
    *,
    max_batch_size: int | None = None,
    instance_count: int = 1,
    instance_kind: str = "KIND_CPU",
    max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US,
    parameters: Mapping[str, str] | None = None,
) -> ModelConfig:
    """The python-backend config that serves ``graph`` with the portable runner.

    ``max_batch_size`` None picks :data:`DEFAULT_MAX_BATCH_SIZE` when the graph can batch and 0
    otherwise; a positive value on a graph whose leading axis is fixed is refused (Triton would
    prepend a batch axis the graph does not have). 0 serves full shapes with no batching.
    """
    instance_count = _check_int(instance_count, "instance_count", 1)
    max_queue_delay_us = _check_int(max_queue_delay_us, "max_queue_delay_us", 0)
    if instance_kind not in INSTANCE_KINDS:
        raise ConfigError(
            f"`instance_kind` must be one of {', '.join(INSTANCE_KINDS)}; got {instance_kind!r}"
        )
    if max_batch_size is None:
        max_batch_size = DEFAULT_MAX_BATCH_SIZE if graph.batch_dynamic else 0
    max_batch_size = _check_int(max_batch_size, "max_batch_size", 0)
    if max_batch_size > 0 and not graph.batch_dynamic:
        fixed = [f"{t.name}{list(t.shape)}" for t in graph.inputs + graph.outputs if not t.batch_dynamic]
        raise ModelImportError(
            f"`max_batch_size` {max_batch_size} needs a dynamic first axis on every input and output; "
            f"fixed in: {', '.join(fixed)} (use --max-batch-size 0)"
        )
    batching = max_batch_size > 0
    # `runner` tells `tritonkit check` this version serves the graph's own tensors.
    params = {"runner": ONNX_RUNNER, "onnx_file": ONNX_FILE, "intra_op_threads": "1", "inter_op_threads": "1"}
    params.update(parameters or {})
    _check_parameters(params)
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


def import_onnx(
    onnx_path: str | os.PathLike[str],
    repo: ModelRepository | str | os.PathLike[str],
    name: str,
    *,
    version: int | None = None,
    force: bool = False,
    max_batch_size: int | None = None,
    instance_count: int = 1,
    instance_kind: str = "KIND_CPU",
    max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US,
    precision: str = "fp32",
    manifest_extra: Mapping[str, Any] | None = None,
    parameters: Mapping[str, str] | None = None,
) -> Path:
    """Write ``<repo>/<name>/<version>/`` serving ``onnx_path`` with the portable runner; return its path.

    Everything is checked (name, graph, config values) before anything is written; the version is
    written atomically by :meth:`ModelRepository.write_version`. ``parameters`` are extra runner
    parameters (see ``runner/onnx_runner.py``) merged over the defaults.
    """
    validate_model_name(name)
    source = Path(onnx_path)
    graph = read_io(source)
    config = portable_config(
        name,
        graph,
        max_batch_size=max_batch_size,
        instance_count=instance_count,
        instance_kind=instance_kind,
        max_queue_delay_us=max_queue_delay_us,
        parameters=parameters,
    )
    files: dict[str, Path | bytes] = {ONNX_FILE: source, RUNNER_FILE: runner_path()}
    for location in graph.external_data:
        data_file = source.parent / location
        if not data_file.is_file():
            raise ModelImportError(
                f"`{source.name}` keeps weights in external file {location!r}, which is missing next to it"
            )
        files[location] = data_file
    repository = repo if isinstance(repo, ModelRepository) else ModelRepository(repo, create=True)
    extra = {"opset": graph.opset, "importer": "tritonkit.build.portable.import_onnx", **dict(manifest_extra or {})}
    manifest = Manifest.create(source, precision=precision, target="portable", extra=extra)
    return repository.write_version(name, config, files, manifest, version=version, force=force)
