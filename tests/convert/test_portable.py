"""The as-is import preset of the build pipeline (``import_onnx``, ``tritonkit build --onnx``):
config decisions, files and build.json written, and every bad input (one clear line, non-zero exit,
the repository exactly as before)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tritonkit.backends.runners import runner_path
from tritonkit.cli import main
from tritonkit.config import from_pbtxt
from tritonkit.convert.onnx_import import DEFAULT_MAX_BATCH_SIZE, import_onnx
from tritonkit.errors import ConfigError, ModelImportError, RepositoryError
from tritonkit.repository.store import ModelRepository

Snap = Callable[[Path], dict[str, str]]
Unwritable = Callable[[Path], contextlib.AbstractContextManager[None]]
GOLDEN = Path(__file__).parents[1] / "repository" / "golden"


# --- config decisions ----------------------------------------------------------------------------------
def test_batchable_graph_gets_batching_and_golden_config(
    onnx_file: Callable[[str], Path], tmp_path: Path
) -> None:
    path = import_onnx(onnx_file("two_in"), tmp_path / "repo", "two_in")
    text = (path.parent / "config.pbtxt").read_text()
    assert text == (GOLDEN / "two_in.pbtxt").read_text()
    cfg = from_pbtxt(text)
    assert cfg.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert [t.dims for t in cfg.inputs] == [[4], [4]]
    assert cfg.dynamic_batching is not None
    assert (path / "model.py").read_bytes() == runner_path().read_bytes()
    assert (path / "model.onnx").read_bytes() == onnx_file("two_in").read_bytes()


def test_fixed_first_axis_means_no_batching_and_full_dims(
    onnx_file: Callable[[str], Path], tmp_path: Path
) -> None:
    import_onnx(onnx_file("fixed"), tmp_path / "repo", "fixed")
    cfg = ModelRepository(tmp_path / "repo").read_config("fixed")
    assert cfg.max_batch_size == 0
    assert cfg.inputs[0].dims == [2, 3] and cfg.outputs[0].dims == [2, 3]
    assert cfg.dynamic_batching is None


def test_dynamic_non_batch_dims_and_rank_one_outputs(
    onnx_file: Callable[[str], Path], tmp_path: Path
) -> None:
    import_onnx(onnx_file("seq_sum"), tmp_path / "repo", "seq")
    cfg = ModelRepository(tmp_path / "repo").read_config("seq")
    assert cfg.input("ids").dims == [-1]
    assert (cfg.output("total").dims, cfg.output("total").reshape) == ([1], [])
    assert cfg.output("ids_i32").data_type == "INT32"


def test_explicit_options_reach_the_config(onnx_file: Callable[[str], Path], tmp_path: Path) -> None:
    import_onnx(
        onnx_file("two_in"),
        tmp_path / "repo",
        "m",
        max_batch_size=0,
        instance_count=2,
        instance_kind="KIND_GPU",
        version=5,
        parameters={"intra_op_threads": "2"},
    )
    repo = ModelRepository(tmp_path / "repo")
    cfg = repo.read_config("m")
    assert cfg.max_batch_size == 0 and cfg.inputs[0].dims == [-1, 4] and cfg.dynamic_batching is None
    assert (cfg.instance_groups[0].kind, cfg.instance_groups[0].count) == ("KIND_GPU", 2)
    assert cfg.parameters["intra_op_threads"] == "2"
    assert repo.versions("m") == [5]
    manifest = repo.read_manifest("m", 5)
    assert (manifest.target, manifest.precision, manifest.gpu_profile, manifest.accuracy) == (
        "portable",
        "fp32",
        None,
        None,
    )
    assert manifest.extra == {"opset": 17, "importer": "tritonkit.convert.portable.import_onnx"}


def test_external_data_travels_with_the_version(
    build_model: Callable[..., onnx.ModelProto], tmp_path: Path
) -> None:
    weight = numpy_helper.from_array(np.ones((8, 8), dtype=np.float32), "w")
    model = build_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [("x", TensorProto.FLOAT, ["b", 8])],
        [("y", TensorProto.FLOAT, ["b", 8])],
        [weight],
    )
    src = tmp_path / "ext.onnx"
    onnx.save(model, str(src), save_as_external_data=True, location="ext.weights", size_threshold=0)
    path = import_onnx(src, tmp_path / "repo", "ext")
    assert (path / "ext.weights").read_bytes() == (tmp_path / "ext.weights").read_bytes()
    (tmp_path / "ext.weights").unlink()
    with pytest.raises(ModelImportError, match=r"`ext.onnx` is not a valid ONNX model \(.*ext\.weights"):
        import_onnx(src, tmp_path / "repo", "ext2")


# --- bad input through the API ----------------------------------------------------------------------------
@pytest.fixture
def repo_with_model(onnx_file: Callable[[str], Path], tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    import_onnx(onnx_file("two_in"), root, "existing")
    return root


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_batch_size": -1}, ConfigError, "`max_batch_size` must be an integer >= 0; got -1"),
        ({"instance_count": 0}, ConfigError, "`instance_count` must be an integer >= 1; got 0"),
        ({"max_queue_delay_us": -5}, ConfigError, "`max_queue_delay_us` must be an integer >= 0; got -5"),
        (
            {"instance_kind": "KIND_TPU"},
            ConfigError,
            "`instance_kind` must be one of KIND_CPU, KIND_GPU, KIND_AUTO",
        ),
        ({"version": 0}, RepositoryError, "invalid version 0: expected an integer >= 1"),
        (
            {"parameters": {"tensor_exchange": "shm"}},
            ConfigError,
            "runner parameter `tensor_exchange` must be one of auto, dlpack, numpy; got 'shm'",
        ),
        (
            {"parameters": {"intra_op_threads": "0"}},
            ConfigError,
            "runner parameter `intra_op_threads` must be an integer >= 1; got '0'",
        ),
    ],
)
def test_bad_config_values_write_nothing(
    repo_with_model: Path,
    onnx_file: Callable[[str], Path],
    snap: Snap,
    kwargs: dict[str, object],
    error: type[Exception],
    message: str,
) -> None:
    before = snap(repo_with_model)
    with pytest.raises(error) as err:
        import_onnx(onnx_file("two_in"), repo_with_model, "new", **kwargs)  # type: ignore[arg-type]
    assert message in str(err.value)
    assert snap(repo_with_model) == before


def test_batching_a_fixed_graph_is_refused(
    repo_with_model: Path, onnx_file: Callable[[str], Path], snap: Snap
) -> None:
    before = snap(repo_with_model)
    with pytest.raises(ModelImportError, match=r"`max_batch_size` 8 needs a dynamic first axis.*m\[2, 3\]"):
        import_onnx(onnx_file("fixed"), repo_with_model, "fixed", max_batch_size=8)
    assert snap(repo_with_model) == before


def test_nothing_is_created_when_the_source_is_bad(tmp_path: Path) -> None:
    (tmp_path / "bad.onnx").write_bytes(b"\x00garbage")
    with pytest.raises(ModelImportError):
        import_onnx(tmp_path / "bad.onnx", tmp_path / "new_repo", "m")
    assert not (tmp_path / "new_repo").exists()


# --- bad input through the CLI: one line, non-zero exit, repository unchanged -------------------------------
def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *fragments: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tritonkit build: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0]


def test_cli_builds_and_reports_the_version(
    onnx_file: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        capsys, "build", "--onnx", str(onnx_file("gemm_names")), "--repo", str(tmp_path / "r")
    )
    assert code == 0
    assert "built `gemm_names` version 1" in out  # the name defaults to the file stem
    assert out.strip().endswith("(1 inputs, 1 outputs, max_batch_size 64)")
    assert ModelRepository(tmp_path / "r").versions("gemm_names") == [1]


@pytest.mark.parametrize(
    ("case", "fragments"),
    [
        ("malformed", ["`bad.onnx` is not a valid ONNX model ("]),
        ("missing", ["ONNX file not found", "absent.onnx"]),
        ("dtype", ["input `z` has dtype COMPLEX64", "expected one of BOOL"]),
        ("collision", ["model `existing` already exists with a different signature", "--force"]),
        ("version", ["model `existing` version 1 already exists", "--force"]),
        ("name", ["invalid model name '../evil'"]),
        ("batch", ["--max-batch-size: expected an integer >= 0", "got -2"]),
        ("instances", ["--instances: expected an integer >= 1, got 0"]),
        ("fixed", ["`max_batch_size` 4 needs a dynamic first axis"]),
    ],
)
def test_cli_bad_input(
    case: str,
    fragments: list[str],
    repo_with_model: Path,
    onnx_file: Callable[[str], Path],
    build_model: Callable[..., onnx.ModelProto],
    tmp_path: Path,
    snap: Snap,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07not really onnx")
    complex_model = tmp_path / "complex.onnx"
    onnx.save(
        build_model(
            [helper.make_node("Identity", ["z"], ["o"])],
            [("z", TensorProto.COMPLEX64, ["b", 2])],
            [("o", TensorProto.COMPLEX64, ["b", 2])],
        ),
        str(complex_model),
    )
    repo = str(repo_with_model)
    argv = {
        "malformed": ["--onnx", str(bad), "--name", "m"],
        "missing": ["--onnx", str(tmp_path / "absent.onnx"), "--name", "m"],
        "dtype": ["--onnx", str(complex_model), "--name", "m"],
        "collision": ["--onnx", str(onnx_file("gemm_names")), "--name", "existing"],
        "version": ["--onnx", str(onnx_file("two_in")), "--name", "existing", "--version", "1"],
        "name": ["--onnx", str(onnx_file("two_in")), "--name", "../evil"],
        "batch": ["--onnx", str(onnx_file("two_in")), "--name", "m", "--max-batch-size", "-2"],
        "instances": ["--onnx", str(onnx_file("two_in")), "--name", "m", "--instances", "0"],
        "fixed": ["--onnx", str(onnx_file("fixed")), "--name", "m", "--max-batch-size", "4"],
    }[case]
    before = snap(repo_with_model)
    code, out, err = run_cli(capsys, "build", *argv, "--repo", repo)
    assert code == 1
    assert out == ""
    assert_one_line_error(err, *fragments)
    assert snap(repo_with_model) == before


def test_cli_unwritable_repository(
    unwritable: Unwritable,
    repo_with_model: Path,
    onnx_file: Callable[[str], Path],
    snap: Snap,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = snap(repo_with_model)
    with unwritable(repo_with_model):
        code, _, err = run_cli(
            capsys, "build", "--onnx", str(onnx_file("two_in")), "--name", "n", "--repo", str(repo_with_model)
        )
    assert code == 1
    assert_one_line_error(err, "is not writable")
    assert snap(repo_with_model) == before


def test_cli_force_replaces_an_existing_version(
    repo_with_model: Path, onnx_file: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(
        capsys,
        "build",
        "--onnx",
        str(onnx_file("gemm_names")),
        "--name",
        "existing",
        "--version",
        "1",
        "--force",
        "--repo",
        str(repo_with_model),
    )
    assert code == 0 and "version 1" in out
    repo = ModelRepository(repo_with_model)
    assert repo.versions("existing") == [1]
    assert repo.read_config("existing").inputs[0].name == "input.1"


@pytest.mark.parametrize("argv", [["--name", "m"], ["spec.yaml", "--onnx", "x.onnx"]])
def test_cli_needs_exactly_one_source(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "build", *argv, "--repo", str(tmp_path / "r"))
    assert code == 2
    assert_one_line_error(err, "give exactly one of SPEC or --onnx FILE")
    assert not (tmp_path / "r").exists()


def test_cli_rejects_an_unknown_instance_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["build", "--onnx", "x.onnx", "--instance-kind", "KIND_TPU", "--repo", str(tmp_path / "r")])
    assert exc.value.code == 2
    assert "invalid choice: 'KIND_TPU'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_cli_import_writes_what_the_library_call_writes(
    onnx_file: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = onnx_file("two_in")
    import_onnx(source, tmp_path / "lib", "two_in")
    code, out, _ = run_cli(capsys, "build", "--onnx", str(source), "--repo", str(tmp_path / "cli"))
    assert code == 0 and len(out.strip().splitlines()) == 1  # the summary line only
    lib, cli = ModelRepository(tmp_path / "lib"), ModelRepository(tmp_path / "cli")
    assert cli.read_config("two_in") == lib.read_config("two_in")
    version = cli.version_dir("two_in", 1)
    assert sorted(p.name for p in version.iterdir()) == ["build.json", "model.onnx", "model.py"]
    assert (version / "model.onnx").read_bytes() == source.read_bytes()  # served as given, not cleaned up
    made, reference = cli.read_manifest("two_in", 1), lib.read_manifest("two_in", 1)
    assert (made.source_sha256, made.gpu_profile, made.extra) == (
        reference.source_sha256,
        None,
        {"opset": 17, "importer": "tritonkit.convert.portable.import_onnx"},
    )


def test_cli_flag_beats_environment_beats_preset(
    onnx_file: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRITONKIT_MAX_BATCH_SIZE", "8")
    monkeypatch.setenv("TRITONKIT_INSTANCES", "3")
    source = str(onnx_file("two_in"))
    assert run_cli(capsys, "build", "--onnx", source, "--name", "env", "--repo", str(tmp_path))[0] == 0
    # A flag equal to its default still counts as given.
    argv = ["--max-batch-size", "4", "--instances", "1"]
    assert (
        run_cli(capsys, "build", "--onnx", source, "--name", "flag", *argv, "--repo", str(tmp_path))[0] == 0
    )
    repo = ModelRepository(tmp_path)
    env, flag = repo.read_config("env"), repo.read_config("flag")
    assert (env.max_batch_size, env.instance_groups[0].count) == (8, 3)
    assert (flag.max_batch_size, flag.instance_groups[0].count) == (4, 1)
