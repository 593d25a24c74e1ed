"""Suite-wide test set-up: the `gpu` and `tensorrt` markers skip, with the reason printed, where the
hardware or library is missing; everything else runs against real parts."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tritonkit.convert import isolate

# Fixtures shared across test packages live in plain modules under tests/support/.
pytest_plugins = ("tests.support.onnx_zoo", "tests.support.measure_server")


@functools.cache
def _tensorrt_missing() -> str | None:
    try:
        import tensorrt  # noqa: F401, PLC0415 (probed: exists only where TensorRT is installed)
    except Exception as exc:  # ImportError, or a broken install raising OSError
        return f"needs TensorRT: `import tensorrt` failed here ({type(exc).__name__}: {exc})"
    return None


@functools.cache
def _gpu_missing() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "needs an NVIDIA GPU: `nvidia-smi` is not on PATH"
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    if result.returncode != 0 or "GPU" not in result.stdout:
        return f"needs an NVIDIA GPU: `nvidia-smi -L` found none ({result.stderr.strip()[:80]})"
    return None


@pytest.fixture(scope="session", autouse=True)
def _one_build_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every build of the run shares one worker process (tritonkit.convert.isolate): its imports and
    the dynamo exporter's start-up (seconds) are paid once per test run, not once per build. Failure
    folders of builds that fail on purpose go to the run's temporary folder, not the user's cache."""
    folders = str(tmp_path_factory.mktemp("failures"))
    with pytest.MonkeyPatch.context() as patch, isolate.session(""):
        if not os.environ.get(isolate.FAILURE_DIR_ENV):
            patch.setenv(isolate.FAILURE_DIR_ENV, folders)
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("tensorrt") and (reason := _tensorrt_missing()):
            item.add_marker(pytest.mark.skip(reason=reason))
        if item.get_closest_marker("gpu") and (reason := _gpu_missing()):
            item.add_marker(pytest.mark.skip(reason=reason))
