"""What a measurement was taken on: the record every ``profile``, ``compare``, ``tune``, ``plan`` and
``loadtest`` output carries (JSON and Markdown).

Owns :class:`Provenance` and :func:`collect`: the device (the GPUs ``nvidia-smi`` lists, else none, and the
CPU's name and cores, from :mod:`tritonkit.machine`), the host, the date (UTC), the tritonkit version,
Triton's version (the server's metadata endpoint, which is never restricted), and per model version its
engine and precision (``build.json`` where the repository is local, else the config's platform, backend
and runner parameters) and its instance kind and count (the config as the server completed it). A server
named by a URL that is not this machine's loopback runs on a machine this process cannot see: its device
is recorded as unknown, never as this machine's. :meth:`Provenance.measured_on` says which device a
figure was measured on (``tritonkit plan`` refuses to price another without a translation).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2

import tritonkit
from tritonkit.errors import TritonKitError
from tritonkit.machine import cpu_model, gpu_names, host_name
from tritonkit.measure.payloads import fetch_model_spec
from tritonkit.repository import Manifest, ModelRepository

__all__ = ["ModelFacts", "Provenance", "collect", "is_local", "markdown_lines"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0")


def is_local(url: str) -> bool:
    """True when ``url`` names this machine (loopback): the server's device is this machine's."""
    host = re.sub(r"^[a-z]+://", "", url).rstrip("/")
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    return name in _LOOPBACK or name.startswith("127.")


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """One served model version: how it executes."""

    name: str
    version: str
    engine: str
    precision: str
    instance_kind: str
    instances: int
    #: the build target from ``build.json`` (portable, onnxruntime, tensorrt) or ``unknown``
    target: str = "unknown"

    def line(self) -> str:
        kind = self.instance_kind.removeprefix("KIND_")
        return (
            f"`{self.name}` version {self.version}: engine {self.engine}, precision {self.precision}, "
            f"{self.instances} x {kind} instance(s), build target {self.target}"
        )


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Where and when a measurement ran; ``device`` None: the server's machine is not this one."""

    tritonkit_version: str
    date: str
    host: str
    device: Mapping[str, Any] | None
    triton_version: str
    server: str
    models: tuple[ModelFacts, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["device"] = dict(self.device) if self.device is not None else None
        out["models"] = [dataclasses.asdict(m) for m in self.models]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Provenance:
        models = tuple(ModelFacts(**dict(m)) for m in data.get("models", []))
        fields = {f.name for f in dataclasses.fields(cls)} - {"models"}
        return cls(**{k: v for k, v in data.items() if k in fields}, models=models)

    def measured_on(self, model: str | None = None, instance_kind: str | None = None) -> tuple[str, str]:
        """(``cpu`` | ``gpu`` | ``unknown``, the device's name) a model's figures were measured on.

        ``instance_kind``: the kind the measured config used (a tune's winner may differ from the
        model's own); default the model's recorded kind."""
        facts = next((m for m in self.models if model is None or m.name == model), None)
        kind = instance_kind or (facts.instance_kind if facts else "KIND_CPU")
        if self.device is None:
            return "unknown", f"the server at {self.server} (not this machine: its device is not known)"
        gpus = list(self.device.get("gpus") or [])
        if kind == "KIND_GPU" or (kind == "KIND_AUTO" and gpus):
            return ("gpu", gpus[0]) if gpus else ("unknown", "a GPU instance on a machine listing no GPU")
        return "cpu", f"CPU {self.device.get('cpu')}, {self.device.get('cores')} cores"

    def device_text(self) -> str:
        if self.device is None:
            return f"device unknown (remote server {self.server})"
        gpus = list(self.device.get("gpus") or [])
        gpu = f"GPU {', '.join(gpus)}" if gpus else "no GPU"
        return f"CPU {self.device.get('cpu')} ({self.device.get('cores')} cores), {gpu}"


def markdown_lines(data: Mapping[str, Any] | Provenance | None) -> list[str]:
    """The provenance block of a Markdown report (a heading-free paragraph and one line per model)."""
    if data is None:
        return ["Measured on: not recorded (an output written before tritonkit recorded provenance).", ""]
    p = data if isinstance(data, Provenance) else Provenance.from_dict(data)
    lines = [
        f"Measured on: {p.device_text()}; host `{p.host}`; {p.date}; Triton {p.triton_version} "
        f"({p.server}); tritonkit {p.tritonkit_version}.",
    ]
    lines += [f"- {m.line()}" for m in p.models]
    return [*lines, ""]


def _device(server_url: str) -> dict[str, Any] | None:
    if not is_local(server_url):
        return None
    return {"cpu": cpu_model() or "unknown", "cores": os.cpu_count() or 0, "gpus": gpu_names()}


def triton_version(url: str, protocol: str = "http", timeout: float = 10.0) -> str:
    """Triton's version from its server-metadata endpoint, or ``unknown`` when it does not answer."""
    host = re.sub(r"^[a-z]+://", "", url).rstrip("/")
    with contextlib.suppress(Exception):
        if protocol == "grpc":
            grpc_client = grpcclient.InferenceServerClient(host)
            try:
                meta: Any = grpc_client.get_server_metadata(as_json=True, client_timeout=timeout)
            finally:
                grpc_client.close()
        else:
            http_client = httpclient.InferenceServerClient(
                host, connection_timeout=timeout, network_timeout=timeout
            )
            try:
                meta = http_client.get_server_metadata()
            finally:
                http_client.close()
        return str(meta.get("version") or "unknown")
    return "unknown"


def _manifest(repo: Path | None, name: str, version: str) -> Manifest | None:
    if repo is None or not version.isdigit():
        return None
    with contextlib.suppress(TritonKitError, ValueError, OSError):
        return ModelRepository(repo).read_manifest(name, int(version))
    return None


def _parameter(config: Any, key: str) -> str | None:
    with contextlib.suppress(Exception):
        if key in config.parameters:
            return str(config.parameters[key].string_value) or None
    return None


def _engine(config: Any, manifest: Manifest | None) -> str:
    execution = (manifest.extra.get("execution") if manifest is not None else None) or {}
    runner = execution.get("engine") or _parameter(config, "engine")
    platform, backend = str(config.platform or ""), str(config.backend or "")
    if platform == "tensorrt_plan" or backend == "tensorrt":
        return "tensorrt"
    if platform == "onnxruntime_onnx" or backend == "onnxruntime":
        return "onnxruntime"
    if platform == "ensemble":
        return "ensemble"
    if backend == "python":
        if runner:
            return f"{runner} (python backend)"
        if manifest is not None and manifest.target == "portable":
            return "onnxruntime (python backend, portable runner)"
        return "python"
    return backend or platform or "unknown"


def model_facts(
    url: str, protocol: str, name: str, version: str = "", repo: Path | None = None
) -> ModelFacts:
    """Engine, precision and instances of one served model version (its config as the server completed it)."""
    spec = fetch_model_spec(url, name, version, protocol=protocol)
    config = spec.config
    manifest = _manifest(repo, name, spec.version)
    execution = (manifest.extra.get("execution") if manifest is not None else None) or {}
    precision = (
        (manifest.precision if manifest is not None else None)
        or execution.get("precision")
        or _parameter(config, "precision")
        or "unknown"
    )
    groups = list(config.instance_group)
    kind = model_config_pb2.ModelInstanceGroup.Kind.Name(groups[0].kind) if groups else "KIND_AUTO"
    return ModelFacts(
        name=name,
        version=spec.version,
        engine=_engine(config, manifest),
        precision=str(precision),
        instance_kind=kind,
        instances=sum(max(1, int(g.count)) for g in groups) if groups else 1,
        target=manifest.target if manifest is not None else "unknown",
    )


def collect(
    url: str,
    protocol: str,
    models: Sequence[tuple[str, str]],
    *,
    repo: str | os.PathLike[str] | None = None,
) -> Provenance:
    """The provenance of a measurement against the server at ``url`` of ``models`` ((name, version) pairs;
    version "" = the newest); ``repo``: the server's repository when it is local (for ``build.json``)."""
    root = Path(repo) if repo is not None and is_local(url) else None
    facts = tuple(model_facts(url, protocol, name, version, root) for name, version in models)
    return Provenance(
        tritonkit_version=tritonkit.__version__,
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        host=host_name(),
        device=_device(url),
        triton_version=triton_version(url, protocol),
        server=re.sub(r"^[a-z]+://", "", url).rstrip("/"),
        models=facts,
    )
