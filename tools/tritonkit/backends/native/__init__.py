"""The native runner: a C++ Triton backend (``tritonkit_torch``) that serves a torch version from
Triton's own process, and what makes it: the compiled library and the version's ``model.ts``.

The python backend gives every request a trip through shared memory and a Python request and answer
object; for requests of one row on a GPU that, not the GPU, bounds what is served. The native backend
(``tritonkit_torch.cc`` here) does per request only the checks and a copy in and out, and runs the
same program the torch runner runs: traced to TorchScript once per batch bucket (methods ``b1``,
``b2``, ... sharing one set of weights), each replayed from a CUDA graph captured at load. A model with
shape buckets (a dynamic sequence axis: the config parameter ``shape_buckets``) is traced once per
(batch bucket, shape bucket), methods ``b8_s64`` (``b8_s224x448`` for two axes, in the parameter's axis
order); the backend pads each request to its bucket, groups an execute's requests by bucket as the
python runners do and cuts the outputs back (``bucketed.h``).

This module owns:
  * :func:`compile_backend`: the library for the torch of this interpreter (g++, torch's headers and
    libraries; CUDA where torch has it), cached by source, torch version, flags and where the linked
    libraries are (:func:`cache_key`);
  * :func:`export_program`: ``model.ts`` of a torch-engine version's program (as the torch runner loads
    it), casts to the program's dtypes and to the config's output dtypes inside every method, and
    :func:`method_names`, the methods it traces;
  * :func:`prepare_native`: the library in the embedded server's backend directory when a model of
    its repository names the backend.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the description only: this floor imports nothing from tritonkit at run time
    from tritonkit.backends.runners.shape_buckets import Buckets

__all__ = [
    "BACKEND",
    "LIBRARY",
    "PROGRAM",
    "NativeBackendError",
    "cache_key",
    "compile_backend",
    "export_program",
    "method_name",
    "method_names",
    "prepare_native",
    "trace_device",
    "unavailable",
]

BACKEND = "tritonkit_torch"
LIBRARY = f"libtriton_{BACKEND}.so"
PROGRAM = "model.ts"
SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = (
    "tritonkit_torch.cc",
    "answers.h",
    "bucketed.h",
    "copy_in.h",
    "mini_json.h",
    "model_state.h",
    "program.h",
    "shape_buckets.h",
    "tensor_io.h",
    "triton_api.h",
)

_DTYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "BF16": "bfloat16",
    "FP32": "float32",
    "FP64": "float64",
}


class NativeBackendError(Exception):
    """The native backend could not be compiled or its program not exported (this floor imports
    nothing from tritonkit: its callers give it a place in :mod:`tritonkit.errors`' hierarchy)."""


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def unavailable(cuda: bool = True) -> str | None:
    """Why the backend cannot be compiled here (None: it can): no C++ compiler, or for a GPU build no
    CUDA headers or runtime library (under ``CUDA_HOME``, or nvcc's, as torch's extension builder finds
    it), which the build links against."""
    if _compiler() is None:
        return "no C++ compiler (g++ or $CXX) on PATH"
    if cuda:
        from torch.utils import cpp_extension  # noqa: PLC0415 (torch is heavy and optional (convert extra))

        home = cpp_extension.CUDA_HOME
        if home is None:
            return "no CUDA headers (CUDA_HOME unset and nvcc not on PATH)"
        header = Path(home) / "include" / "cuda_runtime_api.h"
        if not header.is_file():
            return f"no CUDA headers ({header} is missing)"
        if not any((Path(home) / "lib64" / lib).exists() for lib in ("libcudart.so", "libcudart.a")):
            return f"no CUDA runtime to link against ({home}/lib64/libcudart.so is missing)"
    return None


def _command(output: Path, cuda: bool) -> list[str]:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))
    from torch.utils import cpp_extension  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    problem = unavailable(cuda)
    compiler = _compiler()
    if problem is not None or compiler is None:
        raise NativeBackendError(f"the native runner cannot be compiled here: {problem}")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [compiler, "-O2", "-std=c++17", "-shared", "-fPIC", "-pthread", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
    libs = cpp_extension.library_paths()
    cmd += [str(SOURCE_DIR / "tritonkit_torch.cc"), "-o", str(output)]
    cmd += [f"-L{p}" for p in libs] + [f"-Wl,-rpath,{p}" for p in libs]
    cmd += ["-Wl,--no-as-needed", "-ltorch", "-ltorch_cpu", "-lc10"]
    if cuda:
        home = cpp_extension.CUDA_HOME  # unavailable() found its headers and runtime
        cmd += ["-DTRITONKIT_CUDA", f"-I{home}/include", f"-L{home}/lib64", f"-Wl,-rpath,{home}/lib64"]
        cmd += ["-ltorch_cuda", "-lc10_cuda", "-lcudart"]
    return cmd


def cache_key(cuda: bool) -> str:
    """The compiled library's cache folder name: its sources, this torch and Python, CUDA or not, and
    where the libraries it links are (its run path): a torch reinstalled elsewhere (a new virtual
    environment) gets its own build instead of one whose run path names a folder that is gone."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))
    from torch.utils import cpp_extension  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((SOURCE_DIR / name).read_bytes())
    digest.update(f"{torch.__version__} cuda={cuda} {sys.version}".encode())
    linked = [*cpp_extension.library_paths(), *([str(cpp_extension.CUDA_HOME)] if cuda else [])]
    digest.update("\n".join(str(Path(p).resolve()) for p in linked).encode())
    return digest.hexdigest()[:16]


def compile_backend(cache: Path, cuda: bool | None = None) -> Path:
    """The backend library for this interpreter's torch (compiled once per source, torch and flags,
    in a folder of ``cache`` named by :func:`cache_key`).

    ``cuda`` None: with CUDA where this torch was built with it and sees a GPU."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if cuda is None:
        cuda = torch.version.cuda is not None and torch.cuda.is_available()
    folder = cache / cache_key(cuda)
    target = folder / LIBRARY
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        built = Path(tmp) / LIBRARY
        done = subprocess.run(_command(built, cuda), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if "error" in ln] or done.stderr.splitlines()[-1:]
            raise NativeBackendError(
                f"compiling the native backend failed: {lines[0] if lines else 'no output'}"
            )
        os.replace(built, target)
    return target


