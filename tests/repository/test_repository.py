"""ModelRepository layout, atomic writes, manifests and model-name rules (no server needed)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig, load
from tritonkit.errors import ConfigError, ModelImportError, RepositoryError
from tritonkit.repository import (
    CONFIG_FILE,
    MANIFEST_FILE,
    STAGING_PREFIX,
    Manifest,
    ModelRepository,
    VersionWrite,
    sha256_file,
    validate_model_name,
)

Snap = Callable[[Path], dict[str, str]]
Unwritable = Callable[[Path], contextlib.AbstractContextManager[None]]


def config(name: str = "m", dims: list[int] | None = None) -> ModelConfig:
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=4,
        inputs=[TensorConfig("x", "FP32", dims or [3])],
        outputs=[TensorConfig("y", "FP32", dims or [3])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.bin"
    path.write_bytes(b"weights")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> ModelRepository:
    return ModelRepository(tmp_path / "repo", create=True)


def write(repo: ModelRepository, source: Path, name: str = "m", **kwargs: object) -> Path:
    cfg = kwargs.pop("cfg", None) or config(name)
    files = kwargs.pop("files", None) or {"model.py": b"# runner\n", "model.bin": source}
    return repo.write_version(name, cfg, files, Manifest.create(source), **kwargs)  # type: ignore[arg-type]


# --- model names ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["resnet50", "bert-base.fp16", "A_1", "x" * 200, "0"])
def test_valid_model_names_pass(name: str) -> None:
    assert validate_model_name(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "non-empty"),
        ("../evil", "'/'"),
        ("a/b", "'/'"),
        ("..", "not starting with '.'"),
        (".hidden", "not starting with '.'"),
        ("sp ace", "' '"),
        ("tab\tname", "'\\t'"),
        ("x" * 201, "at most 200"),
        ("naïve", "'ï'"),
    ],
)
def test_invalid_model_names_are_refused_with_the_reason(name: str, why: str) -> None:
    with pytest.raises(RepositoryError) as err:
        validate_model_name(name)
    assert "invalid model name" in str(err.value)
    assert why in str(err.value)


# --- layout and reading ------------------------------------------------------------------------------
def test_write_version_lays_out_config_version_and_manifest(repo: ModelRepository, source: Path) -> None:
    path = write(repo, source)
    assert path == repo.root / "m" / "1"
    assert sorted(p.name for p in path.iterdir()) == ["build.json", "model.bin", "model.py"]
    assert (path / "model.bin").read_bytes() == b"weights"
    assert repo.read_config("m") == load(repo.root / "m" / "config.pbtxt")
    assert repo.read_config("m").inputs[0].dims == [3]
    manifest = repo.read_manifest("m", 1)
    assert manifest.source == str(source.resolve())
    assert manifest.source_sha256 == sha256_file(source)
    assert manifest.tools["onnx"] and manifest.tools["python"]
    assert repo.models() == ["m"]
    assert repo.versions("m") == [1]
    assert repo.next_version("m") == 2
    assert not any(p.name.startswith(".") for p in repo.root.iterdir()), "no staging directory left behind"


def test_versions_are_numbered_and_listed(repo: ModelRepository, source: Path) -> None:
    write(repo, source)
    write(repo, source)
    write(repo, source, version=7)
    (repo.root / "m" / "notes").mkdir()  # Triton ignores non-numeric subdirectories; so do we
    assert repo.versions("m") == [1, 2, 7]
    assert repo.next_version("m") == 8
    assert repo.versions("absent") == []


def test_nested_file_names_and_bytes(repo: ModelRepository, source: Path) -> None:
    path = write(repo, source, files={"model.py": b"", "tokenizer/vocab.txt": b"a\nb\n"})
    assert (path / "tokenizer" / "vocab.txt").read_text() == "a\nb\n"


@pytest.mark.parametrize("bad", ["../x", "/abs", "a/../b", "", "build.json", "a\\b"])
def test_file_names_escaping_the_version_are_refused(
    repo: ModelRepository, source: Path, snap: Snap, bad: str
) -> None:
    before = snap(repo.root)
    with pytest.raises(RepositoryError, match="file name"):
        write(repo, source, files={bad: b"x"})
    assert snap(repo.root) == before


def test_manifest_round_trips_and_rejects_malformed_json(source: Path) -> None:
    manifest = Manifest.create(
        source, precision="fp16", target="tensorrt", gpu_profile="t4", accuracy={"f1": 0.9}
    )
    again = Manifest.from_json(manifest.to_json())
    assert again == manifest
    assert json.loads(manifest.to_json())["schema"] == 1
    with pytest.raises(RepositoryError, match="not valid JSON"):
        Manifest.from_json("{nope")
    with pytest.raises(RepositoryError, match="lacks required keys: source_sha256"):
        Manifest.from_json(json.dumps({"source": "a", "precision": "fp32", "target": "portable"}))
    newer = json.loads(manifest.to_json()) | {"future_field": 1}
    assert Manifest.from_json(json.dumps(newer)) == manifest  # unknown keys from newer versions are ignored


def test_manifest_of_a_missing_source_is_an_import_error(tmp_path: Path) -> None:
    with pytest.raises(ModelImportError, match="source file not found"):
        Manifest.create(tmp_path / "missing.onnx")


def test_missing_repository_is_refused_unless_created(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match="does not exist"):
        ModelRepository(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(RepositoryError, match="not a directory"):
        ModelRepository(tmp_path / "file")


def test_a_reservation_creates_nothing_and_its_commit_writes(tmp_path: Path, source: Path) -> None:
    root = tmp_path / "new"
    reservation = ModelRepository.reserve(root, ["m"], 3, force=False)
    assert not root.exists()  # a build that fails after reserving leaves no repository
    (path,) = reservation.commit(
        [VersionWrite("m", config(), {"model.py": b"# runner\n"}, Manifest.create(source))]
    )
    assert path == root.resolve() / "m" / "3" and (path / "model.py").is_file()
    with pytest.raises(RepositoryError, match=r"version 3 already exists; use a new version or --force"):
        ModelRepository.reserve(root, ["m"], 3, force=False)
    assert ModelRepository.reserve(root, ["m"], 3, force=True).commit(
        [VersionWrite("m", config(), {"model.py": b"# again\n"}, Manifest.create(source))]
    ) == [path]
    assert (path / "model.py").read_bytes() == b"# again\n"


# --- refusals leave the repository unchanged ------------------------------------------------------------
def test_existing_version_is_not_overwritten_without_force(
    repo: ModelRepository, source: Path, snap: Snap
) -> None:
    write(repo, source)
    before = snap(repo.root)
    with pytest.raises(RepositoryError, match=r"version 1 already exists; use a new version or --force"):
        write(repo, source, version=1)
    assert snap(repo.root) == before


def test_force_replaces_a_version_atomically(repo: ModelRepository, source: Path, tmp_path: Path) -> None:
    write(repo, source)
    other = tmp_path / "other.bin"
    other.write_bytes(b"new weights")
    path = write(repo, other, version=1, force=True, files={"model.py": b"#", "model.bin": other})
    assert (path / "model.bin").read_bytes() == b"new weights"
    assert repo.versions("m") == [1]
    assert repo.read_manifest("m", 1).source_sha256 == sha256_file(other)
    assert [p.name for p in repo.root.iterdir()] == ["m"]


def test_different_signature_under_an_existing_name_is_refused(
    repo: ModelRepository, source: Path, snap: Snap
) -> None:
    write(repo, source)
    before = snap(repo.root)
    with pytest.raises(RepositoryError, match="already exists with a different signature") as err:
        write(repo, source, cfg=config(dims=[5]))
    assert "x:FP32[3]" in str(err.value) and "x:FP32[5]" in str(err.value)
    assert snap(repo.root) == before
    write(repo, source, cfg=config(dims=[5]), force=True)
    assert repo.read_config("m").inputs[0].dims == [5]


def test_invalid_config_is_refused_before_anything_is_written(
    repo: ModelRepository, source: Path, snap: Snap
) -> None:
    before = snap(repo.root)
    bad = config()
    bad.max_batch_size = -3
    with pytest.raises(ConfigError, match="max_batch_size"):
        write(repo, source, cfg=bad)
    with pytest.raises(ConfigError, match="does not match model name"):
        write(repo, source, name="other", cfg=config("m"))
    with pytest.raises(RepositoryError, match="invalid version"):
        write(repo, source, version=0)
    assert snap(repo.root) == before


def test_missing_source_file_fails_after_staging_without_a_trace(
    repo: ModelRepository, source: Path, snap: Snap, tmp_path: Path
) -> None:
    write(repo, source)
    before = snap(repo.root)
    with pytest.raises(ModelImportError, match="not found"):
        write(repo, source, files={"model.py": b"", "model.bin": tmp_path / "gone.bin"})
    assert snap(repo.root) == before


def test_stray_directory_without_config_is_not_adopted(
    repo: ModelRepository, source: Path, snap: Snap
) -> None:
    (repo.root / "m").mkdir()
    (repo.root / "m" / "junk.txt").write_text("user data")
    before = snap(repo.root)
    with pytest.raises(RepositoryError, match=r"has no config\.pbtxt"):
        write(repo, source)
    assert snap(repo.root) == before


def test_symlinked_model_directory_is_refused(repo: ModelRepository, source: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo.root / "m").symlink_to(outside)
    with pytest.raises(RepositoryError, match="not a model directory"):
        write(repo, source)
    assert list(outside.iterdir()) == []


def test_unwritable_repository_is_reported_and_unchanged(
    unwritable: Unwritable, repo: ModelRepository, source: Path, snap: Snap
) -> None:
    write(repo, source)
    before = snap(repo.root)
    with unwritable(repo.root), pytest.raises(RepositoryError, match="is not writable"):
        write(repo, source, name="n", cfg=config("n"))
    assert snap(repo.root) == before


def test_failed_rename_into_a_model_rolls_back(
    unwritable: Unwritable, repo: ModelRepository, source: Path, snap: Snap
) -> None:
    """The repository root is writable (staging works) but the model directory is not."""
    write(repo, source)
    before = snap(repo.root)
    with (
        unwritable(repo.root / "m"),
        pytest.raises(RepositoryError, match="cannot write model `m` version 2"),
    ):
        write(repo, source)
    assert snap(repo.root) == before


def test_failed_force_replace_restores_the_old_version(
    repo: ModelRepository, source: Path, snap: Snap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last step (replacing config.pbtxt) fails after the old version 1 was moved aside and the new
    one renamed in: both renames must be undone, leaving the repository exactly as it was."""
    write(repo, source)
    before = snap(repo.root)
    live_config = repo.root / "m" / CONFIG_FILE
    real_replace = os.replace
    seen: list[list[str]] = []

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == live_config:  # the staged config's own temp-file rename goes through
            seen.append(sorted(p.name for p in live_config.parent.iterdir()))
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(RepositoryError, match=r"cannot write model `m` version 1 .*\(Input/output error\)"):
        write(repo, source, files={"model.py": b"# new runner\n", "model.bin": source}, version=1, force=True)
    # The failure came after the new version was in place (so the rollback had work to do) ...
    assert seen == [["1", CONFIG_FILE]]
    # ... and the rollback put the old version 1 (old runner bytes) back, with no staging left.
    assert snap(repo.root) == before
    assert (repo.root / "m" / "1" / "model.py").read_bytes() == b"# runner\n"


def test_staging_directories_are_hidden_and_listed_when_stale(repo: ModelRepository, source: Path) -> None:
    write(repo, source)
    stale = repo.root / f"{STAGING_PREFIX}killed"
    (stale / "m" / "1").mkdir(parents=True)
    assert repo.models() == ["m"]
    assert repo.stale_staging() == [stale]
    assert (repo.root / "m" / "1" / MANIFEST_FILE).is_file()
