"""Graph clean-up before any precision work, in the build's worker (:mod:`tritonkit.convert.isolate`):
old graphs brought up to what the rest of the chain reads, constant folding through Polygraphy (with
shape folding), the optional dynamic-batch rewrite, and the ONNX checker.

- **Initializers listed as graph inputs** (IR 3, what old exporters wrote: every weight is also an
  input) are dropped from the inputs, and the IR version raised to what the opset needs, so constant
  folding and the checker treat the weights as constants (an IR-3 graph whose initializers are no
  longer inputs fails ``onnx.checker``: "in initializer but not in graph input").
- **Opsets below** ``min_opset`` are upgraded to :data:`UPGRADE_OPSET` with ``onnx.version_converter``
  (what the user would otherwise do by hand); a graph the converter cannot take is one line naming
  the command to run.
- **Dynamic batch** (``source.dynamic_batch``): a first axis fixed at N on every input and output
  becomes ``batch``, and so does a leading N in constant ``Reshape`` shapes (``[1, 2048]`` → ``[0,
  2048]``, 0 copying the input's axis). The rewrite stands only if the rewritten graph, run on two
  samples at once, gives what the original gives for each alone; otherwise one line says it cannot.
- **Dynamic axes stay dynamic**: Polygraphy's folding uses ONNX Runtime's symbolic shape inference,
  which (ONNX Runtime 1.30) merged an ``nn.TransformerEncoder``'s ``[batch, sequence]`` input with
  its 512 positions into ``[512, 512]``. A fold that fixes an input or output axis is redone without
  ONNX Runtime's shape inference, and dropped if it still does (:func:`io_shape_changes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from numpy.typing import NDArray
from onnx import numpy_helper

from tritonkit.convert import isolate
from tritonkit.errors import ModelImportError

__all__ = ["UPGRADE_OPSET", "io_shape_changes", "opset_of", "sanitize_onnx"]

#: The opset an older graph is converted to (the chain's minimum for a fresh export).
UPGRADE_OPSET = 17
_DYNAMIC_DIM = 4  # size given to a graph's other dynamic axes when checking the batch rewrite


def opset_of(model: object) -> int:
    """The default-domain opset of an ``onnx.ModelProto``."""
    for entry in getattr(model, "opset_import", []):
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 0


def _drop_initializer_inputs(model: Any) -> int:
    """Remove initializers from ``graph.input``; return how many were listed there."""
    weights = {init.name for init in model.graph.initializer}
    kept = [value for value in model.graph.input if value.name not in weights]
    dropped = len(model.graph.input) - len(kept)
    if dropped:
        del model.graph.input[:]
        model.graph.input.extend(kept)
    return dropped


def _upgrade(model: Any, name: str, opset: int) -> Any:
    from onnx import version_converter  # noqa: PLC0415 (only old graphs need it)

    try:
        return version_converter.convert_version(model, UPGRADE_OPSET)
    except Exception as exc:
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelImportError(
            f"`{name}` uses opset {opset} and onnx.version_converter cannot upgrade it to {UPGRADE_OPSET} "
            f"({line[:200]}); re-export it at opset >= {UPGRADE_OPSET}"
        ) from None


def _fixed_batch(model: Any) -> int | None:
    """N when every input and output has a first axis fixed at the same N, else None."""
    sizes = set()
    for value in (*model.graph.input, *model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if not dims or not dims[0].HasField("dim_value"):
            return None
        sizes.add(int(dims[0].dim_value))
    return sizes.pop() if len(sizes) == 1 else None


def _rewrite_batch(model: Any, batch: int) -> int:
    """Make the first axis dynamic; return how many constant Reshape shapes were rewritten."""
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    del model.graph.value_info[:]  # inferred shapes carry the old batch
    inits = {init.name: init for init in model.graph.initializer}
    rewritten = 0
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in inits:
            continue
        shape = numpy_helper.to_array(inits[node.input[1]]).copy()
        if shape.ndim == 1 and shape.size > 1 and int(shape[0]) == batch:
            shape[0] = 0  # copy the input's first axis: the batch
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
            rewritten += 1
    return rewritten


def _sample(value: Any, batch: int, rng: np.random.Generator) -> NDArray[Any]:
    from onnx.helper import tensor_dtype_to_np_dtype  # noqa: PLC0415 (onnx's own table)

    dtype = tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
    dims = [batch] + [
        int(d.dim_value) if d.HasField("dim_value") else _DYNAMIC_DIM
        for d in value.type.tensor_type.shape.dim[1:]
    ]
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(dims).astype(dtype)
    return np.zeros(dims, dtype=dtype)


def _check_batch_rewrite(original: Any, rewritten: Any, batch: int, name: str) -> None:
    """The rewritten graph on two batches at once must give the original's answer for each."""
    import onnxruntime  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)

    rng = np.random.default_rng(0)
    feeds = {v.name: _sample(v, 2 * batch, rng) for v in rewritten.graph.input}
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    try:
        whole = onnxruntime.InferenceSession(
            rewritten.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        together = whole.run(None, feeds)
    except Exception as exc:
        line = " ".join(str(exc).split())[:200]
        raise ModelImportError(
            f"`{name}` cannot take a dynamic batch: run on {2 * batch} samples it fails ({line}); "
            "build it without batching (`batching.max_batch_size: 0`) or re-export it with a dynamic first axis"
        ) from None
    single = onnxruntime.InferenceSession(
        original.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    halves = [single.run(None, {k: v[i * batch : (i + 1) * batch] for k, v in feeds.items()}) for i in (0, 1)]
    for index, output in enumerate(rewritten.graph.output):
        expected = np.concatenate([halves[0][index], halves[1][index]])
        if expected.shape != together[index].shape or not np.allclose(
            together[index], expected, rtol=1e-3, atol=1e-4
        ):
            raise ModelImportError(
                f"`{name}` cannot take a dynamic batch: output `{output.name}` on {2 * batch} samples differs "
                "from each sample run alone (the graph mixes samples or fixes the batch inside); build it "
                "without batching (`batching.max_batch_size: 0`) or re-export it with a dynamic first axis"
            )


def _dims(value: Any) -> list[str | int]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def io_shape_changes(before: Any, after: Any) -> list[str]:
    """Where ``after`` lost a dynamic axis ``before`` had: any axis of an input, or an output's first
    (batch) axis, as ``"`name` [batch, sequence] -> [512, 512]"`` (empty: none). Constant folding must
    never specialise the graph: the build checks data and plans batching on these shapes. An output's
    other axes may be resolved (a symbolic embedding width inferred as 384 is a fact, not a
    specialisation: with the inputs kept dynamic, what stays dynamic in the outputs stays so)."""
    old = {v.name: _dims(v) for v in (*before.graph.input, *before.graph.output)}
    inputs = {v.name for v in after.graph.input}
    changes = []
    for value in (*after.graph.input, *after.graph.output):
        dims = _dims(value)
        was = old.get(value.name)
        if was is None:
            continue
        pairs = list(zip(was, dims, strict=False))
        if value.name not in inputs:
            pairs = pairs[:1]
        if any(isinstance(a, str) and isinstance(b, int) for a, b in pairs):
            changes.append(f"`{value.name}` {was} -> {dims}")
    return changes


def _clean(src: Path, dest: Path, min_opset: int, dynamic_batch: bool) -> dict[str, Any]:
    """The clean-up itself (runs in the worker)."""
    import onnxruntime  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)
    from polygraphy.backend.onnx import fold_constants  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)
    from polygraphy.logger import G_LOGGER  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)

    try:
        model = onnx.load(str(src))
    except Exception as exc:  # DecodeError and friends from protobuf
        raise ModelImportError(f"{str(src)!r} is not a valid ONNX model ({type(exc).__name__})") from None
    opset = opset_of(model)
    details: dict[str, Any] = {"nodes_before": len(model.graph.node), "opset": opset}
    dropped = _drop_initializer_inputs(model)
    if dropped:
        details["initializer_inputs_dropped"] = dropped
    if model.ir_version < 4:  # IR 4 is the first whose initializers need not be inputs
        details["upgraded_from_ir"] = int(model.ir_version)
        model.ir_version = 4
    if opset < min_opset:
        model = _upgrade(model, src.name, opset)
        details.update(opset=UPGRADE_OPSET, upgraded_from_opset=opset)
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import))
    if model.ir_version < needed:
        details.setdefault("upgraded_from_ir", int(model.ir_version))
        model.ir_version = needed
    G_LOGGER.module_severity = G_LOGGER.ERROR  # Polygraphy's per-pass chatter is not the user's business
    onnxruntime.set_default_logger_severity(3)  # ORT's optimizer warnings during folding, likewise
    try:
        folded = fold_constants(model, num_passes=3, error_ok=False)
        changed = io_shape_changes(model, folded)
        if changed:  # ONNX Runtime's symbolic shape inference merged a dynamic axis with a size
            details["fold_without_onnxruntime_shapes"] = changed[:4]
            folded = fold_constants(
                model, num_passes=3, error_ok=False, allow_onnxruntime_shape_inference=False
            )
        if io_shape_changes(model, folded):
            details["fold_skipped"] = io_shape_changes(model, folded)[:4]
            folded = model
        onnx.checker.check_model(folded)
    except Exception as exc:
        raise ModelImportError(f"graph clean-up of `{src.name}` failed: {str(exc).splitlines()[0]}") from None
    batch = _fixed_batch(folded) if dynamic_batch else None
    if batch is not None:
        rewritten = onnx.ModelProto()
        rewritten.CopyFrom(folded)
        reshapes = _rewrite_batch(rewritten, batch)
        _check_batch_rewrite(folded, rewritten, batch, src.name)
        folded = rewritten
        details["dynamic_batch"] = {"was": batch, "reshapes_rewritten": reshapes}
    onnx.save(folded, str(dest))
    details["nodes_after"] = len(folded.graph.node)
    return details


def sanitize_onnx(
    source: str | Path, dest: str | Path, *, min_opset: int = 13, dynamic_batch: bool = False
) -> dict[str, Any]:
    """Clean ``source`` up into ``dest`` in the build's worker (module docstring); return what was
    done, for the manifest. ModelImportError when the file is missing, not ONNX, an opset the
    converter cannot upgrade, or (``dynamic_batch``) a graph that cannot take a dynamic batch."""
    src = Path(source)
    if not src.is_file():
        raise ModelImportError(f"ONNX source not found: {str(src)!r}; expected an existing .onnx file")
    return isolate.run("graph clean-up", _clean, src, Path(dest), min_opset, dynamic_batch)
