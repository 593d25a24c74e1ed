"""``tritonkit check``: verify every model of a repository against its artifacts, one line per problem.

Owns the rules that predict whether Triton will load a repository and serve it correctly, found
without starting a server: every directory at the root is a model (Triton 2.51 tries to load even
hidden ones), each needs a ``config.pbtxt`` that parses and validates and names its directory, at
least one numeric version directory, and the artifact its backend or platform implies. For ONNX
artifacts (``onnxruntime_onnx``, or the portable runner's ``onnx_file`` parameter) the config's
input and output names, data types and dims must match the graph, respecting ``max_batch_size``
(python-backend versions only when they run the portable ONNX runner, which serves the graph as is).

Given a target server (``embedded``: the tritonserver of the nvidia-pytriton wheel, with the python
backend and ensembles only; ``triton-image``: NVIDIA's Triton container), it also names the models
that server cannot load: backends it lacks, and KIND_GPU instances where no GPU is found.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tritonkit.backends.native import BACKEND as NATIVE_BACKEND
from tritonkit.backends.native import PROGRAM as NATIVE_PROGRAM
from tritonkit.backends.runners import GPU_REQUESTS, HOST_STATS, ONNX_RUNNER, runner_path
from tritonkit.backends.runners.shape_buckets import PARAMETER as SHAPE_PARAMETER
from tritonkit.backends.runners.shape_buckets import BucketError, Buckets
from tritonkit.config import ModelConfig, TensorConfig, load
from tritonkit.config import problems as config_problems
from tritonkit.config.tensors import TensorSpec
from tritonkit.errors import ConfigError, ModelImportError, RepositoryError
from tritonkit.repository.manifest import MANIFEST_FILE, Manifest
from tritonkit.repository.onnx_io import read_io
from tritonkit.repository.staging import STAGING_PREFIX
from tritonkit.repository.store import CONFIG_FILE, ModelRepository
from tritonkit.serve.sources import external_data_problems

SHAPE_BUCKETS = "shape_buckets"

__all__ = [
    "CHECK_TARGETS",
    "check_model",
    "check_repository",
    "compare_tensors",
    "executions",
    "expected_artifacts",
    "gpu_placement_problems",
    "target_problems",
    "visible_gpus",
]

#: Servers ``tritonkit check --target`` knows.
CHECK_TARGETS = ("embedded", "triton-image")
#: What the embedded server (nvidia-pytriton's tritonserver) can run: python-backend models and ensembles.
#: tritonkit's native backend (``tritonkit.backends.native``) is among them: the embedded server gets it
#: compiled for the local torch; NVIDIA's Triton image does not have it.
_EMBEDDED_BACKENDS = ("python", NATIVE_BACKEND)
_EMBEDDED_PLATFORMS = ("ensemble",)

_ONNX_PLATFORMS = ("onnxruntime_onnx",)
_ONNX_BACKENDS = ("onnxruntime",)
_PLAN_PLATFORMS = ("tensorrt_plan",)
_PLAN_BACKENDS = ("tensorrt",)


def expected_artifacts(config: ModelConfig) -> list[str]:
    """File names a version of ``config`` must contain (empty when the backend is not one we know)."""
    names: list[str] = []
    backend, platform = config.backend or "", config.platform or ""
    if backend == "python":
        names.append(config.default_model_filename or "model.py")
        onnx_file = config.parameters.get("onnx_file")
        if onnx_file:
            names.append(onnx_file)
    elif backend == NATIVE_BACKEND:
        names.append(NATIVE_PROGRAM)
    elif platform in _ONNX_PLATFORMS or backend in _ONNX_BACKENDS:
        names.append(config.default_model_filename or "model.onnx")
    elif (platform in _PLAN_PLATFORMS or backend in _PLAN_BACKENDS) and not config.cc_model_filenames:
        # With cc_model_filenames the plan is named per compute capability (checked separately).
        names.append(config.default_model_filename or "model.plan")
    return names


def _runs(runner: str, config: ModelConfig, version_dir: Path) -> bool:
    """True when a python-backend version is ``runner``: its config names it, or its model.py is a copy."""
    if config.parameters.get("runner") == runner:
        return True
    model_py = version_dir / (config.default_model_filename or "model.py")
    try:
        return model_py.read_bytes() == runner_path(runner).read_bytes()
    except OSError:
        return False


def _runs_graph_as_is(config: ModelConfig, version_dir: Path) -> bool:
    """True when a python-backend version is the portable ONNX runner, whose I/O *is* the graph's.

    Other python runners (e.g. the text-embedding one, which tokenizes server-side) also name an
    ``onnx_file`` but expose different tensors, so only the ONNX runner is compared with its graph.
    """
    return _runs(ONNX_RUNNER, config, version_dir)


def _onnx_artifact(config: ModelConfig, version_dir: Path) -> str | None:
    if config.backend == "python":
        if not _runs_graph_as_is(config, version_dir):
            return None
        return config.parameters.get("onnx_file") or None
    if (config.platform or "") in _ONNX_PLATFORMS or (config.backend or "") in _ONNX_BACKENDS:
        return config.default_model_filename or "model.onnx"
    return None


def _fmt(dims: list[int] | tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def compare_tensors(
    kind: str, configured: list[TensorConfig], graph: tuple[TensorSpec, ...], max_batch_size: int
) -> list[str]:
    """Mismatches between config tensors and graph tensors of one kind ("input" or "output")."""
    problems: list[str] = []
    by_name = {t.name: t for t in graph}
    config_names = {t.name for t in configured}
    for tensor in configured:
        spec = by_name.get(tensor.name)
        if spec is None:
            problems.append(
                f"config {kind} `{tensor.name}` is not a graph {kind}; graph has: {', '.join(by_name) or 'none'}"
            )
            continue
        if tensor.data_type != spec.datatype:
            problems.append(
                f"{kind} `{tensor.name}`: config data type {tensor.data_type}, graph has {spec.datatype}"
            )
        graph_dims = spec.shape
        if max_batch_size > 0:
            if not spec.batch_dynamic:
                problems.append(
                    f"{kind} `{tensor.name}`: max_batch_size {max_batch_size} needs a dynamic first axis, "
                    f"graph shape is {_fmt(spec.shape)}"
                )
                continue
            graph_dims = spec.shape[1:]
        # With `reshape`, the model sees the reshaped shape: that is what must match the graph.
        seen = tensor.reshape if tensor.reshape is not None else tensor.dims
        if len(seen) != len(graph_dims) or any(
            c != g and not (g == -1 and c > 0) for c, g in zip(seen, graph_dims, strict=False)
        ):
            shown = "without the batch axis" if max_batch_size > 0 else "full shape"
            problems.append(
                f"{kind} `{tensor.name}`: config {'reshape' if tensor.reshape is not None else 'dims'} {_fmt(seen)}, graph has {_fmt(graph_dims)} ({shown})"
            )
    for spec in graph:
        if spec.name not in config_names and kind == "input":
            problems.append(f"graph input `{spec.name}` is missing from the config")
    return problems


_TEXT_RUNNER = "text_embedding"


def _runs_text_embedding(config: ModelConfig, version_dir: Path) -> bool:
    """True when a python-backend version is the text-embedding runner (model.onnx + tokenizer.json)."""
    return _runs(_TEXT_RUNNER, config, version_dir)


def _escaping_links(model_dir: Path, root: Path) -> list[str]:
    """Symlinks under ``model_dir`` that loop, dangle or point outside the repository ``root``."""
    problems: list[str] = []
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(model_dir):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if not path.is_symlink():
                continue
            rel = path.relative_to(model_dir)
            try:
                target = path.resolve(strict=True)
            except RuntimeError:
                problems.append(f"`{rel}` is a symlink loop")
                continue
            except OSError:
                problems.append(f"`{rel}` is a dangling symlink")
                continue
            if not target.is_relative_to(real_root):
                problems.append(f"`{rel}` is a symlink that escapes the repository (to {str(target)!r})")
    return problems


def _python_problems(config: ModelConfig, version_dir: Path) -> list[str]:
    """A python-backend model.py that does not compile (compiled, never imported or run), or a GPU
    runner without a helper it imports from its folder (``gpu_requests.py``, ``host_stats.py``)."""
    model_py = version_dir / (config.default_model_filename or "model.py")
    if config.backend != "python" or not model_py.is_file():
        return []
    source = model_py.read_bytes()
    for helper in (GPU_REQUESTS, HOST_STATS):
        if f"from {helper} import".encode() in source and not (version_dir / f"{helper}.py").is_file():
            return [f"`{model_py.name}` imports `{helper}.py`, which its version folder lacks (rebuild it)"]
    if _pads_on_server(config) and not (version_dir / f"{SHAPE_BUCKETS}.py").is_file():
        return [
            f"config names shape buckets padded on the server, and the version folder lacks "
            f"`{SHAPE_BUCKETS}.py` (rebuild it)"
        ]
    try:
        compile(source, str(model_py), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f" line {line}" if line else ""
        msg = getattr(exc, "msg", None) or str(exc)
        return [f"`{model_py.name}`{where} does not compile ({msg})"]
    return []


def _pads_on_server(config: ModelConfig) -> bool:
    text = config.parameters.get(SHAPE_PARAMETER, "")
    try:
        buckets = Buckets.parse(text)
    except BucketError:
        return False  # reported by _bucket_problems
    return buckets is not None and buckets.pad_at == "server"


def _bucket_problems(config: ModelConfig) -> list[str]:
    """A ``shape_buckets`` parameter that does not parse or names tensors the config lacks."""
    text = config.parameters.get(SHAPE_PARAMETER, "")
    try:
        buckets = Buckets.parse(text)
    except BucketError as exc:
        return [str(exc)]
    if buckets is None:
        return []
    names = {t.name for t in config.inputs} | {t.name for t in config.outputs}
    missing = sorted(set(buckets.inputs) - names) + sorted(set(buckets.outputs) - names)
    if missing:
        return [f"parameter `{SHAPE_PARAMETER}` names tensors the config lacks: {', '.join(missing)}"]
    return []


def _text_problems(config: ModelConfig, version_dir: Path) -> list[str]:
    """The text-embedding runner's artifacts: a readable graph whose outputs match, and a tokenizer."""
    if config.backend != "python" or not _runs_text_embedding(config, version_dir):
        return []
    problems: list[str] = []
    onnx_name = config.parameters.get("onnx_file") or "model.onnx"
    tokenizer = config.parameters.get("tokenizer_file") or "tokenizer.json"
    if not (version_dir / tokenizer).is_file():
        problems.append(f"artifact `{tokenizer}` (text-embedding tokenizer) is missing")
    graph_path = version_dir / onnx_name
    if not graph_path.is_file():
        if onnx_name not in expected_artifacts(config):
            problems.append(f"artifact `{onnx_name}` (text-embedding graph) is missing")
        return problems
    try:
        graph = read_io(graph_path, check=False)
    except ModelImportError as exc:
        return [*problems, str(exc)]
    # The runner serves the graph's pooled output under the config's output name: dims must agree.
    if config.outputs and graph.outputs:
        out, spec = config.outputs[0], graph.outputs[0]
        want = list(spec.shape[1:]) if config.max_batch_size > 0 and len(spec.shape) > 1 else list(spec.shape)
        if (
            want
            and len(out.dims) == len(want)
            and any(c != g and g > 0 for c, g in zip(out.dims, want, strict=False))
        ):
            problems.append(
                f"output `{out.name}`: config dims {_fmt(out.dims)}, graph `{onnx_name}` has {_fmt(want)}"
            )
    return problems


