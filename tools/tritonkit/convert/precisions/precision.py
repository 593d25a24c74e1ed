"""Precisions of an ONNX model: FP16 (float16 conversion, FP32 I/O kept on request) and INT8 by
explicit quantization (a Q/DQ model calibrated with ONNX Runtime's ``quantize_static``).

INT8 is the INT8+FP16 hybrid: only the op types asked for are quantized, and nodes matching the
``exclude_nodes`` patterns or ``exclude_op_types`` stay at the higher precision. MatMuls between two
activations (attention scores) are never quantized: they carry no weights, are where transformer
accuracy goes first, and per-tensor activation scales suit them worst. Quantization is symmetric
(zero point 0) for activations and weights because that is the only Q/DQ form TensorRT accepts.
Biases differ by target (``quantize_bias``): for ONNX Runtime (the portable and onnxruntime
targets) ONNX Runtime's Gemm/Conv quantization stores each bias as INT32 behind a DequantizeLinear;
for TensorRT the bias stays a float initializer (``QuantizeBias: False``), because TensorRT's
DequantizeLinear takes only quantized types (onnx-tensorrt's operator table: INT8, FP8, INT4;
``IDequantizeLayer``: input INT8, FP8 or INT4), so an INT32 bias DequantizeLinear is refused when the
network is parsed. That bias-float Q/DQ file, gated like every precision, is what TensorRT <= 10
builds; :func:`int32_dequantize_nodes` finds any INT32 DequantizeLinear left in a graph.

:func:`qdq_to_fp16` makes that Q/DQ model's *FP16-base* twin for strongly typed TensorRT networks
(TensorRT 11 has no other kind). In a strongly typed network the ONNX parser gives each
DequantizeLinear the output type of its scale and checks nothing else (onnx-tensorrt
``QuantDequantLinearHelper``: FP32, FP16 and BF16 scales are accepted; below opset 19 a
QuantizeLinear scale is cast to the input's type, from 19 on ONNX lets scale and input be float16
together). With FP32 scales every quantized layer hands FP32 to the next one and the unquantized
layers run in FP32; with FP16 scales on an FP16 graph they run in FP16, as the TensorRT <= 10
INT8 + FP16 flags made them. The conversion (:func:`qdq_to_fp16`): the INT32 bias
DequantizeLinear nodes of ONNX Runtime's Gemm/Conv quantization are folded into float constants
(the parser's DequantizeLinear takes INT8, FP8 and INT4 only, and a bias scale, the product of two
scales, is where float16 would underflow); the graph is brought to opset 19; the project's FP16
conversion turns every float tensor, scales included, into float16, never blocking a Q/DQ node.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tritonkit.convert import isolate
from tritonkit.convert.inputs.data import Feeds
from tritonkit.convert.spec.options import CALIBRATION_METHODS, Fp16Options, Int8Options
from tritonkit.errors import BuildError, CalibrationError

__all__ = [
    "INT8_COMPUTE_OPS",
    "QDQ_FP16_OPSET",
    "UnsupportedOpError",
    "activation_scales",
    "int32_dequantize_nodes",
    "qdq_to_fp16",
    "quantize_int8",
    "to_fp16",
    "transposes_into_matmul",
]

#: The first opset whose QuantizeLinear/DequantizeLinear take float16 inputs and scales.
QDQ_FP16_OPSET = 19
_QDQ = ("QuantizeLinear", "DequantizeLinear")
#: Op types with INT8 kernels (TensorRT and ORT): quantizing anything else only adds Q/DQ pairs.
INT8_COMPUTE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


class UnsupportedOpError(BuildError):
    """The chosen precision cannot be applied to the model's ops."""


def to_fp16(source: str | Path, dest: str | Path, options: Fp16Options | None = None) -> dict[str, Any]:
    """Convert ``source`` to float16 weights and compute (see :class:`Fp16Options`).
    Runs in the build's worker (:mod:`tritonkit.convert.isolate`)."""
    return _fp16_in_worker("fp16 conversion", _to_fp16, source, dest, options)


def _fp16_in_worker(
    step: str,
    work: Callable[..., dict[str, Any]],
    source: str | Path,
    dest: str | Path,
    options: Fp16Options | None,
) -> dict[str, Any]:
    o = options or Fp16Options()
    return isolate.run(
        step, work, Path(source), Path(dest), o.keep_io_types, list(o.op_block_list), list(o.node_block_list)
    )


