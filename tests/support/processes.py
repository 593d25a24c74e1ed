"""Helpers for tests that run the server, or ``tritonkit serve``, as a real process: liveness read from
/proc, polling with a deadline, clean stops, a one-call HTTP inference against the X -> Y test models."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient


def serve_cli(repo: Path, *extra: str, stderr: int = subprocess.PIPE) -> subprocess.Popen[str]:
    """``python -m tritonkit serve --repo repo *extra``, text pipes, unbuffered (lines arrive at once)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tritonkit", "serve", "--repo", str(repo), *extra],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def stop(process: subprocess.Popen[str]) -> None:
    """Kill ``process`` if it still runs, reap it and close its pipes (no ResourceWarning)."""
    process.kill()
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def alive(pid: int) -> bool:
    """True while ``pid`` runs: a zombie (exited, not reaped) counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll ``predicate`` every 50 ms; whether it came true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if parent == pid:
                found.append(int(entry.name))
    return found


def http_infer(url: str, model: str, x: np.ndarray) -> np.ndarray:
    """Send X (FP32) to ``model`` over HTTP and return its Y."""
    client = httpclient.InferenceServerClient(url)
    try:
        tensor = httpclient.InferInput("X", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        result = client.infer(model, [tensor]).as_numpy("Y")
    finally:
        client.close()
    assert result is not None
    return result


def assert_adds_one(url: str, model: str = "add_one") -> None:
    """``model`` at ``url`` answers X = zeros(1, 4) with Y = ones: the X + 1 test model serves."""
    np.testing.assert_array_equal(
        http_infer(url, model, np.zeros((1, 4), np.float32)), np.ones((1, 4), np.float32)
    )