def _check_version(config: ModelConfig, version_dir: Path) -> list[str]:
    prefix = f"version {version_dir.name}: "
    problems: list[str] = []
    if not any(version_dir.iterdir()):
        missing = [*expected_artifacts(config), *config.cc_model_filenames.values()]
        if missing:
            return [f"{prefix}artifact `{a}` is missing" for a in missing]
        return [f"{prefix}version directory is empty"]
    problems.extend(prefix + p for p in _python_problems(config, version_dir))
    problems.extend(prefix + p for p in _text_problems(config, version_dir))
    problems.extend(prefix + p for p in _bucket_problems(config))
    for artifact in expected_artifacts(config):
        if not (version_dir / artifact).is_file():
            problems.append(f"{prefix}artifact `{artifact}` is missing")
    for plan in config.cc_model_filenames.values():
        if not (version_dir / plan).is_file():
            problems.append(f"{prefix}artifact `{plan}` (cc_model_filenames) is missing")
    manifest = version_dir / MANIFEST_FILE
    if manifest.is_file():
        try:
            Manifest.from_json(manifest.read_text(encoding="utf-8"))
        except (RepositoryError, UnicodeDecodeError) as exc:
            problems.append(f"{prefix}{exc}")
    onnx_name = _onnx_artifact(config, version_dir)
    if onnx_name and (version_dir / onnx_name).is_file():
        try:
            graph = read_io(version_dir / onnx_name, check=False)
        except ModelImportError as exc:
            return [*problems, f"{prefix}{exc}"]
        for kind, configured, specs in (
            ("input", config.inputs, graph.inputs),
            ("output", config.outputs, graph.outputs),
        ):
            problems.extend(
                prefix + p for p in compare_tensors(kind, configured, specs, config.max_batch_size)
            )
    return problems


