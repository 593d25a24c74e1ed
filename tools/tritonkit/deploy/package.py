"""``tritonkit k8s package``: a user's build inputs laid out for the cluster's build Job.

Owns the workspace layout the build Jobs of ``k8s/overlays/{t4,dev}`` read (the names below, checked by
:mod:`tritonkit.deploy.checks.jobs`) and packing into it::

    <output>/inputs/<model>/spec.yaml     the spec, its paths rewritten to the packed copies
    <output>/inputs/<model>/modules/      the torch module's top-level package (or file) and --include
                                          paths, at their place relative to the spec's folder; the Job
                                          puts this folder on PYTHONPATH
    <output>/inputs/<model>/data/         calibration and evaluation data files
    <output>/inputs/<model>/model.onnx    an ONNX source, its external-data files beside it

The operator copies ``<output>/inputs`` onto the workspace volume (``$TRITONKIT_BUILD_WORKSPACE``,
docs/deploy.md); the Job builds each ``inputs/*/spec.yaml``. Every path a spec names must lie inside the
spec's folder (no ``..``, no absolute path elsewhere, no symlink leading out) and exist; each refusal is
one line. The build's own preflight (:func:`tritonkit.convert.inputs.preflight.check_build`: the graph's batch
axis, every data file against the model's inputs, calibration/evaluation overlap) runs here too, so
what the Job would refuse is refused before anything is packed, and so do the TensorRT target's own
checks (:func:`tritonkit.convert.targets.tensorrt_buckets.check_spec`: the given profiles, the longest length of
every dynamic axis, the shape buckets' profiles), since the T4 overlay's Job builds ``--target
tensorrt``: a model with a dynamic non-batch axis and nothing that gives its longest length
(``serving.shape_buckets``, ``tensorrt.profiles``, the module's ``config.max_position_embeddings``, a
text model's ``preprocessing.max_seq_length``) is refused here in one line. To learn a ``source.torch``
model's dynamic axes, its entry point is called (as the Job will) when the spec gives no
``tensorrt.profiles``; ``target="onnxruntime"`` (the dev overlay's) skips these checks. A packed
folder is written under a temporary name and renamed: never half there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tritonkit.atomic import make_dir, replace_dir
from tritonkit.convert.graph.export import TorchSource, load_torch_source
from tritonkit.convert.graph.source import spec_folder_importable
from tritonkit.convert.inputs.preflight import check_build
from tritonkit.convert.spec.buildspec import BuildSpec, load_spec, parse_spec
from tritonkit.convert.spec.options import BUILTIN
from tritonkit.convert.targets.tensorrt_buckets import check_spec
from tritonkit.errors import DeployError, TritonKitError
from tritonkit.repository.onnx_io import external_data_files, load_model
from tritonkit.repository.store import validate_model_name

__all__ = [
    "DATA_DIR",
    "INPUTS_DIR",
    "MODULES_DIR",
    "ONNX_FILE",
    "SPEC_FILE",
    "TIMING_CACHE_ENV",
    "WORKSPACE_ENV",
    "package_onnx",
    "package_spec",
]

#: Folder of the workspace volume holding one folder per packed model.
INPUTS_DIR = "inputs"
SPEC_FILE = "spec.yaml"
MODULES_DIR = "modules"
DATA_DIR = "data"
ONNX_FILE = "model.onnx"
#: Environment variable naming the build Job's workspace volume (inputs, stamps, caches).
WORKSPACE_ENV = "TRITONKIT_BUILD_WORKSPACE"
#: Environment variable the build reads for the TensorRT timing-cache file (replaces the spec's
#: ``tensorrt.timing_cache``); the Jobs point it at the workspace volume, keyed by GPU and TensorRT.
TIMING_CACHE_ENV = "TRITONKIT_TIMING_CACHE"
#: ``calibration.data`` / ``evaluation.data`` values that name a built-in source, not a file.
_BUILTIN_DATA = BUILTIN


def _inside(spec_dir: Path, value: str, key: str) -> Path:
    """``value`` (relative to the spec's folder) as an existing path inside it; one line otherwise."""
    root = spec_dir.resolve()
    given = Path(value)
    path = given if given.is_absolute() else spec_dir / given
    if not path.resolve().is_relative_to(root):
        plain = Path(os.path.normpath(path.absolute()))
        how = "a path" if not plain.is_relative_to(root) or plain == path.resolve() else "a symlink leading"
        raise DeployError(
            f"spec key `{key}`: `{value}` is {how} outside the spec's folder {spec_dir}; expected a path inside it"
        )
    if not path.exists():
        raise DeployError(
            f"spec key `{key}`: `{value}` not found in {spec_dir}; expected an existing file or folder"
        )
    return path


def _copy(source: Path, target: Path, root: Path, key: str) -> None:
    """Copy a file or folder; every symlink inside must stay inside ``root``; caches are left out."""
    if source.is_dir():
        for child in sorted(source.rglob("*")):
            if "__pycache__" in child.parts:
                continue
            if not child.resolve().is_relative_to(root.resolve()):
                raise DeployError(
                    f"spec key `{key}`: `{child}` is a symlink leading outside the spec's folder {root}; "
                    "expected every file inside it"
                )
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def _onnx_copies(onnx: Path, key: str) -> list[tuple[Path, str]]:
    """The ONNX file as ``model.onnx`` and its external-data files at their relative places beside it."""

    try:
        locations = external_data_files(load_model(onnx, check=False))
    except TritonKitError as exc:
        raise DeployError(f"{key}: {exc}") from None
    copies = [(onnx, ONNX_FILE)]
    folder = onnx.parent.resolve()
    for location in locations:
        data = onnx.parent / location
        if not data.resolve().is_relative_to(folder) or not data.is_file():
            raise DeployError(
                f"{key}: `{onnx.name}` keeps weights in {location!r}, which is not a file beside it; "
                "expected its external data next to it"
            )
        copies.append((data, data.resolve().relative_to(folder).as_posix()))
    return copies


def _module_root(spec_dir: Path, torch: str) -> Path:
    """The top-level package folder or module file ``package.module:function`` imports from."""
    module = torch.partition(":")[0]
    top = module.split(".")[0]
    for candidate in (spec_dir / top, spec_dir / f"{top}.py"):
        if candidate.exists():
            return _inside(spec_dir, candidate.name, "source.torch")
    raise DeployError(
        f"spec key `source.torch`: module `{module}` not found; expected {top}/ or {top}.py in {spec_dir}"
    )


#: The targets the cluster's build Jobs build: the T4 overlay's and the dev overlay's.
TARGETS = ("tensorrt", "onnxruntime")


def _entry_point(spec: BuildSpec) -> TorchSource:
    """Call ``source.torch`` (the spec's folder importable) and forget the modules it imported, so a
    later spec's module of the same name is its own."""
    assert spec.source.torch is not None
    top = spec.source.torch.partition(":")[0].split(".")[0]
    before = set(sys.modules)
    try:
        with spec_folder_importable(spec):
            return load_torch_source(spec.source.torch)
    except TritonKitError as exc:
        raise DeployError(f"spec key `source.torch`: {exc}") from None
    except Exception as exc:  # the user's code: any failure is one line
        raise DeployError(
            f"spec key `source.torch`: `{spec.source.torch}` raised {type(exc).__name__}: {exc} while k8s "
            "package read its inputs for the TensorRT build's checks (give `tensorrt.profiles` to skip "
            "calling it)"
        ) from None
    finally:
        for name in set(sys.modules) - before:
            if name == top or name.startswith(f"{top}."):  # the user's own modules only (never torch's)
                sys.modules.pop(name, None)


def _check_target(spec: BuildSpec, target: str) -> None:
    """The target's checks before packing (module docstring); one line, naming the target."""
    if target not in TARGETS:
        raise DeployError(f"target {target!r}: expected one of {', '.join(TARGETS)}")
    if target != "tensorrt" or spec.as_is:
        return
    torch = _entry_point(spec) if spec.source.torch is not None and not spec.tensorrt.profiles else None
    try:
        check_spec(spec, torch)
    except TritonKitError as exc:
        raise DeployError(f"{spec.name}: the TensorRT build would refuse it: {exc}") from None


def _finish(staging: Path, output: Path, name: str, force: bool) -> Path:
    """Check the packed spec from its new place, then rename the staging folder into ``inputs/<name>``."""

    load_spec(staging / SPEC_FILE)  # the Job reads it from there: its paths must resolve
    final = output / INPUTS_DIR / name
    if final.exists():
        if not force:
            raise DeployError(f"{final} already exists; expected a new model name, or --force to replace it")
        shutil.rmtree(final)
    replace_dir(staging, final)
    return final


def _staging(output: Path, name: str) -> Path:

    try:
        validate_model_name(name)
    except TritonKitError as exc:
        raise DeployError(str(exc)) from None
    if output.exists() and not output.is_dir():
        raise DeployError(f"--output {output} is a file; expected a folder")
    (output / INPUTS_DIR).mkdir(parents=True, exist_ok=True)
    return make_dir(output / INPUTS_DIR, f".{name}.")


def _write_spec(staging: Path, data: dict[str, Any]) -> None:

    (staging / SPEC_FILE).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def package_spec(
    spec_path: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    include: Sequence[str] = (),
    force: bool = False,
    target: str = "tensorrt",
) -> Path:
    """Pack a build spec and every file it names into ``<output>/inputs/<name>/``; returns that folder.

    ``include``: further files or folders (relative to the spec's folder) the torch module reads, copied
    into ``modules/`` at the same relative place. ``target``: what the Job builds (the T4 overlay's
    ``tensorrt``, whose checks run here; the dev overlay's ``onnxruntime``).
    """

    spec_file = Path(spec_path)
    spec = load_spec(spec_file)  # one line per bad key, before anything is written
    spec_dir = spec_file.parent
    data: dict[str, Any] = yaml.safe_load(spec_file.read_text(encoding="utf-8"))
    copies: list[tuple[Path, str, str]] = []  # (source, target relative to the input folder, spec key)
    source = data.get("source") or {}
    if spec.source.onnx is not None:
        onnx = _inside(spec_dir, spec.source.onnx, "source.onnx")
        copies += [
            (path, where, "source.onnx") for path, where in _onnx_copies(onnx, "spec key `source.onnx`")
        ]
        source["onnx"] = ONNX_FILE
    if spec.source.torch is not None:
        root = _module_root(spec_dir, spec.source.torch)
        copies.append((root, f"{MODULES_DIR}/{root.name}", "source.torch"))
    for item in include:
        path = _inside(spec_dir, item, "--include")
        relative = path.absolute().relative_to(spec_dir.absolute()).as_posix()
        copies.append((path, f"{MODULES_DIR}/{relative}", "--include"))
    for key in ("calibration", "evaluation"):
        section = data.get(key) or {}
        value = getattr(spec, key).data
        if value in _BUILTIN_DATA:
            continue
        path = _inside(spec_dir, value, f"{key}.data")
        if not path.is_file():
            raise DeployError(f"spec key `{key}.data`: `{value}` is a folder; expected a .txt or .npz file")
        relative = path.absolute().relative_to(spec_dir.absolute()).as_posix()
        copies.append((path, f"{DATA_DIR}/{relative}", f"{key}.data"))
        section["data"] = f"{DATA_DIR}/{relative}"
        data[key] = section
    # What the build Job would refuse (shapes, batch axis, data files), refused here, before packing.
    check_build(spec, load_torch=False)
    out = Path(output)
    staging = _staging(out, spec.name)
    try:
        for path, where, key in copies:
            _copy(path, staging / where, spec_dir, key)
        _check_target(spec, target)  # after the paths' checks: it may call the spec's entry point
        _write_spec(staging, data)
        return _finish(staging, out, spec.name, force)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)


