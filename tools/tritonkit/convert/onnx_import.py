"""The as-is import preset of the build pipeline: any ONNX file as one portable FP32 version,
served exactly as given (``tritonkit build --onnx FILE``).

:func:`import_spec` is the preset (a :class:`~tritonkit.convert.spec.buildspec.BuildSpec` with the file as
source, target portable, precision fp32: nothing to convert, so no accuracy gate);
:func:`import_onnx` is the library call that builds it with
:func:`tritonkit.convert.pipeline.build_from_spec`. The config decisions are
:func:`tritonkit.convert.targets.portable_target.graph_config`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Unpack

from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.spec.buildspec import BuildSpec, parse_spec
from tritonkit.convert.targets.portable_target import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_QUEUE_DELAY_US,
    PortableSettings,
    check_settings,
)
from tritonkit.repository.store import ModelRepository

__all__ = ["DEFAULT_MAX_BATCH_SIZE", "DEFAULT_MAX_QUEUE_DELAY_US", "import_onnx", "import_spec"]


def import_spec(onnx_path: str | os.PathLike[str], name: str, **settings: Any) -> BuildSpec:
    """The spec that imports ``onnx_path`` as model ``name``, with spec ``settings`` over the preset.

    The max batch size is the graph's (64 when every input and output has a dynamic first axis,
    else 0) unless ``settings`` give ``batching.max_batch_size``.
    """
    data: dict[str, Any] = {
        "name": name,
        "source": {"onnx": str(Path(onnx_path).resolve())},
        "target": "portable",
        "precisions": ["fp32"],
        "batching": {"max_batch_size": None},
    }
    for key, value in settings.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return parse_spec(data, base_dir=Path.cwd(), as_is=True)


def import_onnx(
    onnx_path: str | os.PathLike[str],
    repo: ModelRepository | str | os.PathLike[str],
    name: str,
    *,
    version: int | None = None,
    force: bool = False,
    **settings: Unpack[PortableSettings],
) -> Path:
    """Write ``<repo>/<name>/<version>/`` serving ``onnx_path`` with the portable runner; return its path.

    Everything is checked (name, graph, config values) before anything is written; the version is
    written atomically. ``parameters`` are extra runner parameters (see ``backends/runners/onnx_runner.py``)
    merged over the defaults.
    """
    # The library call keeps its own argument names in errors (`instance_count`, not `instances.count`).
    max_batch_size, instance_count, instance_kind, max_queue_delay_us, parameters = check_settings(settings)
    spec = import_spec(
        onnx_path,
        name,
        batching={"max_batch_size": max_batch_size, "max_queue_delay_us": max_queue_delay_us},
        instances={"count": instance_count, "kind": instance_kind},
        portable={"parameters": parameters},
    )
    root = repo if isinstance(repo, ModelRepository) else Path(repo)
    (result,) = build_from_spec(spec, root, version=version, force=force)
    return result.path
