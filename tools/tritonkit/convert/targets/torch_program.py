"""Versions that the embedded server runs on the GPU: a ``torch.export`` program (``model.pt2``)
served by ``backends/runners/torch_runner.py``, or an ONNX graph served by
``backends/runners/onnx_cuda_runner.py`` (ONNX Runtime's CUDA provider with I/O binding).

Owns exporting a torch module to a program at the plan's precision (an FP16 program is exported
from a half module, so the runner never casts weights and the graph's own constants agree), the
python-backend config for either runner (dynamic batching, ``KIND_GPU`` groups, runner parameters),
running a program (:func:`program_outputs`, for its comparison with the FP32 reference), and the
library writers :func:`write_torch_version` / :func:`write_onnx_gpu_version` that the benchmarks
use: a program below FP32 is judged by the build's gate (:mod:`tritonkit.convert.precisions.gates`) and every version goes
through the repository's writer, with its plan in build.json. Export runs on the CPU; the runner
moves the program to the GPU it is placed on.

Beside ``model.pt2`` a torch-runner version carries ``model.fx.pt``: the same graph as a plain
``torch.fx.GraphModule`` (flat positional inputs, the shape-guard call dropped) with its parameters and
input dtypes, saved with ``torch.save``. The runner loads it in about half a second where
``torch.export.load`` takes about four (it rebuilds every node's fake-tensor metadata, measured on the
H100 host for BERT-base): that is most of what a reload costs, and ``tritonkit tune`` reloads the model
for every config it tries. ``model.pt2`` stays the artifact of record (the accuracy gate runs it) and
the runner falls back to it when the fast file is missing. Beside ``model.py`` it carries the runner's
helpers ``gpu_requests.py`` and ``host_stats.py`` (its host-time statistics and profiler of executes).
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np
from numpy.typing import NDArray

from tritonkit.backends.native import BACKEND as NATIVE_BACKEND
from tritonkit.backends.native import PROGRAM as NATIVE_PROGRAM
from tritonkit.backends.native import export_program as export_native
from tritonkit.backends.native import trace_device
from tritonkit.backends.runners import GPU_REQUESTS, HOST_STATS, load_runner, runner_path
from tritonkit.backends.runners.shape_buckets import Buckets
from tritonkit.config import DynamicBatching, ModelConfig, TensorConfig
from tritonkit.config.dtypes import lookup_dtype
from tritonkit.convert.graph import torch_io
from tritonkit.convert.precisions.gates import Comparison, gate_all
from tritonkit.convert.spec.buildspec import AccuracySpec
from tritonkit.convert.spec.execution import ExecutionPlan, method_buckets, preferred_sizes
from tritonkit.convert.targets.buckets import apply_buckets
from tritonkit.errors import BuildError
from tritonkit.repository import Manifest, ModelRepository, VersionWrite, validate_model_name
from tritonkit.repository.onnx_io import read_io

__all__ = [
    "FAST_FILE",
    "ONNX_CUDA_RUNNER",
    "PROGRAM_FILE",
    "TORCH_RUNNER",
    "NativeExportError",
    "export_program",
    "gpu_config",
    "half_module",
    "onnx_gpu_version",
    "program_outputs",
    "torch_version",
    "write_onnx_gpu_version",
    "write_torch_version",
]

PROGRAM_FILE = "model.pt2"
FAST_FILE = "model.fx.pt"
TORCH_RUNNER = "torch_runner"
ONNX_CUDA_RUNNER = "onnx_cuda_runner"
_TRITON_DTYPES = {
    "torch.float32": "FP32",
    "torch.float16": "FP32",  # FP16 programs answer in FP32: the runner casts inside the graph
    "torch.bfloat16": "FP32",
    "torch.float64": "FP64",
    "torch.int64": "INT64",
    "torch.int32": "INT32",
    "torch.int8": "INT8",
    "torch.uint8": "UINT8",
    "torch.bool": "BOOL",
}


def _triton_dtype(dtype: object) -> str:
    return lookup_dtype(
        _TRITON_DTYPES, str(dtype), BuildError, f"tensor dtype {dtype} has no Triton type here"
    )


def _wire(datatype: str, half_io: bool) -> str:
    """A tensor's Triton type in the config: FP32 becomes FP16 where float tensors travel as FP16."""
    return "FP16" if half_io and datatype == "FP32" else datatype


