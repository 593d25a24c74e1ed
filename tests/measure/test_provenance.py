"""Provenance: what every profile, compare, tune, plan and loadtest output records about where and when it
was measured, one test per field, against the real server of tests/support/measure_server.py (``add``: an ONNX model
built for the portable runner, with ``build.json``; ``work``: a hand-written python model without one)."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path

import pytest

import tritonkit
from tritonkit.machine import cpu_model, gpu_names
from tritonkit.measure.provenance import Provenance, collect, is_local, markdown_lines
from tritonkit.serve.embedded import EmbeddedServer


@pytest.fixture(scope="module")
def recorded(server: EmbeddedServer, repo: Path) -> Provenance:
    return collect(server.http_url, "http", [("add", ""), ("work", "")], repo=repo)


def test_tritonkit_version(recorded: Provenance) -> None:
    assert recorded.tritonkit_version == tritonkit.__version__


def test_date_is_now_in_utc(recorded: Provenance) -> None:
    when = datetime.datetime.fromisoformat(recorded.date)
    assert when.utcoffset() == datetime.timedelta(0)
    assert abs((datetime.datetime.now(datetime.UTC) - when).total_seconds()) < 600


def test_host(recorded: Provenance) -> None:
    assert recorded.host == platform.node()


def test_device_of_a_local_server_is_this_machine(recorded: Provenance) -> None:
    assert recorded.device == {"cpu": cpu_model(), "cores": os.cpu_count(), "gpus": gpu_names()}
    kind, name = recorded.measured_on("add")
    assert (kind, name) == ("cpu", f"CPU {cpu_model()}, {os.cpu_count()} cores")


def test_gpu_names_come_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"  # the driver's tool as a stand-in that answers its query
    smi.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=name" ] && printf "Tesla T4\\nTesla T4\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpu_names() == ["Tesla T4", "Tesla T4"]
    on_gpu = Provenance("0.1.0", "d", "h", {"cpu": "c", "cores": 2, "gpus": gpu_names()}, "2.51.0", "s")
    assert on_gpu.measured_on(None, "KIND_GPU") == ("gpu", "Tesla T4")
    assert on_gpu.measured_on(None, "KIND_CPU") == ("cpu", "CPU c, 2 cores")


def test_device_of_a_remote_server_is_unknown_not_this_machine() -> None:
    assert is_local("127.0.0.1:8000") and is_local("http://localhost:8000") and not is_local("triton:8000")
    remote = Provenance("0.1.0", "d", "h", None, "2.51.0", "triton.example:8000")
    assert remote.measured_on(None, "KIND_GPU")[0] == "unknown"
    assert "device unknown (remote server triton.example:8000)" in markdown_lines(remote)[0]


def test_triton_version(recorded: Provenance, server: EmbeddedServer) -> None:
    assert recorded.triton_version == "2.51.0"  # the nvidia-pytriton wheel's server
    assert collect(server.grpc_url, "grpc", [("add", "")]).triton_version == "2.51.0"


def test_engine_of_each_version(recorded: Provenance) -> None:
    engines = {m.name: m.engine for m in recorded.models}
    assert engines == {"add": "onnxruntime (python backend, portable runner)", "work": "python"}


def test_precision_and_build_target_of_each_version(recorded: Provenance) -> None:
    facts = {m.name: (m.precision, m.target, m.version) for m in recorded.models}
    assert facts == {"add": ("fp32", "portable", "1"), "work": ("unknown", "unknown", "1")}


def test_instance_kind_and_count(recorded: Provenance) -> None:
    assert {m.name: (m.instance_kind, m.instances) for m in recorded.models} == {
        "add": ("KIND_CPU", 1),
        "work": ("KIND_CPU", 1),
    }


def test_round_trip_and_markdown(recorded: Provenance) -> None:
    assert Provenance.from_dict(recorded.as_dict()) == recorded
    lines = markdown_lines(recorded.as_dict())
    assert lines[0].startswith(f"Measured on: CPU {cpu_model()} ({os.cpu_count()} cores), ")
    assert f"Triton 2.51.0 ({recorded.server}); tritonkit {tritonkit.__version__}" in lines[0]
    assert lines[1] == (
        "- `add` version 1: engine onnxruntime (python backend, portable runner), precision fp32, "
        "1 x CPU instance(s), build target portable"
    )
    assert markdown_lines(None)[0].startswith("Measured on: not recorded")
