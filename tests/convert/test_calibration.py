"""INT8 calibration methods do what they say: on activations with outliers, entropy and percentile
calibration clip ranges that MinMax keeps whole, so the three give different quantization parameters
(ONNX Runtime's quantize_static alone gave entropy a single candidate threshold: MinMax's model,
byte for byte). And a gate whose FP32 reference answers every sample alike says so."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tritonkit.convert.precisions.accuracy import Thresholds, cosine_rows, degenerate, gate
from tritonkit.convert.precisions.precision import activation_scales, quantize_int8
from tritonkit.convert.spec.options import Int8Options
from tritonkit.errors import AccuracyError


def _heavy_tailed(batches: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_t(2, (16, 16)).astype(np.float32)} for _ in range(batches)]


def test_minmax_entropy_and_percentile_give_different_scales(tiny_onnx: Path, tmp_path: Path) -> None:
    feeds = _heavy_tailed(4, seed=3)
    produced = {}
    for method in ("minmax", "entropy", "percentile"):
        out = tmp_path / f"{method}.onnx"
        # 99.9: a thousand values per tensor here; at the default 99.999 only the largest is cut.
        options = Int8Options(method=method, percentile=99.9, op_types=["Gemm", "MatMul"], min_samples=16)
        details = quantize_int8(tiny_onnx, out, feeds, options)
        produced[method] = details["calibration"]
        assert produced[method] == {**activation_scales(onnx.load(str(out))), **produced[method]}
    digests = {method: record["digest"] for method, record in produced.items()}
    assert len(set(digests.values())) == 3, digests
    for method in ("entropy", "percentile"):
        record = produced[method]
        assert record["tensors_clipped"] >= 1 and record["median_range_vs_minmax"] < 1.0, record
        assert record["scale_max"] < produced["minmax"]["scale_max"], (record, produced["minmax"])
    assert "tensors_clipped" not in produced["minmax"]


def test_a_degenerate_reference_is_named_and_the_gate_still_decides() -> None:
    rng = np.random.default_rng(0)
    one_class = np.tile(np.array([[0.1, 3.0, 0.2]]), (8, 1)) + rng.normal(0, 0.01, (8, 3))
    constant = np.ones((8, 4))
    varied = rng.normal(size=(8, 4))
    assert "picks class 1 for all 8 evaluation samples" in (degenerate(one_class, "top1") or "")
    assert degenerate(one_class, "cosine") is None  # embeddings that vary are not degenerate
    assert "gives the same output for all 8 evaluation samples" in (degenerate(constant, "cosine") or "")
    assert degenerate(varied, "top1") is None
    result = gate("m_fp16", "fp16", one_class, one_class, Thresholds("top1", 0.9))
    assert result["passed"] and "`m_fp16` (fp16) gate: the fp32 reference picks class 1" in result["warning"]
    assert "warning" not in gate("m_fp16", "fp16", varied, varied, Thresholds("cosine", 0.9))


def test_all_zero_outputs_agree_and_the_gate_says_it_proves_nothing() -> None:
    """torchvision's ViT zero-initialises its head: FP32 and FP16 both answer zeros. That is
    agreement (cosine 1.0, with the degenerate warning), not a cosine of 0 that refuses the build."""
    zeros = np.zeros((4, 10), dtype=np.float32)
    varied = np.random.default_rng(0).standard_normal((4, 10)).astype(np.float32)
    assert cosine_rows(zeros, zeros).tolist() == [1.0] * 4
    assert cosine_rows(varied, zeros).tolist() == [0.0] * 4  # zeros against an answer: no agreement
    result = gate("vit_fp16", "fp16", zeros, zeros, Thresholds("cosine", 0.999, 0.99))
    assert result["passed"] and result["mean"] == 1.0
    assert "zero-initialised output layer" in result["warning"]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_fp16_outputs_are_named_and_never_pass(bad: float) -> None:
    reference = np.random.default_rng(0).standard_normal((4, 10)).astype(np.float32)
    candidate = reference.copy()
    candidate[2, 3] = bad
    assert np.isnan(cosine_rows(candidate, reference)[2])
    kind = "NaN" if np.isnan(bad) else "inf"
    with pytest.raises(
        AccuracyError, match=rf"`m_fp16` \(fp16\) answers {kind} in `y` on 1 of 4 .*\[2\].*float16 overflow"
    ):
        gate("m_fp16", "fp16", candidate, reference, Thresholds("cosine", 0.0, -1.0), output="y")
    with pytest.raises(AccuracyError, match="the fp32 reference answers"):
        gate("m_fp16", "fp16", reference, candidate, Thresholds("top1", 0.0), output="y")