def transposes_into_matmul(model: Any) -> list[str]:
    """Names of the Transpose nodes whose output feeds a MatMul (nameless ones are named here).

    ONNX Runtime's CPU session creation segfaults (its NchwcTransformer, seen with 1.30 and 1.32) on
    a float16 Transpose followed by a MatMul: the pattern ``nn.MultiheadAttention`` exports to (ViT,
    ``nn.TransformerEncoder``). The FP16 conversion keeps these Transposes in float32 (a Cast on each
    side, exact), which ONNX Runtime loads, instead of a graph that crashes the gate and the server."""
    into_matmul = {i for n in model.graph.node if n.op_type == "MatMul" for i in n.input}
    names = []
    for index, node in enumerate(model.graph.node):
        if node.op_type == "Transpose" and any(o in into_matmul for o in node.output):
            if not node.name:
                node.name = f"tritonkit_transpose_{index}"
            names.append(node.name)
    return names


def _to_fp16(
    source: Path, dest: Path, keep_io_types: bool, op_block_list: list[str], node_block_list: list[str]
) -> dict[str, Any]:
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)

    blocked = sorted(set(DEFAULT_OP_BLOCK_LIST) | set(op_block_list))
    graph = onnx.load(str(source))
    kept_fp32 = [n for n in transposes_into_matmul(graph) if n not in node_block_list]
    try:
        model = convert_float_to_float16(
            graph,
            keep_io_types=keep_io_types,
            op_block_list=blocked,
            node_block_list=[*node_block_list, *kept_fp32] or None,
        )
    except Exception as exc:
        raise BuildError(
            f"FP16 conversion failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    # The converter appends the I/O Casts at the end of the node list; ONNX requires topological order.
    from onnxruntime.transformers.onnx_model import OnnxModel  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)

    wrapper = OnnxModel(model)
    wrapper.topological_sort()
    onnx.save(wrapper.model, str(dest))
    details: dict[str, Any] = {
        "keep_io_types": keep_io_types,
        "op_block_list": list(op_block_list),
        "node_block_list": list(node_block_list),
    }
    if kept_fp32:
        details["transposes_kept_fp32"] = len(kept_fp32)  # see transposes_into_matmul
    return details


def _weight_inputs(graph: Any) -> set[str]:
    return {init.name for init in graph.initializer}


def select_nodes(model: Any, options: Int8Options) -> tuple[list[str], list[str]]:
    """(nodes to quantize, nodes kept at higher precision) among the INT8-capable op types asked for."""
    from onnxruntime.quantization.registry import QDQRegistry  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)

    unknown = [op for op in options.op_types if op not in QDQRegistry]
    if unknown:
        raise UnsupportedOpError(
            f"int8 `op_types` {unknown} have no Q/DQ quantizer in ONNX Runtime; "
            f"expected some of {', '.join(INT8_COMPUTE_OPS)}"
        )
    patterns = [re.compile(p) for p in options.exclude_nodes]
    weights = _weight_inputs(model.graph)
    chosen: list[str] = []
    kept: list[str] = []
    for node in model.graph.node:
        if node.op_type not in options.op_types:
            continue
        excluded = (
            node.op_type in options.exclude_op_types
            or any(p.search(node.name) for p in patterns)
            or (node.op_type == "MatMul" and not any(i in weights for i in node.input))
        )
        (kept if excluded else chosen).append(node.name)
    compute = [n for n in chosen if _op_of(model, n) in INT8_COMPUTE_OPS]
    if not compute:
        present = sorted({n.op_type for n in model.graph.node})
        raise UnsupportedOpError(
            "int8: no node with an INT8 kernel is left to quantize; expected a weighted "
            f"{'/'.join(INT8_COMPUTE_OPS)} not excluded, got op types {present}"
        )
    return chosen, kept


def _op_of(model: Any, name: str) -> str:
    for node in model.graph.node:
        if node.name == name:
            return str(node.op_type)
    return ""


class _Reader:
    """ONNX Runtime ``CalibrationDataReader`` over a list of feed dicts."""

    def __init__(self, feeds: Sequence[Feeds]) -> None:
        self._it = iter(feeds)

    def get_next(self) -> Feeds | None:
        return next(self._it, None)

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Feeds:
        item = self.get_next()
        if item is None:
            raise StopIteration
        return item