def check_model(model_dir: Path) -> list[str]:
    """Problems of one model directory, each without the model-name prefix."""
    config_path = model_dir / CONFIG_FILE
    if not config_path.is_file():
        return [f"no {CONFIG_FILE}; Triton cannot load this directory as a model"]
    try:
        config = load(config_path)
    except ConfigError as exc:
        detail = str(exc).replace(str(config_path) + ": ", "")
        return [f"{CONFIG_FILE} does not parse ({detail})"]
    problems = list(config_problems(config))
    if config.name and config.name != model_dir.name:
        problems.append(f"config name `{config.name}` does not match the directory name `{model_dir.name}`")
    versions = sorted(
        (p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0),
        key=lambda p: int(p.name),
    )
    if not versions:
        problems.append("no version directory; expected a numeric subdirectory such as `1/`")
    for version_dir in versions:
        problems.extend(_check_version(config, version_dir))
    return problems


def visible_gpus() -> list[int]:
    """Indices of the GPUs this machine shows (``nvidia-smi -L``, narrowed by CUDA_VISIBLE_DEVICES)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    count = (
        sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")) if out.returncode == 0 else 0
    )
    narrowed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if narrowed is not None:
        count = min(count, len([p for p in narrowed.split(",") if p.strip()]))
    return list(range(count))


def _placement(config: ModelConfig, visible: Sequence[int]) -> list[str]:
    problems = []
    for group in config.instance_groups:
        if group.kind != "KIND_GPU":
            continue
        if not visible:
            problems.append("instance_group KIND_GPU needs a GPU; none is visible here")
            continue
        missing = [g for g in group.gpus if g not in visible]
        if missing:
            problems.append(f"instance_group names GPU(s) {missing}; visible: {list(visible)}")
    return problems


def gpu_placement_problems(config: ModelConfig, visible: Sequence[int]) -> list[str]:
    """What ``tritonkit check`` refuses: KIND_GPU instances where no GPU (or not that GPU) is visible."""
    return [f"{config.name}: {p}" for p in _placement(config, visible)]


#: Runners of the versions a build spec's ``serving`` plan put on the GPU.
_GPU_RUNNERS = ("torch_runner", "onnx_cuda_runner")


def target_problems(
    config: ModelConfig,
    target: str,
    gpu_available: bool | None = None,
    gpus: Sequence[int] | None = None,
) -> list[str]:
    """Why the ``target`` server cannot load ``config`` (empty when it can).

    For the embedded server, ``gpus`` are the GPU indices visible here (None: ask ``nvidia-smi``
    unless ``gpu_available`` says whether there is one, indices unknown).
    """
    if target not in CHECK_TARGETS:
        raise RepositoryError(f"unknown check target {target!r}; expected one of {', '.join(CHECK_TARGETS)}")
    problems: list[str] = []
    backend, platform = config.backend or "", config.platform or ""
    kinds = {g.kind for g in config.instance_groups}
    if target == "embedded":
        if backend not in _EMBEDDED_BACKENDS and platform not in _EMBEDDED_PLATFORMS:
            what = f"platform `{platform}`" if platform else f"backend `{backend or 'none'}`"
            problems.append(
                f"the embedded server cannot load {what}: it has the python backend, tritonkit's native backend and ensembles only; "
                "serve it with NVIDIA's Triton image (check with --target triton-image)"
            )
        visible = list(gpus) if gpus is not None else (visible_gpus() if gpu_available is None else None)
        gpu = bool(visible) if visible is not None else bool(gpu_available)
        if "KIND_GPU" in kinds and not gpu:
            fix = (
                "rebuild it with `serving: {device: cpu}`, or where it will be served"
                if config.parameters.get("runner") in _GPU_RUNNERS
                else "rebuild with --instance-kind KIND_CPU"
            )
            problems.append(
                "instance_group kind KIND_GPU, but no GPU is found here; the embedded server would refuse "
                f"to load it ({fix})"
            )
        elif visible:
            problems.extend(_placement(config, visible))
    elif backend == NATIVE_BACKEND:
        problems.append(
            "backend `tritonkit_torch` is tritonkit's native runner, which NVIDIA's Triton image does not have: "
            "serve it with the embedded server, or rebuild with `serving: {runner: python}`"
        )
    elif (platform == "tensorrt_plan" or backend == "tensorrt") and kinds - {"KIND_GPU", "KIND_AUTO"}:
        problems.append(f"a TensorRT engine runs on GPU instances only; got instance kinds {sorted(kinds)}")
    return problems


def check_repository(
    root: str | os.PathLike[str] | ModelRepository,
    target: str | None = None,
    *,
    gpu_available: bool | None = None,
    gpus: Sequence[int] | None = None,
) -> list[str]:
    """Every problem in the repository as ``"MODEL: problem"`` lines (empty when all is well).

    With a ``target`` (:data:`CHECK_TARGETS`), also what that server cannot load
    (:func:`target_problems`; ``gpus`` the visible GPU indices, ``gpu_available`` whether there is
    one; both None: ask ``nvidia-smi``). RepositoryError if ``root`` is not a directory at all.
    """
    repo = root if isinstance(root, ModelRepository) else ModelRepository(root)
    if target == "embedded" and gpus is None and gpu_available is None:
        gpus = visible_gpus()  # asked once, not once per model
    problems: list[str] = []
    for entry in sorted(repo.root.iterdir()):
        if entry.is_symlink() and entry.is_dir() and not entry.resolve().is_relative_to(repo.root.resolve()):
            problems.append(
                f"{entry.name}: symlink that escapes the repository (to {str(entry.resolve())!r})"
            )
            continue
        if not entry.is_dir():
            continue  # Triton only looks at directories at the root
        if entry.name.startswith(STAGING_PREFIX):
            problems.append(
                f"{entry.name}: staging directory left by an interrupted write; Triton would try to load "
                "it as a model (`tritonkit serve` and the next write remove it)"
            )
            continue
        if entry.name.startswith("."):
            problems.append(f"{entry.name}: hidden directory; Triton would try to load it as a model")
            continue
        links = _escaping_links(entry, repo.root)
        problems.extend(f"{entry.name}: {p}" for p in links)
        if any("loop" in p for p in links):
            continue  # walking the model further would not end
        problems.extend(f"{entry.name}: {p}" for p in check_model(entry))
        # Data the server would read from elsewhere (serve refuses it too: serve.sources)
        problems.extend(f"{entry.name}: {p}" for p in external_data_problems(entry))
        if target is not None and (entry / CONFIG_FILE).is_file():
            try:
                config = load(entry / CONFIG_FILE)
            except ConfigError:
                continue  # already reported by check_model
            problems.extend(
                f"{entry.name}: {p}" for p in target_problems(config, target, gpu_available, gpus)
            )
    return problems


def _execution_line(model: str, version: str, record: dict[str, object], methods: object = None) -> str:
    buckets = record.get("batch_buckets") or []
    shown = ",".join(str(b) for b in buckets) if isinstance(buckets, list) and buckets else "none"
    groups = []
    instances = record.get("instances")
    for group in instances if isinstance(instances, list) else []:
        if isinstance(group, dict):
            where = f" on GPU {group.get('gpus')}" if group.get("gpus") else ""
            groups.append(f"{group.get('count')} x {group.get('kind')}{where}")
    traced = f", {methods} traced methods" if isinstance(methods, int) else ""
    runner = f" (native runner{traced})" if record.get("runner") == "native" else ""
    why_python = f"; python runner: {record['runner_reason']}" if record.get("runner_reason") else ""
    return (
        f"{model} version {version} executes on {record.get('device')}: engine {record.get('engine')}{runner}, "
        f"{record.get('precision')}, buckets {shown}, instances {' + '.join(groups) or 'none'} "
        f"({record.get('reason')}{why_python})"
    )


def executions(root: str | os.PathLike[str] | ModelRepository) -> list[str]:
    """Where each version executes, one line per version whose build.json records it
    (``extra.execution``: device, engine, precision, batch buckets, instances and why)."""
    repo = root if isinstance(root, ModelRepository) else ModelRepository(root)
    lines: list[str] = []
    for entry in sorted(repo.root.iterdir()):
        if not entry.is_dir() or entry.is_symlink() or entry.name.startswith((".", STAGING_PREFIX)):
            continue
        try:
            versions = sorted((p for p in entry.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        except OSError:
            continue  # unreadable: check_model reports what it can
        for version_dir in versions:
            try:
                manifest = Manifest.from_json((version_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
            except (OSError, RepositoryError, UnicodeDecodeError):
                continue  # no record, or a broken one check_model reports
            record = manifest.extra.get("execution")
            if isinstance(record, dict):
                methods = manifest.extra.get("native_methods")
                lines.append(_execution_line(entry.name, version_dir.name, record, methods))
            shapes = manifest.extra.get("shape_buckets")
            if isinstance(shapes, dict) and isinstance(shapes.get("axes"), dict):
                lines.append(_buckets_line(entry.name, version_dir.name, shapes))
    return lines


def _buckets_line(model: str, version: str, record: dict[str, object]) -> str:
    recorded = record["axes"]
    assert isinstance(recorded, dict)
    axes = "; ".join(
        f"{axis} {list(edges)} (longest {edges[-1]})"
        for axis, edges in recorded.items()
        if isinstance(edges, list) and edges
    )
    where = record.get("pad_at", "server")
    return f"{model} version {version} shape buckets: {axes}, padded on the {where}"