#: Module attributes ``nn.Module`` keeps for itself: parameters, buffers and submodules are
#: converted by ``.half()``; the hook dictionaries hold no state of the model's.
_MODULE_OWN = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"})


def _held_to(value: Any, dtype: Any, depth: int = 0) -> Any:
    """``value`` with every floating tensor in it (nested dicts, lists, tuples) cast to ``dtype``;
    dicts and lists changed in place (a module may hold on to them), tuples rebuilt."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if depth >= 4 or isinstance(value, torch.nn.Module):
        return value
    if isinstance(value, dict):
        for key, item in list(value.items()):
            value[key] = _held_to(item, dtype, depth + 1)
    elif isinstance(value, list):
        value[:] = [_held_to(item, dtype, depth + 1) for item in value]
    elif isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_held_to(item, dtype, depth + 1) for item in value)
    return value


def half_module(module: Any) -> Any:
    """A half copy of ``module`` that holds no FP32 tensor: ``.half()`` on a deep copy (parameters and
    buffers), then every floating tensor each submodule keeps in a plain attribute (a cache an earlier
    FP32 run filled, in a dict, list or tuple) cast to FP16. The caller's module is left as it was."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    half = copy.deepcopy(module).half()
    for sub in half.modules():
        for name, value in list(vars(sub).items()):
            if name in _MODULE_OWN or name.endswith("_hooks"):
                continue
            converted = _held_to(value, torch.float16)
            if converted is not value:
                object.__setattr__(sub, name, converted)
    return half


def export_program(
    module: Any,
    example_inputs: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    precision: str = "fp32",
    max_batch_size: int = 64,
    output_names: Sequence[str] | None = None,
    dynamic_axes: Mapping[str, Mapping[int, tuple[str, int]]] | None = None,
) -> list[tuple[str, str, list[int]]]:
    """Export ``module`` (called with ``example_inputs`` as positional arguments, batch axis first) to a
    program at ``precision`` whose batch axis is dynamic up to ``max_batch_size``; return the outputs
    as (triton dtype, name placeholder, non-batch dims) read from running it once.

    The examples' batch should be >= 2 (torch.export specialises size-1 axes). ``dynamic_axes``:
    input name -> {axis: (axis name, longest length)}, axes past the batch kept dynamic up to their
    longest (a model's shape buckets: one program serves every bucket).
    """
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if precision not in ("fp32", "fp16"):
        raise BuildError(f"program precision must be fp32 or fp16; got {precision!r}")
    inputs = dict(example_inputs)
    module = torch_io.adapt(module.eval(), list(inputs.values()), list(inputs), output_names)
    if precision == "fp16":
        # A copy: the caller's module stays FP32 (it may be exported again or be the reference). `.half()`
        # converts parameters and buffers; what an earlier FP32 run left in plain attributes (LeViT's
        # attention-bias cache, rotary tables, anchor grids) is converted too.
        module = half_module(module)
        inputs = {k: v.half() if v.is_floating_point() else v for k, v in inputs.items()}
    batch = torch.export.Dim("batch", min=1, max=max(max_batch_size, 2))
    # Positional, in the order given: the runner feeds the config's inputs in that order.
    args = tuple(inputs.values())
    dims: dict[str, Any] = {}
    per_input = []
    for name in inputs:
        axes: dict[int, Any] = {0: batch}
        for axis, (axis_name, longest) in (dynamic_axes or {}).get(name, {}).items():
            dims.setdefault(axis_name, torch.export.Dim(axis_name, min=1, max=max(longest, 2)))
            axes[axis] = dims[axis_name]
        per_input.append(axes)
    dynamic = torch_io.dynamic_shapes(module, per_input)
    try:
        with warnings.catch_warnings():  # tracing warnings (nn.LSTM's) must not turn into failures
            warnings.simplefilter("ignore")
            program = torch.export.export(module, args=args, dynamic_shapes=dynamic, strict=False)
    except Exception as exc:  # torch's own errors are long; the first line names the cause
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BuildError(f"torch.export failed: {first}") from None
    try:
        with torch.inference_mode():
            out = program.module()(*args)
    except Exception as exc:  # a half module that casts to float32 inside fails here, not in export
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BuildError(
            f"the {precision} program does not run on its example inputs: {first}; expected a module that "
            "runs in that precision (one casting to float32 inside cannot run as a half module: serve "
            "it with serving.engine: onnxruntime or at fp32)"
        ) from None
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(target))
    save_fast_module(program, target.with_name(FAST_FILE), [a.dtype for a in args])
    return [(_triton_dtype(o.dtype), f"OUTPUT_{i}", list(o.shape[1:])) for i, o in enumerate(outs)]


