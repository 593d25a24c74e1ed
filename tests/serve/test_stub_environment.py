"""The python-backend stubs run in the environment ``TRITONKIT_STUB_PYTHON`` names (a GPU host whose own
Python has NumPy 2 gives its stubs one with numpy<2), and in tritonkit's own by default."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from tests.support.processes import http_infer
from tests.support.python_models import DLPACK_IO, write_python_model

from tritonkit.serve.embedded import STUB_PYTHON_ENV, EmbeddedServer, ServerOptions

# Y = X + 1 where the stub can import the marker module that only the other environment holds, else Y = X.
MARKER_MODEL = (
    DLPACK_IO
    + """

try:
    import stubenv_marker  # noqa: F401

    _SHIFT = 1.0
except ImportError:
    _SHIFT = 0.0


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([_tensor_out("Y", _numpy_in(r, "X") + np.float32(_SHIFT))])
            for r in requests
        ]
"""
)


def _other_environment(root: Path) -> Path:
    """A virtual environment holding the marker module, with tritonkit's packages after its own."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python3"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    site = Path(purelib)
    (site / "stubenv_marker.py").write_text("")
    (site / "zz-tritonkit.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.mark.parametrize("named", [False, True], ids=["default", "named"])
def test_stubs_run_in_the_environment_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: bool
) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "which_env", MARKER_MODEL)
    if named:
        monkeypatch.setenv(STUB_PYTHON_ENV, str(_other_environment(tmp_path / "stubenv")))
    else:
        monkeypatch.delenv(STUB_PYTHON_ENV, raising=False)
    x = np.zeros((1, 4), np.float32)
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        y = http_infer(server.http_url, "which_env", x)
    np.testing.assert_array_equal(y, x + (1.0 if named else 0.0))


def test_malloc_settings_reach_the_server_unless_set_or_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tritonkit.serve.embedded import MALLOC_ENV, MALLOC_TUNING_ENV  # noqa: PLC0415 (only here)

    (tmp_path / "repo").mkdir()
    for key in MALLOC_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv(MALLOC_TUNING_ENV, raising=False)
    env = EmbeddedServer(tmp_path / "repo")._environment()
    assert (
        {k: env[k] for k in MALLOC_ENV}
        == MALLOC_ENV
        == {
            "MALLOC_MMAP_THRESHOLD_": "33554432",
            "MALLOC_TRIM_THRESHOLD_": "1073741824",
        }
    )
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")  # the user's own setting wins
    assert EmbeddedServer(tmp_path / "repo")._environment()["MALLOC_MMAP_THRESHOLD_"] == "65536"
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv(MALLOC_TUNING_ENV, "0")
    assert not set(MALLOC_ENV) & set(EmbeddedServer(tmp_path / "repo")._environment())
