"""`tritonkit infer` and `tritonkit models` against the real server, through the CLI entry point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tritonkit.cli import main
from tritonkit.serve.embedded import EmbeddedServer, free_port


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_infer_prints_outputs(
    server: EmbeddedServer, protocol: str, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.save(tmp_path / "x.npy", x)
    code, out, err = _cli(
        capsys,
        "infer",
        "--url",
        url,
        "--protocol",
        protocol,
        "--model",
        "add",
        "--input",
        f"X={tmp_path / 'x.npy'}",
    )
    assert code == 0, err
    assert out.splitlines()[0] == "Y  dtype=float32  shape=[2, 4]"
    assert "[[1. 2. 3. 4.]" in out and "[5. 6. 7. 8.]]" in out


def test_infer_text_writes_npy(
    server: EmbeddedServer, protocol: str, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(
        capsys,
        "infer",
        "--url",
        url,
        "--protocol",
        protocol,
        "--model",
        "echo",
        "--text",
        "héllo",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert code == 0, err
    assert out.strip() == str(tmp_path / "out" / "OUT.npy")
    saved = np.load(tmp_path / "out" / "OUT.npy", allow_pickle=False)
    assert saved.shape == (1, 1) and saved[0, 0] == "héllo".encode().upper()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["OUT.npy"]


def test_infer_selected_output_and_version(
    url: str, protocol: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = np.ones((1, 3), np.float32)
    np.save(tmp_path / "a.npy", a)
    code, out, err = _cli(
        capsys,
        "infer",
        "--url",
        url,
        "--protocol",
        protocol,
        "--model",
        "pair",
        "--model-version",
        "1",
        "--input",
        f"A={tmp_path / 'a.npy'}",
        "--input",
        f"B={tmp_path / 'a.npy'}",
        "--output",
        "SUM",
    )
    assert code == 0, err
    assert out.splitlines()[0] == "SUM  dtype=float32  shape=[1, 3]" and "DIFF" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "add", "--input", "X"], "--input expects NAME=FILE.npy, given 'X'"),
        (
            ["--model", "add", "--input", "X=/nonexistent.npy"],
            "input file /nonexistent.npy for `X` not found",
        ),
        (
            ["--model", "add", "--text", "hi"],
            "--text needs a model with exactly one BYTES input; model `add` has `X` FP32",
        ),
        (["--model", "nope", "--text", "hi"], "Request for unknown model: 'nope' is not found"),
    ],
)
def test_infer_user_errors_are_one_line(
    url: str, protocol: str, args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(
        capsys, "infer", "--url", url, "--protocol", protocol, *args, "--output-dir", str(tmp_path / "out")
    )
    assert code == 1
    assert len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "out").exists(), "nothing is written when the request fails"


def test_infer_wrong_shape_writes_nothing(
    url: str, protocol: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    code, _, err = _cli(
        capsys,
        "infer",
        "--url",
        url,
        "--protocol",
        protocol,
        "--model",
        "add",
        "--input",
        f"X={tmp_path / 'x.npy'}",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert code == 1 and "expects shape [-1, 4], given [2, 3]" in err
    assert not (tmp_path / "out").exists()


def test_wrong_port_for_protocol(server: EmbeddedServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "models", "--url", server.grpc_url, "--protocol", "http", "--timeout", "5")
    assert code == 1 and "is this the gRPC port? pass protocol='grpc'" in err


def test_unreachable_server_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "models", "--url", f"127.0.0.1:{free_port()}", "--timeout", "2")
    assert code == 1 and out == ""
    assert err.startswith("tritonkit models: error: repository index at http://127.0.0.1:")
    assert "server not reachable" in err and len(err.strip().splitlines()) == 1


def test_models_table(
    server: EmbeddedServer, protocol: str, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(
        capsys,
        "models",
        "--url",
        url,
        "--protocol",
        protocol,
        "--header",
        f"tritonkit-admin-key={server.admin_key}",
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["MODEL", "VERSIONS", "STATE", "INPUTS", "OUTPUTS"]
    rows = {line.split()[0]: line.split(maxsplit=3) for line in lines[1:]}
    assert set(rows) == {"add", "echo", "fixed", "pair", "queued", "slow"}
    assert rows["pair"][1:3] == ["1", "READY"]
    assert rows["pair"][3].split() == ["A:FP32[-1,3],", "B:FP32[-1,3]", "SUM:FP32[-1,3],", "DIFF:FP32[-1,3]"]


@pytest.mark.parametrize("how", ["option", "environment"])
def test_models_with_admin_key(
    server: EmbeddedServer,
    protocol: str,
    url: str,
    how: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRITONKIT_ADMIN_KEY", raising=False)
    argv = ["models", "--url", url, "--protocol", protocol]
    if how == "option":
        argv += ["--admin-key", server.admin_key]
    else:
        monkeypatch.setenv("TRITONKIT_ADMIN_KEY", server.admin_key)
    code, out, err = _cli(capsys, *argv)
    assert code == 0 and err == ""
    names = {line.split()[0] for line in out.splitlines()[1:]}
    assert names == {"add", "echo", "fixed", "pair", "queued", "slow"}


def test_models_restricted_index(
    url: str, protocol: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITONKIT_ADMIN_KEY", raising=False)
    code, _, err = _cli(capsys, "models", "--url", url, "--protocol", protocol)
    assert code == 1 and "restricted" in err and len(err.strip().splitlines()) == 1
    assert "--admin-key KEY or TRITONKIT_ADMIN_KEY (`tritonkit serve` prints it)" in err
    code, out, err = _cli(
        capsys, "models", "--url", url, "--protocol", protocol, "--model", "fixed", "--model", "nope"
    )
    assert code == 0, err
    assert err.strip() == (
        "tritonkit models: the repository index is restricted; listing the --model names only "
        "(for every model: --admin-key KEY or TRITONKIT_ADMIN_KEY)"
    )
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows == [
        ["fixed", "1", "READY", "A:INT64[2,3]", "Z:INT64[2,3]"],
        ["nope", "-", "NOT_FOUND", "-", "-"],
    ]


@pytest.mark.slow
def test_serve_prints_a_key_line_that_models_accepts(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copyable line `tritonkit serve` prints opens `tritonkit models` on that server."""
    port = free_port()
    # stopped once `tritonkit models` has its answer: nothing in flight for the exit timeout to wait for
    serve = ["serve", "--repo", str(repo), "--http-port", str(port), "--exit-timeout", "1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", *serve],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    try:
        assert process.stdout.readline().startswith("tritonkit serve: ready")
        line = process.stdout.readline()
        assert "export TRITONKIT_ADMIN_KEY=" in line
        key = line.split("export TRITONKIT_ADMIN_KEY=", 1)[1].rstrip(")\n")
        monkeypatch.setenv("TRITONKIT_ADMIN_KEY", key)
        code, out, err = _cli(capsys, "models", "--url", f"127.0.0.1:{port}")
        assert code == 0 and err == ""
        assert "fixed" in {row.split()[0] for row in out.splitlines()[1:]}
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