#: Histogram bins of entropy and percentile calibration. ONNX Runtime's quantize_static cannot pass
#: them, and its entropy default (128 bins searched for 128 quantized bins) leaves one candidate
#: threshold, the full range: the same model as MinMax. 2048 bins, 128 quantized (TensorRT's
#: entropy calibrator's numbers), give the KL search 961 candidate thresholds.
HISTOGRAM_BINS = 2048
QUANTIZED_BINS = 128


def quantize_int8(
    source: str | Path,
    dest: str | Path,
    calibration: Sequence[Feeds],
    options: Int8Options,
    *,
    quantize_bias: bool = True,
) -> dict[str, Any]:
    """Write the Q/DQ model of ``source`` calibrated on ``calibration`` to ``dest``; return details.

    ``quantize_bias``: Gemm/Conv biases as INT32 behind a DequantizeLinear (ONNX Runtime's default);
    False keeps them float, the form TensorRT parses (module docstring). The work runs in the build's
    worker (:mod:`tritonkit.convert.isolate`).

    Raises CalibrationError for too few samples or batch shapes the method cannot use, and
    UnsupportedOpError when nothing INT8-capable remains to quantize.
    """
    if options.method not in CALIBRATION_METHODS:
        raise CalibrationError(
            f"calibration method must be one of {', '.join(CALIBRATION_METHODS)}; got {options.method!r}"
        )
    samples = sum(next(iter(f.values())).shape[0] for f in calibration) if calibration else 0
    if samples < options.min_samples:
        raise CalibrationError(
            f"too few calibration samples: expected at least {options.min_samples}, got {samples}"
        )
    if options.method != "minmax":
        shapes = {tuple((k, v.shape[1:]) for k, v in sorted(f.items())) for f in calibration}
        if len(shapes) > 1:
            raise CalibrationError(
                f"{options.method} calibration collects histograms and needs equally shaped samples; "
                f"got {len(shapes)} different shapes (pad the calibration data)"
            )
    details = isolate.run(
        "int8 calibration and quantization",
        _quantize,
        Path(source),
        Path(dest),
        list(calibration),
        options,
        quantize_bias,
    )
    details["calibration_samples"] = samples
    return details


class _OneBatch(_Reader):
    """The first batch only: quantize_static's own MinMax pass, whose ranges the overrides replace."""

    def __init__(self, feeds: Sequence[Feeds]) -> None:
        super().__init__(list(feeds)[:1])


