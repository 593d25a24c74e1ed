"""Gates that fit the metric: top-1 is an agreement rate with a count of flipped samples (default 0.99
at FP16), no per-sample ``min``, the samples named on failure the ones that flipped (both classes),
and every "accuracy vs fp32" line names its precision. End to end: a BERT-style classifier (token ids
in, two logits out) whose held-out rows sit on the decision boundary, so FP16 flips exactly the rows
chosen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from tritonkit.convert.graph.export import export_model
from tritonkit.convert.pipeline import build_from_spec
from tritonkit.convert.precisions.accuracy import Thresholds, gate
from tritonkit.convert.precisions.gates import Comparison, gate_all, thresholds
from tritonkit.convert.spec.buildspec import AccuracySpec, Threshold, parse_spec
from tritonkit.errors import AccuracyError, SpecError
from tritonkit.repository.store import ModelRepository

SAMPLES = 128


def _logits(flips: int) -> tuple[NDArray[Any], NDArray[Any]]:
    reference = np.zeros((SAMPLES, 2), dtype=np.float32)
    reference[::2, 0], reference[1::2, 1] = 2.0, 2.0
    candidate = reference.copy()
    candidate[1 : 2 * flips : 2] = [2.0, 1.5]  # odd rows: class 1 in fp32, class 0 in the candidate
    return candidate, reference


def test_default_top1_marks_are_an_agreement_rate_without_a_min() -> None:
    marks = thresholds(AccuracySpec(metric="top1"), "fp16")
    assert (marks.metric, marks.mean) == ("top1", 0.99)
    assert thresholds(AccuracySpec(), "fp16") == Thresholds("cosine", 0.999, 0.99)  # cosine unchanged
    assert thresholds(AccuracySpec(metric="top1", fp16=Threshold(mean=0.95)), "fp16").mean == 0.95
    with pytest.raises(SpecError, match=r"^spec key `accuracy.fp16.min`: top-1 has no per-sample minimum"):
        thresholds(AccuracySpec(metric="top1", fp16=Threshold(mean=0.99, min=0.5)), "fp16")
    with pytest.raises(
        SpecError, match=r"^spec key `accuracy.int8.mean`: expected a share within 0..1, got 99"
    ):
        thresholds(AccuracySpec(metric="top1", int8=Threshold(mean=99)), "int8")


def test_one_flip_in_128_passes_and_says_so() -> None:
    candidate, reference = _logits(1)
    lines: list[str] = []
    comparison = Comparison("precision", "bert_fp16", "fp16", candidate, reference, "logits")
    (gated,) = gate_all(AccuracySpec(metric="top1"), [[comparison]], None, lines.append)
    record = gated.records["precision"]
    assert record["passed"] and record["flipped"] == 1 and "min" not in record
    assert record["thresholds"] == {"mean": 0.99} and record["precision"] == "fp16"
    assert lines == [
        "  accuracy vs fp32, fp16 ONNX graph `bert_fp16`: top-1 agreement 0.992188, 1 of 128 flipped "
        "(pass mark 0.99): passed"
    ]


def test_ten_flips_fail_naming_the_flipped_samples_with_both_classes() -> None:
    candidate, reference = _logits(10)
    labels = [f"sentence {i}" for i in range(SAMPLES)]
    with pytest.raises(AccuracyError) as info:
        gate(
            "bert_fp16",
            "fp16",
            candidate,
            reference,
            Thresholds("top1", 0.99),
            output="logits",
            labels=labels,
        )
    message = str(info.value)
    assert message.startswith(
        "accuracy gate failed for `bert_fp16` (fp16): top-1 agreement 0.9219 < 0.99 (10 of 128 held-out "
        "samples flipped); flipped samples: `logits`["
    )
    assert (
        "'sentence 1' fp32 class 1, fp16 class 0" in message
        and "(and 7 more); nothing was written" in message
    )
    assert "cos" not in message and "\n" not in message


class _Classifier(torch.nn.Module):
    """BERT-style on a CPU scale: token ids in, the first token's embedding through a linear head out.
    Token 1's logits differ by 2**-12: FP32 picks class 1, FP16 rounds both to 1.0 and picks class 0."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(4, 2)
        self.head = torch.nn.Linear(2, 2)
        with torch.no_grad():
            self.embed.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 1.0 + 2**-12], [1.0, 0.0], [0.0, 1.0]]))
            self.head.weight.copy_(torch.eye(2))
            self.head.bias.zero_()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.embed(input_ids)[:, 0, :])
        return out


def _ids(flips: int) -> NDArray[Any]:
    first = np.where(np.arange(SAMPLES) % 2 == 0, 2, 3)  # clear class 0 / class 1 rows
    first[1 : 2 * flips : 2] = 1  # on the boundary: flips at fp16
    ids = np.full((SAMPLES, 6), 2, dtype=np.int64)
    ids[:, 0] = first
    return ids


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cls") / "cls.onnx"
    export_model(
        _Classifier().eval(),
        (torch.zeros(2, 6, dtype=torch.int64),),
        path,
        input_names=("input_ids",),
        output_names=("logits",),
        dynamic_axes={"input_ids": {0: "batch"}, "logits": {0: "batch"}},
        exporter="torchscript",
    )
    return path


@pytest.mark.parametrize("flips", [1, 10])
def test_a_classifier_build_passes_one_flip_and_refuses_ten(
    tmp_path: Path, classifier: Path, flips: int
) -> None:
    held_out = tmp_path / "eval.npz"
    np.savez(held_out, input_ids=_ids(flips))
    spec = parse_spec(
        {
            "name": "cls",
            "source": {"onnx": str(classifier)},
            "precisions": ["fp32", "fp16"],
            "evaluation": {"data": str(held_out), "samples": SAMPLES},
            "accuracy": {"metric": "top1"},
            "batching": {"max_batch_size": 32},
        }
    )
    repo, lines = tmp_path / "repo", list[str]()
    if flips == 10:
        with pytest.raises(
            AccuracyError, match=r"top-1 agreement 0\.9219 < 0\.99 \(10 of 128 held-out samples"
        ):
            build_from_spec(spec, repo, log=lines.append)
        assert not repo.exists()
        return
    build_from_spec(spec, repo, log=lines.append)
    record = ModelRepository(repo).read_manifest("cls_fp16", 1).accuracy
    assert record is not None and record["flipped"] == 1 and record["passed"] and "min" not in record
    assert (
        "  accuracy vs fp32, fp16 ONNX graph `cls_fp16`: top-1 agreement 0.992188, 1 of 128 flipped "
        "(pass mark 0.99): passed"
    ) in lines, lines
