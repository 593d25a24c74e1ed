"""Plain ``locust -f loadtests/locustfile.py`` with Locust's own options against the real server:
no options file, the model from ``TRITONKIT_MODEL`` or ``--triton-model``, and ``-u``/``-t`` obeyed."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tritonkit.serve.embedded import EmbeddedServer

from .conftest import triton_requests

ROOT = Path(__file__).resolve().parents[2]


def _locust(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRITONKIT_")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "loadtests" / "locustfile.py"),
            "--headless",
            *args,
        ],
        capture_output=True,
        text=True,
        env={**environment, **env},
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", ["environment", "argument"])
def test_plain_locust_runs_with_locust_options(server: EmbeddedServer, tmp_path: Path, how: str) -> None:
    before = triton_requests(server)
    model = ["--triton-model", "probe_add"] if how == "argument" else []
    env = {"TRITONKIT_MODEL": "probe_add"} if how == "environment" else {}
    started = time.monotonic()
    result = _locust(
        *("-u", "2", "-r", "2", "-t", "3s", "--host", f"http://{server.http_url}"),
        *("--csv", str(tmp_path / "plain"), *model),
        env=env,
    )
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"TritonModelUser": 2} (2 total users)' in result.stderr  # -u 2
    assert "--run-time limit reached" in result.stderr and took < 30  # -t 3s
    with open(tmp_path / "plain_stats.csv", newline="", encoding="utf-8") as handle:
        rows = {row["Name"]: row for row in csv.DictReader(handle)}
    sent = int(rows["probe_add:1"]["Request Count"])
    assert sent > 0 and rows["probe_add:1"]["Failure Count"] == "0"
    assert triton_requests(server) - before >= sent  # the requests reached Triton


def test_plain_locust_without_a_model_says_how_to_name_one(server: EmbeddedServer) -> None:
    result = _locust("-u", "1", "-t", "1s", "--host", f"http://{server.http_url}", env={})
    assert result.returncode == 2
    assert "no model: expected --triton-model NAME or TRITONKIT_MODEL=NAME" in result.stderr
    assert "No User class found" not in result.stderr and "Traceback" not in result.stderr
