"""The model repository on disk: model-name rules, layout, and every write into it.

Layout (what Triton reads, plus tritonkit's manifest)::

    <repo>/<model>/config.pbtxt
    <repo>/<model>/<version>/<artifact files...>
    <repo>/<model>/<version>/build.json

:class:`ModelRepository` owns every write into a repository: versions (:meth:`~ModelRepository.write_versions`,
what a build writes), a model's config rewritten in place and a model cloned under a new name with
another config (:meth:`~ModelRepository.write_config`, :meth:`~ModelRepository.clone_model`, what
``tritonkit tune --write`` does). A build takes its place first (:meth:`~ModelRepository.reserve`: the
version-conflict read, before any build work, creating nothing) and writes once, through the
:class:`Reservation`'s ``commit``. Each write holds the repository's lock (:mod:`.staging`) from its checks to
its last rename, assembles what it adds in a staging folder inside the repository and renames it into
place; an existing version is replaced only with ``force`` (old one renamed aside, new one renamed in,
old one deleted). Any error leaves the repository as it was. Triton 2.51 treats *every* folder at
the repository root as a model, hidden ones included (checked by hand: a leftover ``.staging-x/1``
made the server try to load a model called ``.staging-x``), so the staging folder is always removed
before a write returns, and the next write (or ``tritonkit serve``) removes one a killed writer left;
``tritonkit check`` reports it.

The rule for what may be written is in one place, :meth:`ModelRepository.check_write`: a version
that exists is replaced only with ``force``, and a version whose :class:`~.signature.Signature`
(backend, batching, I/O) differs from the model's config only with ``force``, the refusal naming each
differing field with both values and whether ``tritonkit tune`` changed it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tritonkit.atomic import fsync_dir, fsync_tree, leftovers, replace_dir, write_text
from tritonkit.config import ModelConfig, load, save, validate
from tritonkit.errors import ConfigError, RepositoryError, read_text
from tritonkit.repository.manifest import MANIFEST_FILE, Manifest
from tritonkit.repository.signature import CONFIG_ORIGIN_FILE, describe_differences, origin_record
from tritonkit.repository.staging import (
    commit_into_existing,
    locked,
    new_staging,
    remove_staging,
    stage_files,
    staging_dirs,
)

__all__ = ["CONFIG_FILE", "ModelRepository", "Reservation", "VersionWrite", "validate_model_name"]

CONFIG_FILE = "config.pbtxt"

_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")
_MAX_NAME = 200  # well under the 255-byte filename limit, leaving room for suffixes


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


def _validate_version(version: object) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RepositoryError(f"invalid version {version!r}: expected an integer >= 1")
    return version


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


@dataclass(frozen=True)
class VersionWrite:
    """One version to add: model ``name``, its config, its files (a relative name inside the version
    mapped to a source path or the bytes to write) and its ``build.json``."""

    name: str
    config: ModelConfig
    files: Mapping[str, Path | bytes]
    manifest: Manifest


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
                path.mkdir(parents=True, exist_ok=True)  # two writers may create it at once
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
        """Staging folders at the root: a live writer's, or left by a killed one (Triton would try to
        load them as models)."""
        return staging_dirs(self.root)

    def remove_stale_staging(self, *, wait_s: float = 0.0) -> list[Path]:
        """Remove the staging folders killed writers left (waiting up to ``wait_s`` for a running
        writer to finish); returns what was removed. Nothing is removed while another writer holds the
        lock, nor a folder whose writer (the pid in its name) still runs."""
        try:
            with locked(self.root, timeout=wait_s):
                return remove_staging(self.root)
        except RepositoryError:
            return []  # busy or not writable: the next writer cleans up

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

    # --- the rule ------------------------------------------------------------------------------
    def check_write(
        self,
        name: str,
        config: ModelConfig | None,
        version: int | None,
        *,
        force: bool,
        proposed: str = "new",
    ) -> None:
        """Refuse (RepositoryError, one line) what a write of ``config`` as ``name`` version ``version``
        may not do: replace a version, or change the model's signature, without ``force``; write where
        something that is not a model is. ``config`` None checks the version alone (before a build);
        ``proposed`` names the new side in a signature refusal (``spec``, ``new``)."""
        model_dir = self.root / validate_model_name(name)
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
        target = model_dir / str(version) if version is not None else None
        if target is not None and (target.is_symlink() or (target.exists() and not target.is_dir())):
            raise RepositoryError(f"{str(target)!r} exists and is not a version directory")
        if target is not None and target.exists() and not force:
            raise RepositoryError(
                f"model `{name}` version {version} already exists; use a new version or --force to replace it"
            )
        others = [v for v in self.versions(name) if v != version]
        if config is None or not others or force:
            return
        differences = describe_differences(model_dir, load(config_path), config, proposed)
        if differences:
            raise RepositoryError(
                f"model `{name}` already exists with a different signature: {differences}; "
                "use another --name or --force"
            )

    def check_free(self, names: Sequence[str], version: int | None, *, force: bool) -> None:
        """:meth:`check_write` of each name before anything is built (its config is not known yet)."""
        for name in names:
            self.check_write(name, None, version, force=force)

    @staticmethod
    def reserve(
        repo: ModelRepository | str | os.PathLike[str],
        names: Sequence[str],
        version: int | None,
        *,
        force: bool,
        proposed: str = "new",
    ) -> Reservation:
        """A build's place in ``repo``, taken before any build work: ``names`` at ``version`` checked
        free (:meth:`check_free`; a repository that does not exist is not created, and passes). The
        build's one write is :meth:`Reservation.commit`."""
        if not isinstance(repo, ModelRepository):
            if not Path(repo).exists():
                return Reservation(Path(repo), version, force, proposed)
            repo = ModelRepository(repo)
        repo.check_free(names, version, force=force)
        return Reservation(repo, version, force, proposed)

    # --- writing ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """The repository's lock, with what killed writers left removed."""
        with locked(self.root):
            remove_staging(self.root)
            yield

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
        """Add ``<name>/<version>/`` (``files`` + ``build.json``) and write ``<name>/config.pbtxt``: one
        :meth:`write_versions`. Returns the version directory."""
        (path,) = self.write_versions(
            [VersionWrite(name, config, files, manifest)], version=version, force=force
        )
        return path

    def write_versions(
        self,
        writes: Sequence[VersionWrite],
        *,
        version: int | None = None,
        force: bool = False,
        proposed: str = "new",
    ) -> list[Path]:
        """Add one version per item, all checked (:meth:`check_write`) before the first is written.

        ``version`` defaults to each model's next free number, chosen under the repository's lock, so
        two writers of one model get a version each. Returns the version directories. A refusal or a
        failure before the first rename leaves the repository as it was.
        """
        entries = []
        for item in writes:
            self._checked(item.name, item.config)
            entries.append({_relative_file_name(key): value for key, value in item.files.items()})
        number = None if version is None else _validate_version(version)
        with self._writing():
            numbers = []
            for item in writes:
                chosen = self.next_version(item.name) if number is None else number
                self.check_write(item.name, item.config, chosen, force=force, proposed=proposed)
                numbers.append(chosen)
            return [
                self._commit(item, files, chosen, force)
                for item, files, chosen in zip(writes, entries, numbers, strict=True)
            ]

    def _commit(
        self, item: VersionWrite, entries: Mapping[PurePosixPath, Path | bytes], number: int, force: bool
    ) -> Path:
        """Stage and rename one version into place (the caller holds the lock and checked it)."""
        name = item.name
        model_dir = self.root / name
        target = model_dir / str(number)
        staging = new_staging(self.root)
        try:
            staged_model = staging / name
            staged_version = staged_model / str(number)
            staged_version.mkdir(parents=True)
            stage_files(staged_version, entries)
            (staged_version / MANIFEST_FILE).write_text(item.manifest.to_json(), encoding="utf-8")
            save(item.config, staged_model / CONFIG_FILE)
            fsync_tree(staged_model)
            if model_dir.exists():
                commit_into_existing(staging, staged_model, model_dir, target, CONFIG_FILE, force=force)
            else:
                os.rename(staged_model, model_dir)
            # Committed: from here on an error must not be reported as "nothing written".
            with contextlib.suppress(OSError):
                (model_dir / CONFIG_ORIGIN_FILE).unlink(missing_ok=True)  # it described the old config
                fsync_dir(model_dir)
                fsync_dir(self.root)
        except OSError as exc:
            detail = exc.strerror or str(exc)
            raise RepositoryError(
                f"cannot write model `{name}` version {number} into {str(self.root)!r} ({detail})"
            ) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def _checked(self, name: str, config: ModelConfig) -> None:
        validate_model_name(name)
        if config.name != name:
            raise ConfigError(f"config name `{config.name}` does not match model name `{name}`")
        validate(config)

    def write_config(self, name: str, config: ModelConfig, *, writer: str) -> str:
        """Replace model ``name``'s ``config.pbtxt`` with ``config`` atomically, recording ``writer``
        (``tritonkit tune``) and the signature fields it changed in ``config.origin.json``; returns the
        old config's text. The versions stay as they are."""
        self._checked(name, config)
        with self._writing():
            model_dir = self.root / name
            path = model_dir / CONFIG_FILE
            if not path.is_file():
                raise RepositoryError(f"model `{name}` has no {CONFIG_FILE} in {str(self.root)!r}")
            old_text = path.read_text(encoding="utf-8")
            for leftover in leftovers(model_dir, CONFIG_FILE):  # of write-backs killed mid-write
                leftover.unlink(missing_ok=True)
            record = origin_record(model_dir, load(path), config, writer)
            save(config, path, check=False)
            write_text(model_dir / CONFIG_ORIGIN_FILE, record, error=RepositoryError)
        return old_text

    def clone_model(self, source: str, name: str, config: ModelConfig, *, writer: str) -> Path:
        """A new model ``name``: the versions of model ``source`` copied, ``config`` (named ``name``) as
        its config. Triton keeps one config per model, so "the tuned config as a new version" is a new
        model beside the old one; it appears whole or not at all. Returns its folder."""
        self._checked(name, config)
        source_dir = self.model_dir(source)
        with self._writing():
            if not (source_dir / CONFIG_FILE).is_file():
                raise RepositoryError(f"model `{source}` has no {CONFIG_FILE} in {str(self.root)!r}")
            target = self.root / name
            if target.exists() or target.is_symlink():
                raise RepositoryError(f"model folder {target} already exists; expected a new model name")
            staging = new_staging(self.root)
            try:
                staged = staging / name
                staged.mkdir()
                for entry in source_dir.iterdir():
                    if entry.is_dir() and entry.name.isdigit():
                        shutil.copytree(entry, staged / entry.name, symlinks=True)
                save(config, staged / CONFIG_FILE, check=False)
                record = origin_record(source_dir, load(source_dir / CONFIG_FILE), config, writer)
                (staged / CONFIG_ORIGIN_FILE).write_text(record, encoding="utf-8")
                replace_dir(staged, target)
            except OSError as exc:
                raise RepositoryError(
                    f"cannot write model `{name}` into {str(self.root)!r} ({exc.strerror or exc})"
                ) from None
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return target


@dataclass(frozen=True)
class Reservation:
    """What :meth:`ModelRepository.reserve` checked free, and the one write of what the build made."""

    repo: ModelRepository | Path  # a Path: the repository did not exist when reserved
    version: int | None
    force: bool
    proposed: str

    def commit(self, writes: Sequence[VersionWrite]) -> list[Path]:
        """:meth:`ModelRepository.write_versions` of ``writes`` (checked again under the lock), creating
        the repository first if it did not exist: only a build that made everything creates one."""
        repo = (
            self.repo if isinstance(self.repo, ModelRepository) else ModelRepository(self.repo, create=True)
        )
        return repo.write_versions(writes, version=self.version, force=self.force, proposed=self.proposed)