def _histogram_ranges(
    prepared: Path, calibration: Sequence[Feeds], options: Int8Options
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Activation ranges by entropy or percentile calibration with :data:`HISTOGRAM_BINS`, as
    TensorQuantOverrides, and how far they clip the observed min/max."""
    from onnxruntime.quantization import CalibrationMethod  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)
    from onnxruntime.quantization.calibrate import create_calibrator  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)

    method = CalibrationMethod.Entropy if options.method == "entropy" else CalibrationMethod.Percentile
    extra: dict[str, Any] = {"num_bins": HISTOGRAM_BINS, "symmetric": True}
    if options.method == "entropy":
        extra["num_quantized_bins"] = QUANTIZED_BINS
    else:
        extra["percentile"] = options.percentile
    with tempfile.TemporaryDirectory(prefix="tritonkit-calibrate-") as tmp:
        calibrator = create_calibrator(
            prepared,
            list(options.op_types),
            augmented_model_path=str(Path(tmp) / "augmented.onnx"),
            calibrate_method=method,
            extra_options=extra,
        )
        calibrator.collect_data(_Reader(calibration))
        ranges = calibrator.compute_data()
        observed = calibrator.collector.histogram_dict  # (hist, edges, min, max, ...) per tensor
    overrides: dict[str, Any] = {}
    ratios = []
    for name in ranges:
        low, high = (float(v) for v in ranges.data[name].range_value)
        overrides[name] = [{"rmin": np.array(low, np.float32), "rmax": np.array(high, np.float32)}]
        seen = max(abs(float(observed[name][2])), abs(float(observed[name][3])))
        if seen > 0:
            ratios.append(max(abs(low), abs(high)) / seen)
    clipping = {
        "histogram_bins": HISTOGRAM_BINS,
        "tensors": len(ratios),
        "tensors_clipped": sum(1 for r in ratios if r < 0.999),
        "median_range_vs_minmax": round(float(np.median(ratios)), 4) if ratios else None,
    }
    if options.method == "entropy":
        clipping["quantized_bins"] = QUANTIZED_BINS
    return overrides, clipping


def activation_scales(model: Any) -> dict[str, Any]:
    """What calibration produced: the activation (non-initializer) QuantizeLinear scales of a Q/DQ
    model, summarised, and a digest of all of them, so two methods can be told apart in build.json."""
    inits = {i.name: i for i in model.graph.initializer}
    scales = []
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits and node.input[1] in inits:
            scales.append(float(numpy_helper.to_array(inits[node.input[1]]).reshape(-1)[0]))
    digest = hashlib.sha256(np.asarray(scales, dtype=np.float64).tobytes()).hexdigest()[:16]
    if not scales:
        return {"activation_scales": 0, "digest": digest}
    values = np.asarray(scales)
    return {
        "activation_scales": len(scales),
        "scale_min": float(values.min()),
        "scale_median": float(np.median(values)),
        "scale_max": float(values.max()),
        "digest": digest,
    }


def _quantize(
    source: Path, dest: Path, calibration: list[Feeds], options: Int8Options, quantize_bias: bool
) -> dict[str, Any]:
    """The quantization itself (runs in the worker)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)
    from onnxruntime.quantization.shape_inference import quant_pre_process  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)

    with tempfile.TemporaryDirectory(prefix="tritonkit-int8-") as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        try:
            # Symbolic shape inference fails on transformer exports; ONNX shape inference suffices.
            quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        except Exception as exc:
            raise BuildError(f"int8 pre-processing failed: {str(exc).splitlines()[0]}") from None
        model = onnx.load(str(prepared))
        chosen, kept = select_nodes(model, options)
        excluded = [n.name for n in model.graph.node if n.op_type in options.op_types and n.name in kept]
        extra: dict[str, Any] = {
            "ActivationSymmetric": True,
            "WeightSymmetric": True,
            "QuantizeBias": quantize_bias,
        }
        reader: _Reader = _Reader(calibration)
        clipping: dict[str, Any] = {}
        try:
            if options.method != "minmax":
                # quantize_static cannot pass histogram bins (module constants); the ranges of a
                # calibrator made here replace its own MinMax pass, which then needs one batch.
                extra["TensorQuantOverrides"], clipping = _histogram_ranges(prepared, calibration, options)
                reader = _OneBatch(calibration)
            quantize_static(
                str(prepared),
                str(dest),
                reader,
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=list(options.op_types),
                nodes_to_exclude=excluded,
                per_channel=options.per_channel,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
                extra_options=extra,
            )
        except (CalibrationError, BuildError):
            raise
        except Exception as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BuildError(f"int8 quantization failed: {text}") from None
    quantized = onnx.load(str(dest), load_external_data=False)
    qdq = sum(1 for n in quantized.graph.node if n.op_type == "QuantizeLinear")
    if qdq == 0:
        raise UnsupportedOpError(
            "int8: quantization produced no Q/DQ nodes; no op of the model was quantized"
        )
    return {
        "method": options.method,
        "calibration": {**activation_scales(quantized), **clipping},
        "per_channel": options.per_channel,
        "op_types": list(options.op_types),
        "quantized_nodes": len(chosen),
        "kept_higher_precision": len(kept),
        "exclude_nodes": list(options.exclude_nodes),
        "exclude_op_types": list(options.exclude_op_types),
        "quantize_linear_nodes": qdq,
        "symmetric": True,
        "format": "QDQ",
        "quantize_bias": quantize_bias,
        "int32_dequantize_nodes": len(int32_dequantize_nodes(quantized)),
    }


def int32_dequantize_nodes(model: Any) -> list[str]:
    """Names of the DequantizeLinear nodes of ``model`` (a ModelProto) whose input is INT32: what
    ONNX Runtime makes of a quantized bias, and what TensorRT's parser refuses."""
    types = {i.name: i.data_type for i in model.graph.initializer}
    types.update({v.name: v.type.tensor_type.elem_type for v in model.graph.value_info})
    types.update({v.name: v.type.tensor_type.elem_type for v in model.graph.input})
    for node in model.graph.node:
        if node.op_type == "Constant":
            types.update({o: a.t.data_type for o in node.output for a in node.attribute if a.name == "value"})
    return [
        n.name or n.output[0]
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and types.get(n.input[0]) == TensorProto.INT32
    ]


