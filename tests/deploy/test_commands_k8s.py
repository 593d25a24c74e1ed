"""``tritonkit k8s render|check`` through the real CLI entry point: output, files, exit codes, one-line errors."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tritonkit import deploy
from tritonkit.cli import main

REPO_K8S = Path(__file__).resolve().parents[2] / "k8s"


def test_render_to_stdout_is_the_overlay(
    capsys: pytest.CaptureFixture[str], rendered_all: dict[str, list[dict]]
) -> None:
    assert main(["k8s", "render", "--overlay", "t4"]) == 0
    assert deploy.parse_objects(capsys.readouterr().out) == rendered_all["t4"]


def test_render_to_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rendered_all: dict[str, list[dict]]
) -> None:
    out = tmp_path / "dev.yaml"
    assert main(["k8s", "render", "--overlay", "dev", "--output", str(out)]) == 0
    assert deploy.parse_objects(out.read_text()) == rendered_all["dev"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.yaml"]  # no temp file left behind
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--overlay", "prod"],
            "tritonkit k8s: error: unknown overlay `prod`; expected one of: dev, loadtest, t4",
        ),
        (
            ["--overlay", "dev", "--output", "/nonexistent/dir/dev.yaml"],
            "folder /nonexistent/dir does not exist",
        ),
    ],
)
def test_render_bad_input_is_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["k8s", "render", *argv]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err


def test_unknown_kubernetes_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["k8s", "check", "--overlay", "dev", "--checkov", "off", "--kubernetes-version", "1.99"]) == 1
    err = capsys.readouterr().err.strip()
    pattern = (
        r"tritonkit k8s: error: no Kubernetes schemas for version `1\.99`; expected one from 1\.\d+ to 1\.\d+"
    )
    assert re.fullmatch(pattern, err), err


def test_missing_kubectl_through_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRITONKIT_KUBECTL", "/nonexistent/kubectl")
    assert main(["k8s", "check", "--checkov", "off"]) == 1
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("tritonkit k8s: error: `kubectl` not found on PATH; install kubectl")
        and "\n" not in err
    )


def test_check_passes_on_the_repository(
    capsys: pytest.CaptureFixture[str], rendered_all: dict[str, list[dict]]
) -> None:
    assert main(["k8s", "check", "--checkov", "off"]) == 0
    out = capsys.readouterr().out
    assert "t4: 18 objects; schemas (Kubernetes 1.30, strict): ok; checklist: ok" in out
    assert out.strip().endswith("3 overlays OK")


def test_check_fails_when_a_source_file_regresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The CI gate end to end: a copy of k8s/ whose exit timeout no longer fits in the grace period.
    tree = tmp_path / "k8s"
    shutil.copytree(REPO_K8S, tree)
    env = tree / "base" / "triton-server-args.env"
    env.write_text(env.read_text().replace("TRITON_EXIT_TIMEOUT_SECS=30", "TRITON_EXIT_TIMEOUT_SECS=90"))
    code = main(["k8s", "check", "--overlay", "dev", "--checkov", "off", "--k8s-dir", str(tree)])
    captured = capsys.readouterr()
    assert code == 1
    assert (
        "PROBLEM dev: Deployment/triton: terminationGracePeriodSeconds 60 must exceed preStop sleep 10 "
        "+ --exit-timeout-secs 90" in captured.out
    )
    assert captured.err.strip() == "1 problem"