def prepare_native(backends: Path, repo: Path, cache: Path) -> Path | None:
    """When a model of ``repo`` names this backend, put the library compiled for this torch (kept in
    ``cache``) at ``backends/tritonkit_torch/`` (the embedded server's backend directory) and return its
    path; None when no model names it."""
    marker = f'"{BACKEND}"'
    configs = [p for p in Path(repo).glob("*/config.pbtxt") if p.is_file()]
    if not any(marker in p.read_text(encoding="utf-8", errors="replace") for p in configs):
        return None
    library = compile_backend(cache)
    folder = backends / BACKEND
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / LIBRARY
    if not (link.is_symlink() and link.resolve() == library.resolve()):
        partial = folder / f".{LIBRARY}.{os.getpid()}"
        partial.unlink(missing_ok=True)
        partial.symlink_to(library)
        os.replace(partial, link)
    return link


def method_name(rows: int, edges: Sequence[int] = ()) -> str:
    """A traced method's name: ``b<rows>``, or with shape buckets ``b<rows>_s<edge>[x<edge>...]`` (one
    edge per axis, in the buckets' axis order): what the backend looks up (``shape_buckets.h``)."""
    return f"b{rows}" + (f"_s{'x'.join(str(e) for e in edges)}" if edges else "")


def _combos(shapes: Buckets | None) -> list[tuple[int, ...]]:
    combos: list[tuple[int, ...]] = [()]
    for edges in shapes.axes.values() if shapes is not None else []:
        combos = [(*c, e) for c in combos for e in edges]
    return combos


def method_names(
    batch_sizes: Sequence[int], shapes: Buckets | None = None
) -> list[tuple[str, int, tuple[int, ...]]]:
    """(name, rows, edges) of every method :func:`export_program` traces for ``batch_sizes`` (each
    combined with every shape bucket of ``shapes``, when given)."""
    return [(method_name(b, c), b, c) for b in sorted(set(batch_sizes)) for c in _combos(shapes)]


