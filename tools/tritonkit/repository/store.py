"""The model repository on disk: model-name rules, layout, atomic version writes, ``build.json`` manifests.

Layout (what Triton reads, plus tritonkit's manifest)::

    <repo>/<model>/config.pbtxt
    <repo>/<model>/<version>/<artifact files...>
    <repo>/<model>/<version>/build.json

A version is assembled in a staging directory inside the repository (same filesystem, so the final
step is a ``rename``) and only then moved into place; an existing version is replaced only with
``force`` (old one renamed aside, new one renamed in, old one deleted). Any error leaves the
repository exactly as it was. Triton 2.51 treats *every* directory at the repository root as a model,
hidden ones included (checked by hand: a leftover ``.staging-x/1`` made the server try to load a model
called ``.staging-x``), so the staging directory is always removed before a write returns;
``tritonkit check`` reports one left behind by a killed process.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from tritonkit.config import ModelConfig, load, save, validate
from tritonkit.errors import ConfigError, ModelImportError, RepositoryError, read_text

CONFIG_FILE = "config.pbtxt"
MANIFEST_FILE = "build.json"
#: Prefix of the temporary directories a write assembles a version in (removed before it returns).
STAGING_PREFIX = ".tritonkit-staging-"
MANIFEST_SCHEMA = 1

_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")
_MAX_NAME = 200  # well under the 255-byte filename limit, leaving room for suffixes
#: Distributions whose versions go into every manifest (those installed; none is imported for this).
_TOOL_DISTRIBUTIONS: tuple[str, ...] = (
    "tritonkit",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "numpy",
    "protobuf",
    "tritonclient",
    "nvidia-pytriton",
    "polygraphy",
    "torch",
    "tensorrt",
    "onnxscript",
)


def validate_model_name(name: str) -> str:
    """Return ``name`` when it is a safe model name; RepositoryError otherwise.

    Safe means: only ``[A-Za-z0-9_.-]``, not starting with ``.`` (hidden names are reserved for
    staging and ``.``/``..`` are path tricks), at most 200 characters.
    """
    if not isinstance(name, str) or not name:
        raise RepositoryError(f"invalid model name {name!r}: expected a non-empty string of [A-Za-z0-9_.-]")
    if not _NAME_RE.fullmatch(name):
        bad = "".join(sorted({c for c in name if not _NAME_RE.fullmatch(c)}))
        raise RepositoryError(
            f"invalid model name {name!r}: expected only letters, digits, '_', '.', '-'; got {bad!r}"
        )
    if name.startswith("."):
        raise RepositoryError(f"invalid model name {name!r}: expected a name not starting with '.'")
    if len(name) > _MAX_NAME:
        raise RepositoryError(f"invalid model name {name[:20]!r}...: expected at most {_MAX_NAME} characters")
    return name


def _writer_alive(staging_name: str) -> bool:
    """True when the pid recorded in a staging directory name is a running process."""
    pid_text = staging_name[len(STAGING_PREFIX) :].split("-", 1)[0]
    if not pid_text.isdigit() or int(pid_text) <= 0:
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def _validate_version(version: object) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RepositoryError(f"invalid version {version!r}: expected an integer >= 1")
    return version


def _tool_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in _TOOL_DISTRIBUTIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


@dataclass
class Manifest:
    """``<model>/<version>/build.json``: where a version came from and how it was made."""

    source: str
    source_sha256: str
    precision: str
    target: str
    gpu_profile: str | None = None
    tools: dict[str, str] = field(default_factory=dict)
    accuracy: dict[str, Any] | None = None
    created: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        source_path: str | os.PathLike[str],
        precision: str = "fp32",
        target: str = "portable",
        gpu_profile: str | None = None,
        accuracy: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        *,
        tools: Mapping[str, str] | None = None,
    ) -> Manifest:
        """Manifest for a version built now from ``source_path`` (hashed here).

        ``tools`` adds or overrides library versions (e.g. the TensorRT a plan was built with).
        """
        source = Path(source_path)
        try:
            digest = sha256_file(source)
        except FileNotFoundError:
            raise ModelImportError(
                f"source file not found: {str(source)!r}; expected an existing file"
            ) from None
        except IsADirectoryError:
            raise ModelImportError(f"source {str(source)!r} is a directory; expected a file") from None
        except OSError as exc:
            raise ModelImportError(f"cannot read source file {str(source)!r}: {exc.strerror}") from None
        return cls(
            source=str(source.resolve()),
            source_sha256=digest,
            precision=precision,
            target=target,
            gpu_profile=gpu_profile,
            tools={**_tool_versions(), **dict(tools or {})},
            accuracy=dict(accuracy) if accuracy is not None else None,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            extra=dict(extra or {}),
        )

    def to_json(self) -> str:
        data = {"schema": MANIFEST_SCHEMA, **asdict(self)}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse ``build.json`` text; RepositoryError naming what is missing or malformed.

        Keys this version does not know are ignored, so newer manifests stay readable.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RepositoryError(
                f"`{MANIFEST_FILE}` is not valid JSON ({exc.msg} at line {exc.lineno})"
            ) from None
        if not isinstance(data, dict):
            raise RepositoryError(f"`{MANIFEST_FILE}` must hold a JSON object, got {type(data).__name__}")
        required = ("source", "source_sha256", "precision", "target")
        missing = [key for key in required if key not in data]
        if missing:
            raise RepositoryError(f"`{MANIFEST_FILE}` lacks required keys: {', '.join(missing)}")
        known = {f for f in cls.__dataclass_fields__ if f in data}
        try:
            manifest = cls(**{key: data[key] for key in known})
        except TypeError as exc:  # pragma: no cover - every field has a default or is required above
            raise RepositoryError(f"`{MANIFEST_FILE}` is malformed: {exc}") from None
        for key in ("source", "source_sha256", "precision", "target"):
            if not isinstance(getattr(manifest, key), str):
                raise RepositoryError(f"`{MANIFEST_FILE}`: `{key}` must be a string")
        if not isinstance(manifest.tools, dict) or not isinstance(manifest.extra, dict):
            raise RepositoryError(f"`{MANIFEST_FILE}`: `tools` and `extra` must be JSON objects")
        return manifest


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush every staged file and directory, so a crash after the rename never exposes empty files."""
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_dir():
            _fsync_dir(path)
        else:
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(root)


