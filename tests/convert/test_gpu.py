"""GPU profiles, detection from `nvidia-smi` output (the table's GPUs and derived profiles for the
others, a fake `nvidia-smi` on PATH standing in for the driver's tool), precision checks, max-batch
planning."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.precisions.memory import estimate_memory
from tritonkit.convert.spec.buildspec import apply_overrides, parse_spec
from tritonkit.convert.spec.gpu_profiles import (
    GIB,
    PROFILES,
    check_precision,
    derive_profile,
    derived_precisions,
    detect_gpu,
    get_profile,
    parse_nvidia_smi,
    plan_max_batch,
)
from tritonkit.convert.targets.plan import plan_build
from tritonkit.errors import GpuProfileError


def test_t4_facts() -> None:
    t4 = get_profile("t4")
    assert (t4.compute_capability, t4.memory_gib, t4.max_batch_cap, t4.workspace_gib) == ("7.5", 16, 64, 4.0)
    assert t4.precisions == {"fp32", "fp16", "int8"} and not t4.tf32


def test_precision_checks() -> None:
    with pytest.raises(
        GpuProfileError, match=re.escape("precision bf16 is not supported on T4 (compute capability 7.5)")
    ):
        check_precision(PROFILES["T4"], "bf16")
    check_precision(PROFILES["L4"], "bf16")
    check_precision(PROFILES["H100"], "fp8")


def test_unknown_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: nothing here to name
    with pytest.raises(GpuProfileError, match="unknown GPU profile 'V100'; expected one of T4, L4") as info:
        get_profile("V100")
    assert str(info.value).endswith("or a GPU nvidia-smi lists here (none)")


def test_parse_nvidia_smi_rows() -> None:
    text = "Tesla T4, 7.5, 15360 MiB\nNVIDIA H100 80GB HBM3, 9.0, 81559 MiB\n"
    assert parse_nvidia_smi(text) == [("Tesla T4", "7.5", 15360.0), ("NVIDIA H100 80GB HBM3", "9.0", 81559.0)]
    # The order the profile query asks for (name, memory.total, compute_cap) reads the same.
    assert parse_nvidia_smi("NVIDIA H200, 143771 MiB, 9.0") == [("NVIDIA H200", "9.0", 143771.0)]
    assert parse_nvidia_smi("garbage\n") == []
    assert parse_nvidia_smi("NVIDIA H200, [N/A], 9.0") == []


def test_detection_prefers_request_then_spec_then_default() -> None:
    assert detect_gpu("A10").profile.name == "A10"
    found = detect_gpu(None, None)
    # Here there is no GPU: the default T4, and the build says so; on a GPU host, the local one.
    if found.how.startswith("default"):
        assert found.profile.name == "T4" and "no local GPU: nvidia-smi" in found.how
    else:
        assert found.how.startswith("detected by nvidia-smi: ")


def test_precisions_follow_the_compute_capability() -> None:
    assert derived_precisions("6.1") == {"fp32"}
    assert derived_precisions("7.0") == {"fp32", "fp16"}  # a V100: FP16 tensor cores, no INT8 ones
    assert derived_precisions("7.5") == {"fp32", "fp16", "int8"}  # the T4's: no BF16
    assert derived_precisions("8.6") == {"fp32", "fp16", "int8", "bf16"}
    assert derived_precisions("8.9") == {"fp32", "fp16", "int8", "bf16", "fp8"}
    assert derived_precisions("10.0") == {"fp32", "fp16", "int8", "bf16", "fp8", "fp4"}
    # The table agrees with the rule where the rule can say.
    for profile in PROFILES.values():
        assert derived_precisions(profile.compute_capability) == profile.precisions, profile.name
    a10g = derive_profile("NVIDIA A10G", "8.6", 23028)
    assert (a10g.name, a10g.memory_gib, a10g.max_batch_cap, a10g.workspace_gib, a10g.tf32) == (
        "A10G",
        22,
        256,
        8.0,
        True,
    )
    small = derive_profile("Tesla V100-SXM2-16GB", "7.0", 16160)
    assert (small.name, small.max_batch_cap, small.workspace_gib, small.tf32) == (
        "V100-SXM2-16GB",
        64,
        3.0,
        False,
    )


_H200 = "NVIDIA H200, 143771 MiB, 9.0"


def _fake_smi(directory: Path, rows: str, listing: str = "") -> None:
    """A stand-in for the driver's ``nvidia-smi`` (a system tool, not Triton): ``--query-gpu=...``
    prints ``rows`` (the fields in the order asked for by the profile query), ``-L`` ``listing``."""
    script = directory / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\ncase "$1" in\n  -L) printf "%s" "{listing}" ;;\n  *) printf "%s\\n" "{rows}" ;;\nesac\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def h200(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_smi(bin_dir, _H200, "GPU 0: NVIDIA H200 (UUID: GPU-0)\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.usefixtures("h200")
def test_a_gpu_outside_the_table_gets_its_own_profile() -> None:
    found = detect_gpu(None, None)
    profile = found.profile
    assert (profile.name, profile.compute_capability, profile.memory_gib) == ("H200", "9.0", 140)
    assert profile.precisions == {"fp32", "fp16", "bf16", "int8", "fp8"} and profile.tf32
    assert (profile.max_batch_cap, profile.workspace_gib) == (1024, 16.0)
    assert found.how == (
        "detected by nvidia-smi: NVIDIA H200, compute capability 9.0, 140.4 GiB; not in the profile table, "
        "derived from it: fp32, fp16, bf16, int8, fp8; max batch cap 1024, workspace 16 GiB"
    )
    assert "no local GPU" not in found.how
    # The spec's `gpu` is for machines without one; --gpu still beats the GPU here.
    assert detect_gpu(None, "T4").profile.name == "H200"
    assert detect_gpu("T4").profile.name == "T4"
    # Its name is a profile name here (and only here).
    assert get_profile("h200") == profile
    check_precision(profile, "bf16")


def test_a_table_gpu_is_named_with_the_tables_profile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_smi(tmp_path, "Tesla T4, 15360 MiB, 7.5\nTesla T4, 15360 MiB, 7.5")
    monkeypatch.setenv("PATH", str(tmp_path))
    found = detect_gpu(None, None)
    assert found.profile is PROFILES["T4"]
    assert found.how == (
        "detected by nvidia-smi: GPU 0 of 2: Tesla T4, compute capability 7.5, 15.0 GiB; the table's T4 profile"
    )


def test_no_gpu_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpu(None, None).how == "default T4; no local GPU: nvidia-smi not found"
    assert detect_gpu(None, "L4").how == "the spec's `gpu`; no local GPU: nvidia-smi not found"
    _fake_smi(tmp_path, "")
    assert detect_gpu(None, None).how == "default T4; no local GPU: nvidia-smi lists no GPU"
    assert detect_gpu("L4").profile is PROFILES["L4"]  # a GPU that is not here is still planned for


def _plan(data: dict[str, Any], gpu: str | None = None) -> Any:
    return plan_build(apply_overrides(parse_spec(data), {"gpu": gpu}, {}), gpus=[])


@pytest.mark.usefixtures("h200")
def test_bert_base_batch_128_is_planned_on_the_h200_and_refused_for_a_t4(
    tmp_path: Path, tiny_onnx: Path, tiny_data: tuple[Path, Path], tiny_spec: Callable[..., dict[str, Any]]
) -> None:
    data = tiny_spec(tiny_onnx, *tiny_data, batching={"max_batch_size": 128}, serving={"device": "cpu"})
    lines: list[str] = []
    results = build_from_spec(
        parse_spec({**data, "precisions": ["fp32", "fp16"]}), tmp_path / "repo", log=lines.append
    )
    assert [r.name for r in results] == ["tiny_fp32", "tiny_fp16"]
    assert any(line.startswith("GPU profile H200 (detected by nvidia-smi: NVIDIA H200") for line in lines), (
        lines
    )
    with pytest.raises(GpuProfileError, match=r"^`batching.max_batch_size` 128 is above the T4 cap of 64$"):
        _plan(data, gpu="T4")
    assert _plan(data).profile is not None and _plan(data).profile.max_batch_cap == 1024


def test_a_gpu_that_is_not_here_is_planned_on_a_cpu_machine(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    tiny_onnx: Path,
    tiny_data: tuple[Path, Path],
    tiny_spec: Callable[..., dict[str, Any]],
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    data = tiny_spec(tiny_onnx, *tiny_data, batching={"max_batch_size": 128})
    plan = _plan(data, gpu="L4")
    assert plan.profile is PROFILES["L4"] and plan.detection is not None
    assert plan.detection.how == "chosen by --gpu or TRITONKIT_GPU"


def test_plan_max_batch() -> None:
    t4 = PROFILES["T4"]
    # 10 MiB per sample fits thousands in 12.8 GiB: capped at 64 on T4.
    assert plan_max_batch(t4, 10 * 2**20) == 64
    # 1 GiB per sample with 4 GiB fixed: (16*0.8 - 4) / 1 = 8.8 -> 8
    assert plan_max_batch(t4, GIB, fixed_bytes=4 * GIB) == 8
    assert plan_max_batch(PROFILES["H100"], 10 * 2**20) == 512
    with pytest.raises(GpuProfileError, match=re.escape("offers 12.8 GiB at memory fraction 0.8")):
        plan_max_batch(t4, 20 * GIB)


def test_measured_memory_plans_a_batch(tiny_onnx: object) -> None:

    per_sample, weights = estimate_memory(str(tiny_onnx), probe_batch=4)
    assert per_sample > 0 and weights == Path(str(tiny_onnx)).stat().st_size
    # With the cap out of the way, the plan is the largest power of two whose measured memory fits.
    uncapped = dataclasses.replace(PROFILES["T4"], max_batch_cap=2**62)
    budget = uncapped.memory_gib * GIB * 0.8 - weights
    batch = plan_max_batch(uncapped, per_sample, weights)
    assert batch * per_sample <= budget < 2 * batch * per_sample
    assert batch & (batch - 1) == 0
