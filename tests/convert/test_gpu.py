"""GPU profiles, detection from `nvidia-smi` output, precision checks, max-batch planning."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tritonkit.convert.gpu_profiles import (
    GIB,
    PROFILES,
    check_precision,
    detect_gpu,
    get_profile,
    parse_nvidia_smi,
    plan_max_batch,
)
from tritonkit.convert.memory import estimate_memory
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


def test_unknown_profile() -> None:
    with pytest.raises(GpuProfileError, match="unknown GPU profile 'V100'; expected one of T4, L4"):
        get_profile("V100")


def test_parse_nvidia_smi_rows() -> None:
    text = "Tesla T4, 7.5, 15360 MiB\nNVIDIA H100 80GB HBM3, 9.0, 81559 MiB\n"
    assert parse_nvidia_smi(text) == [("Tesla T4", "7.5", 15360.0), ("NVIDIA H100 80GB HBM3", "9.0", 81559.0)]
    assert parse_nvidia_smi("garbage\n") == []


def test_detection_prefers_request_then_spec_then_default() -> None:
    assert detect_gpu("A10").profile.name == "A10"
    found = detect_gpu(None, None)
    # Here there is no GPU: the default T4, and the build says so; on a GPU host, the local one.
    assert found.profile.name in PROFILES
    if found.how.startswith("default"):
        assert found.profile.name == "T4" and "no local GPU" in found.how


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