def package_onnx(
    onnx: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    name: str | None = None,
    precisions: Sequence[str] = ("fp32",),
    calibration_data: str | os.PathLike[str] | None = None,
    eval_data: str | os.PathLike[str] | None = None,
    force: bool = False,
    dynamic_batch: bool = False,
    target: str = "tensorrt",
) -> Path:
    """Pack an ONNX file and its build flags (as a generated spec) into ``<output>/inputs/<name>/``.

    ``dynamic_batch``: the spec's ``source.dynamic_batch`` (rewrite a fixed first axis at build time)."""

    onnx_path = Path(onnx)
    if not onnx_path.is_file():
        raise DeployError(f"--onnx {onnx_path} not found; expected an ONNX file")
    model = name or onnx_path.stem
    data: dict[str, Any] = {
        "name": model,
        "source": {"onnx": ONNX_FILE, **({"dynamic_batch": True} if dynamic_batch else {})},
        "precisions": list(precisions),
        # As `tritonkit build --onnx`: batched (64) where the first axis is dynamic, else unbatched.
        "batching": {"max_batch_size": None},
    }
    if set(precisions) - {"fp32"} and eval_data is None:
        raise DeployError(
            "fp16/int8 builds of an ONNX file need held-out data: give --eval-data (and, for int8, "
            "--calibration-data) as .npz files of input arrays"
        )
    files = _onnx_copies(onnx_path, f"--onnx {onnx_path}")
    for key, flag, value in (
        ("calibration", "--calibration-data", calibration_data),
        ("evaluation", "--eval-data", eval_data),
    ):
        if value is None:
            continue
        path = Path(value)
        if not path.is_file():
            raise DeployError(f"{flag} {path} not found; expected a .npz file of input arrays")
        packed = f"{DATA_DIR}/{key}{path.suffix}"
        files.append((path, packed))
        data[key] = {"data": packed}
    here = {**data, "source": {**data["source"], "onnx": str(onnx_path.absolute())}}
    for key, value in (("calibration", calibration_data), ("evaluation", eval_data)):
        if value is not None:
            here[key] = {"data": str(Path(value).absolute())}
    checked = parse_spec(here)
    check_build(checked)  # one line per bad flag value or data file, before anything is copied
    _check_target(checked, target)
    out = Path(output)
    staging = _staging(out, model)
    try:
        for path, where in files:
            _copy(path, staging / where, path.parent, where)
        _write_spec(staging, data)
        return _finish(staging, out, model, force)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