def _relative_file_name(key: str) -> PurePosixPath:
    """A files-mapping key as a safe relative path inside the version directory."""
    rel = PurePosixPath(key)
    if not key or rel.is_absolute() or "\\" in key or any(part in ("", ".", "..") for part in key.split("/")):
        raise RepositoryError(
            f"invalid file name {key!r} in a version: expected a relative path without '..'"
        )
    if rel.as_posix() == MANIFEST_FILE:
        raise RepositoryError(f"file name {key!r} is reserved for the manifest; pass it as `manifest`")
    return rel


def _signature(config: ModelConfig) -> tuple[Any, ...]:
    """What every version of one model must share: how it is run and its I/O."""

    def tensors(items: list[Any]) -> tuple[Any, ...]:
        return tuple((t.name, t.data_type, tuple(t.dims)) for t in items)

    return (
        config.backend,
        config.platform,
        config.max_batch_size,
        tensors(config.inputs),
        tensors(config.outputs),
    )


def _describe_signature(sig: tuple[Any, ...]) -> str:
    backend, platform_, mbs, inputs, outputs = sig

    def fmt(items: tuple[Any, ...]) -> str:
        return ", ".join(f"{n}:{d}{list(s)}" for n, d, s in items)

    return f"{backend or platform_}, max_batch_size {mbs}, inputs [{fmt(inputs)}], outputs [{fmt(outputs)}]"


