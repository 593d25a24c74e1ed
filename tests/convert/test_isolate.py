"""Native steps run in a child worker (tritonkit.convert.isolate): a segfault there is one line naming
the step, the model and the signal, the build exits non-zero, the repository is untouched, and the
failure folder reproduces the step alone. Exporter failures are one line too, their detail in a log."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tritonkit import cli
from tritonkit.convert import isolate
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.spec.buildspec import parse_spec

SpecDict = Callable[..., dict[str, Any]]
ROOT = Path(__file__).parents[2]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), **extra)
    env.pop(isolate.FAILURE_DIR_ENV, None)  # the default place: $XDG_CACHE_HOME/tritonkit/failures
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tools"), str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_a_segfault_in_the_gate_is_one_line_and_leaves_the_repository_untouched(
    tmp_path: Path,
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: SpecDict,
    snap: Callable[[Path], dict[str, str]],
) -> None:
    repo = tmp_path / "repo"
    build_from_spec(parse_spec(tiny_spec(tiny_onnx, *tiny_data, precisions=["fp32"])), repo)
    before = snap(repo)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(tiny_spec(tiny_onnx, *tiny_data, precisions=["fp32", "fp16"])))
    crash = _env(tmp_path, **{isolate.TEST_CRASH_ENV: "fp16 accuracy gate"})
    result = subprocess.run(
        [sys.executable, "-m", "tritonkit", "build", str(spec), "--repo", str(repo), "--version", "2"],
        capture_output=True,
        text=True,
        env=crash,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    found = re.search(
        r"fp16 accuracy gate for model `tiny` crashed with SIGSEGV; nothing was written; "
        r"reproduce it alone: python (\S+/repro\.py) \(log: (\S+/worker\.log)\)$",
        lines[0],
    )
    assert found, lines[0]
    assert snap(repo) == before
    repro, log = Path(found.group(1)), Path(found.group(2))
    assert repro.parent.parent == tmp_path / "cache" / "tritonkit" / "failures"
    assert "Fatal Python error: Segmentation fault" in log.read_text()  # faulthandler, in the worker
    assert sorted(p.name for p in (repro.parent / "files").iterdir()) == ["00-fp32.onnx", "01-fp16.onnx"]
    # The step alone: the same crash with the hook set, the gate's answer without it.
    again = subprocess.run([sys.executable, str(repro)], capture_output=True, env=crash, check=False)
    assert again.returncode == -11
    alone = subprocess.run(
        [sys.executable, str(repro)], capture_output=True, text=True, env=_env(tmp_path), check=False
    )
    assert alone.returncode == 0 and "'output': 'y'" in alone.stdout, alone.stderr


def test_an_unexportable_module_is_one_line_naming_both_exporters_and_the_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "m", "source": {"torch": "tests.support.torch_zoo:unexportable"}})
    )
    assert cli.main(["build", str(spec), "--repo", str(tmp_path / "repo")]) == 1
    out, err = capfd.readouterr()
    line = err.strip()
    assert len(line.splitlines()) == 1 and "[torch.onnx]" not in out + err and "graph(" not in out + err
    assert re.search(
        r"export of _Mystery failed \(dynamo: No ONNX function found for .*tritonkit_test\.mystery.*; "
        r"torchscript: ONNX export failed on an operator with unrecognized namespace .*\); details: (\S+)$",
        line,
    ), line
    log = Path(line.rsplit("details: ", 1)[1])
    assert "Traceback" in log.read_text() and "the dynamo exporter failed" in log.read_text()
    assert not (tmp_path / "repo").exists()


def test_the_torchscript_exporter_is_a_choice_and_fails_on_the_attention_fast_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The case that broke: ViT's nn.MultiheadAttention eval fast path through the TorchScript exporter."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"name": "vit", "source": {"torch": "tests.support.torch_zoo:vit", "exporter": "torchscript"}}
        )
    )
    assert cli.main(["build", str(spec), "--repo", str(tmp_path / "repo")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert (
        "export of ViT failed (torchscript: Exporting the operator 'aten::_native_multi_head_attention'"
        in err
    )


def test_a_module_whose_class_cannot_travel_is_exported_from_its_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        yaml.safe_dump({"name": "local", "source": {"torch": "tests.support.torch_zoo:local_class"}})
    )
    assert cli.main(["build", str(spec), "--repo", str(tmp_path / "repo")]) == 0, capsys.readouterr().err
    assert (tmp_path / "repo" / "local_fp32" / "1" / "model.onnx").is_file()


def test_steps_share_one_worker_and_a_crash_starts_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with isolate.session("m"):
        first = isolate.run("pid", os.getpid)
        assert isolate.run("pid", os.getpid) == first != os.getpid()
        monkeypatch.setenv(isolate.TEST_CRASH_ENV, "pid")
        monkeypatch.setenv(isolate.FAILURE_DIR_ENV, str(tmp_path))
        with pytest.raises(isolate.StepCrashError, match=r"^pid for model `m` crashed with SIGSEGV; nothing"):
            isolate.run("pid", os.getpid)
        monkeypatch.delenv(isolate.TEST_CRASH_ENV)
        assert isolate.run("pid", os.getpid) not in (first, os.getpid())
