"""``gates.gate_build``: a build's gate in one call, graphs judged before any target is made."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tritonkit.convert.precisions.gates import Comparison, gate_build
from tritonkit.convert.spec.buildspec import AccuracySpec
from tritonkit.errors import AccuracyError

_REFERENCE = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)


def _check(role: str, candidate: np.ndarray) -> Comparison:
    return Comparison(role, "tiny_fp16", "fp16", candidate, _REFERENCE, "Y")


@dataclass(frozen=True)
class _Served:
    checks: tuple[tuple[Comparison, ...], ...]


def test_a_graph_below_its_marks_is_refused_before_the_targets_are_made() -> None:
    made: list[str] = []

    def make() -> _Served:
        made.append("targets")
        return _Served(((),))

    with pytest.raises(AccuracyError, match="tiny_fp16"):
        gate_build(AccuracySpec(), [[_check("precision", -_REFERENCE)]], None, make, print)
    assert made == []


def test_graph_and_served_records_come_back_per_version_with_what_was_made() -> None:
    lines: list[str] = []
    served = _Served(((_check("program", _REFERENCE + 1e-4),),))
    got, records = gate_build(
        AccuracySpec(), [[_check("precision", _REFERENCE)]], None, lambda: served, lines.append
    )
    assert got is served
    assert [sorted(r.records) for r in records] == [["precision", "program"]]
    assert records[0].records["precision"]["mean"] == pytest.approx(1.0)
    assert lines and lines[0].startswith(
        "  accuracy vs fp32, fp16 ONNX graph `tiny_fp16`: cosine mean 1.000000"
    )
    assert lines[1].startswith("  accuracy vs fp32, fp16 torch program `tiny_fp16`: cosine mean")
    with pytest.raises(AccuracyError, match="tiny_fp16"):
        gate_build(
            AccuracySpec(),
            [[_check("precision", _REFERENCE)]],
            None,
            lambda: _Served(((_check("program", -_REFERENCE),),)),
            lines.append,
        )