def _fold_int32_dequantize(model: Any) -> int:
    """Replace every DequantizeLinear of an INT32 initializer (ONNX Runtime's quantized biases) by
    the float constant it computes; return how many were folded."""
    inits = {i.name: i for i in model.graph.initializer}
    kept, folded = [], 0
    for node in model.graph.node:
        source = inits.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if source is None or source.data_type != TensorProto.INT32 or node.input[1] not in inits:
            kept.append(node)
            continue
        x = numpy_helper.to_array(source).astype(np.float64)
        scale = numpy_helper.to_array(inits[node.input[1]]).astype(np.float64)
        zero = inits.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        shift = numpy_helper.to_array(zero).astype(np.float64) if zero is not None else np.zeros(1)
        if scale.size > 1:  # per-axis: scale (and zero point) run along `axis`
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % max(x.ndim, 1)
            shape = [1] * x.ndim
            shape[axis] = -1
            scale, shift = scale.reshape(shape), shift.reshape(shape) if shift.size > 1 else shift
        value = ((x - shift) * scale).astype(np.float32)
        model.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        folded += 1
    del model.graph.node[:]
    model.graph.node.extend(kept)
    used = {name for n in model.graph.node for name in n.input} | {o.name for o in model.graph.output}
    alive = [i for i in model.graph.initializer if i.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(alive)
    return folded


def _float32_nodes(model: Any) -> list[str]:
    """Op types (one entry per node) that still compute in float32: the FP16 conversion's blocked
    nodes. Casts and the Q/DQ nodes themselves are not layers."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    types.update({v.name: v.type.tensor_type.elem_type for v in inferred.graph.output})
    return sorted(
        n.op_type
        for n in inferred.graph.node
        if n.op_type not in ("Cast", *_QDQ) and any(types.get(o) == TensorProto.FLOAT for o in n.output)
    )


def qdq_to_fp16(source: str | Path, dest: str | Path, options: Fp16Options | None = None) -> dict[str, Any]:
    """Write the FP16-base twin of the Q/DQ model ``source`` to ``dest`` (see the module
    docstring): float16 compute and float16 Q/DQ scales, FP32 I/O when ``keep_io_types``; the
    same INT8 weights, zero points and node set. BuildError when the result is not a valid model
    or a scale did not become float16. Runs in the build's worker."""
    return _fp16_in_worker("Q/DQ fp16-base conversion", _qdq_to_fp16, source, dest, options)


def _qdq_to_fp16(
    source: Path, dest: Path, keep_io_types: bool, op_block_list: list[str], node_block_list: list[str]
) -> dict[str, Any]:
    from onnx import version_converter  # noqa: PLC0415 (only this conversion needs it)
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)
    from onnxruntime.transformers.onnx_model import OnnxModel  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)

    model = onnx.load(str(source))
    qdq_names = {n.name for n in model.graph.node if n.op_type in _QDQ}
    if not qdq_names:
        raise BuildError(
            f"{Path(source).name} has no QuantizeLinear/DequantizeLinear node; expected a Q/DQ model"
        )
    folded = _fold_int32_dequantize(model)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    try:
        if opset < QDQ_FP16_OPSET:
            model = version_converter.convert_version(model, QDQ_FP16_OPSET)
        # Q/DQ nodes are never blocked: a blocked pair would keep its FP32 scale and FP32 output.
        model = convert_float_to_float16(
            model,
            keep_io_types=keep_io_types,
            op_block_list=sorted((set(DEFAULT_OP_BLOCK_LIST) | set(op_block_list)) - set(_QDQ)),
            node_block_list=sorted(set(node_block_list) - qdq_names) or None,
        )
        wrapper = OnnxModel(model)  # the converter appends its Casts last; ONNX wants topological order
        wrapper.topological_sort()
        model = wrapper.model
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BuildError(f"Q/DQ on FP16 conversion failed: {text}") from None
    inits = {i.name: i.data_type for i in model.graph.initializer}
    scales = [n.input[1] for n in model.graph.node if n.op_type in _QDQ]
    wrong = sorted({s for s in scales if inits.get(s) != TensorProto.FLOAT16})
    if wrong:
        raise BuildError(
            f"Q/DQ on FP16: scales {wrong[:3]} are not float16 initializers; expected every scale float16"
        )
    onnx.save(model, str(dest))
    fp32 = _float32_nodes(model)
    return {
        "base": "fp16",
        "scale_type": "float16",
        "opset": max(opset, QDQ_FP16_OPSET),
        "keep_io_types": keep_io_types,
        "quantize_linear_nodes": sum(1 for n in model.graph.node if n.op_type == "QuantizeLinear"),
        "folded_int32_bias": folded,
        "fp32_nodes": {op: fp32.count(op) for op in sorted(set(fp32))},
    }