class ModelRepository:
    """A Triton model repository directory and the operations tritonkit performs on it."""

    def __init__(self, root: str | os.PathLike[str], create: bool = False) -> None:
        path = Path(root)
        if path.exists() and not path.is_dir():
            raise RepositoryError(f"repository path {str(path)!r} is not a directory")
        if not path.exists():
            if not create:
                raise RepositoryError(f"repository {str(path)!r} does not exist; expected a directory")
            try:
                path.mkdir(parents=True)
            except OSError as exc:
                raise RepositoryError(f"cannot create repository {str(path)!r}: {exc.strerror}") from None
        self.root = path.resolve()

    def __repr__(self) -> str:
        return f"ModelRepository({str(self.root)!r})"

    # --- reading ---------------------------------------------------------------------------------
    def model_dir(self, name: str) -> Path:
        return self.root / validate_model_name(name)

    def version_dir(self, name: str, version: int) -> Path:
        return self.model_dir(name) / str(_validate_version(version))

    def models(self) -> list[str]:
        """Names of the model directories (valid names only; staging and stray files excluded)."""
        names = []
        for entry in self.root.iterdir():
            if entry.is_dir() and _NAME_RE.fullmatch(entry.name) and not entry.name.startswith("."):
                names.append(entry.name)
        return sorted(names)

    def versions(self, name: str) -> list[int]:
        """Version numbers present for ``name``, ascending (Triton's rule: numeric subdirectories)."""
        model = self.model_dir(name)
        if not model.is_dir():
            return []
        return sorted(
            int(p.name) for p in model.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0
        )

    def next_version(self, name: str) -> int:
        found = self.versions(name)
        return found[-1] + 1 if found else 1

    def stale_staging(self) -> list[Path]:
        """Staging directories left behind by a killed write (Triton would try to load them as models)."""
        return sorted(p for p in self.root.iterdir() if p.name.startswith(STAGING_PREFIX))

    def remove_stale_staging(self) -> list[Path]:
        """Remove staging directories whose writer process is gone; returns what was removed.

        A staging directory is named ``<prefix><pid>-<random>``: one whose pid is still alive is a
        live writer's and is kept. Names without a pid (older layouts) are removed as stale.
        """
        removed: list[Path] = []
        for path in self.stale_staging():
            if _writer_alive(path.name):
                continue
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
        return removed

    def read_config(self, name: str) -> ModelConfig:
        path = self.model_dir(name) / CONFIG_FILE
        if not path.is_file():
            raise RepositoryError(f"model `{name}` has no {CONFIG_FILE} in {str(self.root)!r}")
        return load(path)

    def read_manifest(self, name: str, version: int) -> Manifest:
        path = self.version_dir(name, version) / MANIFEST_FILE
        text = read_text(
            path,
            RepositoryError,
            missing=f"model `{name}` version {version} has no {MANIFEST_FILE}",
            unreadable=f"cannot read {str(path)!r}",
        )
        try:
            return Manifest.from_json(text)
        except RepositoryError as exc:
            raise RepositoryError(f"model `{name}` version {version}: {exc}") from None

    # --- writing ---------------------------------------------------------------------------------
    def write_version(
        self,
        name: str,
        config: ModelConfig,
        files: Mapping[str, Path | bytes],
        manifest: Manifest,
        *,
        version: int | None = None,
        force: bool = False,
    ) -> Path:
        """Add ``<name>/<version>/`` (``files`` + ``build.json``) and write ``<name>/config.pbtxt``.

        ``files`` maps a relative name inside the version (``model.onnx``, ``model.py``) to a source
        path or the bytes to write. ``version`` defaults to the next free number. Refuses an existing
        version, or a model whose existing config has a different signature (backend, batching, I/O),
        unless ``force``. Returns the version directory. On any error nothing in the repository changes.
        """
        validate_model_name(name)
        number = self.next_version(name) if version is None else _validate_version(version)
        if config.name != name:
            raise ConfigError(f"config name `{config.name}` does not match model name `{name}`")
        validate(config)
        entries = {_relative_file_name(key): value for key, value in files.items()}
        model_dir = self.root / name
        target = model_dir / str(number)
        self._check_target(name, model_dir, target, config, force=force)

        try:
            # A kill -9 mid-write leaves the staging directory behind: the next write removes those
            # whose writer (the pid in the name) is gone, before adding its own.
            self.remove_stale_staging()
            staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=self.root))
        except OSError as exc:
            raise RepositoryError(f"repository {str(self.root)!r} is not writable ({exc.strerror})") from None
        try:
            staged_model = staging / name
            staged_version = staged_model / str(number)
            staged_version.mkdir(parents=True)
            self._stage_files(staged_version, entries)
            (staged_version / MANIFEST_FILE).write_text(manifest.to_json(), encoding="utf-8")
            save(config, staged_model / CONFIG_FILE)
            _fsync_tree(staged_model)
            if model_dir.exists():
                self._commit_into_existing(staging, staged_model, model_dir, target)
            else:
                os.rename(staged_model, model_dir)
            # Committed: from here on an error must not be reported as "nothing written".
            with contextlib.suppress(OSError):
                _fsync_dir(model_dir)
                _fsync_dir(self.root)
        except OSError as exc:
            detail = exc.strerror or str(exc)
            raise RepositoryError(
                f"cannot write model `{name}` version {number} into {str(self.root)!r} ({detail})"
            ) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def _check_target(
        self, name: str, model_dir: Path, target: Path, config: ModelConfig, *, force: bool
    ) -> None:
        if model_dir.is_symlink() or (model_dir.exists() and not model_dir.is_dir()):
            raise RepositoryError(
                f"{str(model_dir)!r} exists and is not a model directory; expected a directory"
            )
        if not model_dir.exists():
            return
        config_path = model_dir / CONFIG_FILE
        if not config_path.is_file():
            raise RepositoryError(
                f"{str(model_dir)!r} exists but has no {CONFIG_FILE}; expected an empty slot or a tritonkit model"
            )
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            raise RepositoryError(f"{str(target)!r} exists and is not a version directory")
        if target.exists() and not force:
            raise RepositoryError(
                f"model `{name}` version {target.name} already exists; use a new version or --force to replace it"
            )
        others = [v for v in self.versions(name) if str(v) != target.name]
        if others and not force:
            existing = load(config_path)
            old, new = _signature(existing), _signature(config)
            if old != new:
                raise RepositoryError(
                    f"model `{name}` already exists with a different signature "
                    f"(existing: {_describe_signature(old)}; new: {_describe_signature(new)}); "
                    "use another --name or --force"
                )

    @staticmethod
    def _stage_files(version_dir: Path, entries: Mapping[PurePosixPath, Path | bytes]) -> None:
        for rel, value in entries.items():
            dest = version_dir.joinpath(*rel.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(value, bytes | bytearray | memoryview):
                dest.write_bytes(bytes(value))
                continue
            source = Path(value)
            if not source.is_file():
                raise ModelImportError(
                    f"file for `{rel}` not found: {str(source)!r}; expected an existing file"
                )
            shutil.copyfile(source, dest)

    @staticmethod
    def _commit_into_existing(staging: Path, staged_model: Path, model_dir: Path, target: Path) -> None:
        """Rename the staged version (and config) into an existing model dir; undo on failure."""
        aside = staging / "replaced-version"
        moved_aside = placed = False
        try:
            if target.exists():
                os.rename(target, aside)
                moved_aside = True
            os.rename(staged_model / target.name, target)
            placed = True
            # os.replace is atomic: readers see the old config or the new one, never a mix.
            os.replace(staged_model / CONFIG_FILE, model_dir / CONFIG_FILE)
        except BaseException:
            if placed:
                os.rename(target, staging / "failed-version")
            if moved_aside:
                os.rename(aside, target)
            raise