def save_fast_module(program: Any, path: Path, input_dtypes: Sequence[Any]) -> None:
    """Write the program's module as a plain ``torch.fx.GraphModule`` that loads fast (see the module
    docstring): flat positional inputs and outputs, the guard call dropped, parameters kept. A file that
    does not load back is removed (the runner then loads ``model.pt2``)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    module = program.module()
    graph = torch.fx.Graph()  # default codegen: flat positional in, a tuple out, what the runner calls
    graph.output(graph.graph_copy(module.graph, {}))
    for node in list(graph.nodes):
        if node.op == "call_module" and not node.users:  # the input-shape guard of the unlifted module
            graph.erase_node(node)
    root: dict[str, Any] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            raise BuildError(f"the exported graph calls submodule {node.target!r}; expected a flat graph")
        if node.op == "get_attr":
            value: Any = module
            for part in str(node.target).split("."):
                value = getattr(value, part)
            root[str(node.target)] = value
    fast = torch.fx.GraphModule(root, graph)
    torch.save(
        {"module": fast, "input_dtypes": [str(d).removeprefix("torch.") for d in input_dtypes]}, str(path)
    )
    try:  # torch.load re-traces the code: a list of symbolic sizes passed to an op (nn.LSTM's zeros) fails
        torch.load(str(path), map_location="cpu", weights_only=False)  # the file just written
    except Exception:  # any failure: the runner loads model.pt2 instead
        path.unlink()


class Batching(TypedDict, total=False):
    """The batcher of a GPU version: its queue delay (default 500 us) and whether to batch
    dynamically at all (default yes)."""

    max_queue_delay_us: int
    dynamic_batching: bool


class VersionOptions(Batching, total=False):
    """Keyword options of the version writers: :class:`Batching`'s, the version number (default:
    the next one), whether to replace an existing version (default no) and, for an FP16 program,
    whether its float inputs and outputs travel as FP16 (``half_io``, default no: FP32)."""

    version: int | None
    force: bool
    half_io: bool
    #: a torch version's shape buckets (its dynamic non-batch axes, see ``convert.targets.buckets``)
    buckets: Buckets | None


def _batching(options: VersionOptions) -> Batching:
    batching = Batching()
    if "max_queue_delay_us" in options:
        batching["max_queue_delay_us"] = options["max_queue_delay_us"]
    if "dynamic_batching" in options:
        batching["dynamic_batching"] = options["dynamic_batching"]
    return batching


def gpu_config(
    name: str,
    inputs: Sequence[TensorConfig],
    outputs: Sequence[TensorConfig],
    plan: ExecutionPlan,
    *,
    runner: str,
    max_batch_size: int,
    max_queue_delay_us: int = 500,
    dynamic_batching: bool = True,
    extra_parameters: Mapping[str, str] | None = None,
) -> ModelConfig:
    """The python-backend config for ``runner`` under ``plan`` (dims without the batch axis)."""
    params = {"runner": runner, **plan.runner_parameters(), **dict(extra_parameters or {})}
    batching = dynamic_batching and max_batch_size > 0
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=list(inputs),
        outputs=list(outputs),
        # Preferred sizes are the runner's buckets: batches formed at a bucket waste no padded rows
        # (a batch of 162 would run as 256), and a lone request does not wait the delay.
        dynamic_batching=DynamicBatching(
            max_queue_delay_microseconds=max_queue_delay_us,
            preferred_batch_size=preferred_sizes(plan.batch_buckets, max_batch_size),
        )
        if batching
        else None,
        instance_groups=list(plan.instance_groups),
        parameters=params,
    )


class NativeExportError(BuildError):
    """The program could not be traced to the native runner's ``model.ts`` (``runner: auto`` then
    serves it with the python runner)."""


def native_program(
    program: Path, config: ModelConfig, max_batch_size: int, buckets: Buckets | None = None
) -> Path:
    """``model.ts`` beside ``program`` for the native runner: the program as the torch runner loads it,
    traced for every bucket a tuned config may name (on the first GPU where there is one), and for
    every shape bucket of ``buckets`` with each."""
    device = trace_device()
    module, dtypes = load_runner(TORCH_RUNNER).load_program(str(program), device)
    try:
        return export_native(
            program.parent, module, dtypes, config, method_buckets(max_batch_size), device, buckets
        )
    except Exception as exc:  # a refusal or whatever torch.jit.trace raises on this program
        line = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise NativeExportError(f"tracing the program for the native runner failed: {line}") from exc


def _dims(shape: Sequence[int], dynamic: Mapping[int, str]) -> list[int]:
    """Config dims (batch axis dropped) of a tensor of ``shape``, -1 on its ``dynamic`` axes."""
    return [-1 if axis in dynamic else int(d) for axis, d in enumerate(shape) if axis > 0]


def torch_version(
    name: str,
    module: Any,
    example_inputs: Mapping[str, Any],
    output_names: Sequence[str],
    plan: ExecutionPlan,
    program: Path,
    *,
    max_batch_size: int,
    half_io: bool = False,
    buckets: Buckets | None = None,
    **batching: Unpack[Batching],
) -> tuple[ModelConfig, dict[str, Path | bytes]]:
    """Export ``module`` to ``program`` (a path outside the repository) and return the config and the
    files of a torch-runner version serving it, for the caller to write.

    ``half_io`` (an FP16 program only; a spec's ``fp16.keep_io_types: false``): the config declares
    float inputs and outputs FP16, the program's own precision, so requests carry half the bytes and
    nothing is cast on the way in (a client casting FP32 to FP16 rounds exactly as the program's
    cast would); default FP32 in and out, as an FP16 ONNX graph or TensorRT engine keeps them."""
    validate_model_name(name)
    if plan.engine != "torch":
        raise BuildError(f"a torch-runner version needs a plan with engine torch; got {plan.engine}")
    if half_io and plan.precision != "fp16":
        raise BuildError(f"FP16 inputs and outputs need an fp16 program; got precision {plan.precision}")
    carried = buckets.inputs if buckets is not None else {}
    inputs = [
        TensorConfig(n, _wire(_triton_dtype(t.dtype), half_io), _dims(t.shape, carried.get(n, {})))
        for n, t in example_inputs.items()
    ]
    outs = export_program(
        module,
        example_inputs,
        program,
        precision=plan.precision,
        max_batch_size=max_batch_size,
        output_names=output_names,
        dynamic_axes={
            n: {a: (axis, buckets.longest(axis)) for a, axis in m.items()} for n, m in carried.items()
        }
        if buckets is not None
        else None,
    )
    if len(outs) != len(output_names):
        raise BuildError(f"module returns {len(outs)} outputs; {len(output_names)} output names given")
    cut = buckets.outputs if buckets is not None else {}
    outputs = [
        TensorConfig(n, _wire(dt, half_io), _dims((0, *dims), cut.get(n, {})))
        for n, (dt, _, dims) in zip(output_names, outs, strict=True)
    ]
    config = gpu_config(
        name,
        inputs,
        outputs,
        plan,
        runner=TORCH_RUNNER,
        max_batch_size=max_batch_size,
        extra_parameters={"program_file": PROGRAM_FILE},
        **batching,
    )
    fast = program.with_name(FAST_FILE)
    programs: dict[str, Path | bytes] = {
        PROGRAM_FILE: program,
        **({FAST_FILE: fast} if fast.is_file() else {}),
    }
    if plan.runner == "native":  # the C++ backend serves model.ts; the program stays for in-process use
        config.backend = NATIVE_BACKEND
        return config, {**programs, NATIVE_PROGRAM: native_program(program, config, max_batch_size, buckets)}
    return config, {
        **programs,
        "model.py": runner_path(TORCH_RUNNER),
        f"{GPU_REQUESTS}.py": runner_path(GPU_REQUESTS),
        f"{HOST_STATS}.py": runner_path(HOST_STATS),
    }


def onnx_gpu_version(
    onnx_path: str | os.PathLike[str],
    name: str,
    plan: ExecutionPlan,
    *,
    max_batch_size: int,
    **batching: Unpack[Batching],
) -> tuple[ModelConfig, dict[str, Path | bytes]]:
    """The config and files of a version serving an ONNX graph (batch axis dynamic) with the ONNX
    Runtime CUDA runner, for the caller to write."""
    validate_model_name(name)
    if plan.engine != "onnxruntime":
        raise BuildError(
            f"an ONNX CUDA-runner version needs a plan with engine onnxruntime; got {plan.engine}"
        )
    source = Path(onnx_path)
    graph = read_io(source)
    if max_batch_size > 0 and not graph.batch_dynamic:
        raise BuildError(f"`{source.name}` has a fixed batch axis; expected a dynamic first axis to batch")
    config = gpu_config(
        name,
        [TensorConfig(t.name, t.datatype, list(t.shape[1:])) for t in graph.inputs],
        [TensorConfig(t.name, t.datatype, list(t.shape[1:])) for t in graph.outputs],
        plan,
        runner=ONNX_CUDA_RUNNER,
        max_batch_size=max_batch_size,
        extra_parameters={"onnx_file": "model.onnx"},
        **batching,
    )
    return config, {
        "model.onnx": source,
        "model.py": runner_path(ONNX_CUDA_RUNNER),
        f"{GPU_REQUESTS}.py": runner_path(GPU_REQUESTS),
    }


def _module_check(
    name: str,
    module: Any,
    example_inputs: Mapping[str, Any],
    outputs: Sequence[str],
    plan: ExecutionPlan,
    program: Path,
) -> Comparison:
    """The program's first output and the FP32 module's, on the example inputs (a library write has
    no held-out set: the examples are what it has)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    inputs = list(example_inputs.values())
    with torch.inference_mode():
        out = torch_io.adapt(module.eval(), inputs, list(example_inputs), outputs)(*inputs)
    reference = (list(out) if isinstance(out, (tuple, list)) else [out])[0].float().cpu().numpy()
    feeds = [[t.detach().cpu().numpy() for t in example_inputs.values()]]
    candidate, device = program_outputs(program, feeds, len(reference), 0)
    runtime = f"torch.export-{device.split(':')[0]}"
    return Comparison("program", name, plan.precision, candidate, reference, outputs[0], runtime)


def write_torch_version(
    repo: ModelRepository | str | os.PathLike[str],
    name: str,
    module: Any,
    example_inputs: Mapping[str, Any],
    output_names: Sequence[str],
    plan: ExecutionPlan,
    *,
    max_batch_size: int,
    manifest_extra: Mapping[str, Any] | None = None,
    **options: Unpack[VersionOptions],
) -> Path:
    """Export ``module`` and write ``<repo>/<name>/<version>/`` (model.pt2, model.py, build.json).

    A program below FP32 is gated like a build's (:mod:`tritonkit.convert.precisions.gates`, the default FP16
    thresholds) against the FP32 module on ``example_inputs`` before anything is written.
    """
    with tempfile.TemporaryDirectory(prefix="tritonkit-export-") as tmp:
        program = Path(tmp) / PROGRAM_FILE
        config, files = torch_version(
            name,
            module,
            example_inputs,
            output_names,
            plan,
            program,
            max_batch_size=max_batch_size,
            half_io=options.get("half_io", False),
            buckets=options.get("buckets"),
            **_batching(options),
        )
        files = {**files, **apply_buckets(config, options.get("buckets"))}
        checks = (
            []
            if plan.precision == "fp32"
            else [_module_check(name, module, example_inputs, output_names, plan, program)]
        )
        (gated,) = gate_all(AccuracySpec(), [checks], None)
        return _write(
            repo, name, (config, files, program), plan, gated.records.get("program"), manifest_extra, options
        )


def write_onnx_gpu_version(
    onnx_path: str | os.PathLike[str],
    repo: ModelRepository | str | os.PathLike[str],
    name: str,
    plan: ExecutionPlan,
    *,
    max_batch_size: int,
    **options: Unpack[VersionOptions],
) -> Path:
    """Write a version serving an ONNX graph (batch axis dynamic), as given, with the ONNX Runtime
    CUDA runner (nothing was converted: there is nothing to gate)."""
    config, files = onnx_gpu_version(
        onnx_path,
        name,
        plan,
        max_batch_size=max_batch_size,
        **_batching(options),
    )
    return _write(repo, name, (config, files, Path(onnx_path)), plan, None, None, options)


def _write(
    repo: ModelRepository | str | os.PathLike[str],
    name: str,
    version: tuple[ModelConfig, dict[str, Path | bytes], Path],
    plan: ExecutionPlan,
    gate: dict[str, Any] | None,
    manifest_extra: Mapping[str, Any] | None,
    options: VersionOptions,
) -> Path:
    """Write (config, files, source hashed into build.json) through the repository's writer, with
    the plan and the gate's record in build.json."""
    config, files, source = version
    repository = repo if isinstance(repo, ModelRepository) else ModelRepository(repo, create=True)
    extra = {
        "builder": "tritonkit.convert.targets.torch_program",
        **plan.manifest_extra(),
        **dict(manifest_extra or {}),
    }
    manifest = Manifest.create(
        source, precision=plan.precision, target="python-gpu", accuracy=gate, extra=extra
    )
    write = VersionWrite(name, config, files, manifest)
    (path,) = repository.write_versions(
        [write], version=options.get("version"), force=options.get("force", False)
    )
    return path


def program_outputs(program: Path, feeds: list[list[Any]], mbs: int, index: int) -> tuple[NDArray[Any], str]:
    """The program's output ``index`` on ``feeds`` (positional numpy inputs), on the first CUDA device
    when this process has one, else on the CPU; (outputs, device)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    exported = torch.export.load(str(program))
    if device != "cpu":
        from torch.export.passes import move_to_device_pass  # noqa: PLC0415 (torch is heavy and optional)

        exported = move_to_device_pass(exported, device)
    placeholders = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    dtypes = [
        getattr(placeholders[n].meta.get("val"), "dtype", None) for n in exported.graph_signature.user_inputs
    ]
    module = exported.module()
    chunks = []
    with torch.inference_mode():
        for feed in feeds:
            rows = len(feed[0])
            for start in range(0, rows, max(mbs, 1)):
                args = []
                for value, dtype in zip(feed, dtypes, strict=True):
                    tensor = torch.from_numpy(np.ascontiguousarray(value[start : start + mbs])).to(device)
                    args.append(tensor.to(dtype) if dtype is not None else tensor)
                out = module(*args)
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                chunks.append(outs[index].float().cpu().numpy())
    return np.concatenate(chunks), device