def _wrapper(
    module: Any, program_dtypes: Sequence[Any], output_dtypes: Sequence[Any], names: Sequence[str]
) -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    class Native(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, *xs: Any) -> Any:
            cast = [
                x.to(d) if d is not None and x.dtype != d else x
                for x, d in zip(xs, program_dtypes, strict=True)
            ]
            out = self.inner(*cast)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if len(outs) != len(output_dtypes):
                raise NativeBackendError(
                    f"program returned {len(outs)} outputs; the config names {len(output_dtypes)}"
                )
            return tuple(o.to(d) for o, d in zip(outs, output_dtypes, strict=True))

    for name in names:
        setattr(Native, name, Native.forward)
    return Native()


def _device_free(graph: Any) -> int:
    """Make a traced method's graph serve on any device: inline its calls, then let every device
    constant the trace recorded (``torch.arange(..., device=...)`` in the program) be the device of
    the method's first tensor input. Returns how many constants were replaced."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    torch._C._jit_pass_inline(graph)
    tensors = [v for v in graph.inputs() if v.type().kind() == "TensorType"]
    constants = [
        n
        for n in graph.nodes()
        if n.kind() == "prim::Constant" and n.output().type().kind() == "DeviceObjType"
    ]
    if not constants or not tensors:
        return 0
    device = graph.create("prim::device", [tensors[0]])
    device.output().setType(constants[0].output().type())
    device.insertBefore(next(iter(graph.nodes())))
    for node in constants:
        node.output().replaceAllUsesWith(device.output())
        node.destroy()
    return len(constants)


def _padded(
    shapes: Buckets | None, name: str, shape: tuple[int, ...], edges: tuple[int, ...]
) -> tuple[int, ...]:
    return shape if shapes is None else tuple(shapes.padded_shape(name, shape, edges))


def trace_device() -> str:
    """Where to trace: the first GPU when torch sees one (fast), else the CPU. The methods are made
    device-free, so the program serves on whichever device its instances are."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def export_program(
    target_dir: Path,
    module: Any,
    program_dtypes: Sequence[Any],
    config: Any,
    buckets: Sequence[int],
    device: str,
    shapes: Buckets | None = None,
) -> Path:
    """Write ``model.ts`` into ``target_dir``: ``module`` (a version's program as the torch runner loads
    it on ``device``, with its inputs' dtypes) traced once per bucket in ``buckets`` and the max batch,
    as methods ``b<N>`` that cast to the program's dtypes and to the config's output dtypes, each made
    device-free. A build passes every bucket a tuned config may name
    (``tritonkit.convert.spec.execution.method_buckets``).

    ``shapes``: the version's shape buckets (the config's -1 dims are their axes): one method per
    (batch bucket, shape bucket), ``b<N>_s<edges>`` (:func:`method_names`), each traced on inputs
    padded to its edges. The config then carries the buckets as its parameter ``shape_buckets``, which
    the backend reads (``tritonkit.convert.targets.buckets.apply_buckets``)."""
    import warnings  # noqa: PLC0415

    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    if config.max_batch_size <= 0:
        raise NativeBackendError(f"the native runner needs max_batch_size > 0; got {config.max_batch_size}")
    carried = shapes.inputs if shapes is not None else {}
    variable = [
        t.name
        for t in config.inputs
        if any(d < 0 and i + 1 not in carried.get(t.name, {}) for i, d in enumerate(t.dims))
    ]
    if variable:
        raise NativeBackendError(
            f"the native runner needs fixed dims besides the batch and the shape buckets' axes; input(s) "
            f"{', '.join(variable)} have -1"
        )
    outs = [getattr(torch, _DTYPES[t.data_type.removeprefix("TYPE_")]) for t in config.outputs]
    methods = method_names(sorted(set(buckets) | {config.max_batch_size}), shapes)
    wrapper = _wrapper(module, program_dtypes, outs, [name for name, _, _ in methods])
    examples = {
        name: tuple(
            torch.zeros(
                _padded(shapes, t.name, (rows, *t.dims), edges),
                dtype=getattr(torch, _DTYPES[t.data_type.removeprefix("TYPE_")]),
                device=device,
            )
            for t in config.inputs
        )
        for name, rows, edges in methods
    }
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # torch.jit's deprecation and tracer notes
        traced = torch.jit.trace_module(wrapper, examples, check_trace=False)  # type: ignore[no-untyped-call]
    for name, _, _ in methods:
        _device_free(getattr(traced, name).graph)
    target = Path(target_dir) / PROGRAM
    partial = target.with_name(PROGRAM + ".partial")
    traced.save(str(partial))
    os.replace(partial, target)
    return target
