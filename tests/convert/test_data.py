"""Calibration/evaluation data: the bundled English corpus splits disjointly; text encoding matches
the runner's; bad files fail in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tritonkit.convert.graph.flagship.minilm import tokenizer_file
from tritonkit.convert.inputs.data import (
    TextEncoder,
    corpus_split,
    english_sentences,
    load_text_lines,
    synthetic_images,
)
from tritonkit.convert.precisions.accuracy import Thresholds, cosine_rows, gate, top1_agreement
from tritonkit.errors import AccuracyError, CalibrationError, SpecError


def test_corpus_is_large_and_splits_disjointly() -> None:
    sentences = english_sentences()
    assert len(sentences) >= 1000
    cal, ev = corpus_split(sentences, 256, 500)
    assert len(cal) == 256 and len(ev) == 500 and not set(cal) & set(ev)
    assert english_sentences() == sentences  # seeded: the same split every run
    with pytest.raises(CalibrationError, match="text corpus too small: expected at least"):
        corpus_split(sentences, len(sentences), 1)


def test_text_encoder_pads_to_longest_and_truncates() -> None:

    encoder = TextEncoder(tokenizer_file(), max_seq_length=16)
    feeds = encoder.encode(["short", "a much longer sentence " * 10])
    assert feeds["input_ids"].shape == (2, 16) and feeds["input_ids"].dtype == np.int64
    assert feeds["attention_mask"][0].sum() < 16 and feeds["attention_mask"][1].sum() == 16
    assert encoder.encode(["short"], pad_to=12)["input_ids"].shape == (1, 12)


def test_text_file_errors(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="calibration data not found"):
        load_text_lines(tmp_path / "none.txt")
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(CalibrationError, match="is not UTF-8 text"):
        load_text_lines(binary)


def test_synthetic_images_are_seeded() -> None:
    a, b = synthetic_images(4, (3, 20, 20), seed=1), synthetic_images(4, (3, 20, 20), seed=1)
    assert a.shape == (4, 3, 20, 20) and a.dtype == np.float32 and np.array_equal(a, b)
    assert not np.array_equal(a, synthetic_images(4, (3, 20, 20), seed=2))


def test_metrics() -> None:
    ref = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    cand = np.array([[1.0, 0.1], [1.0, 0.0]], dtype=np.float32)
    np.testing.assert_allclose(cosine_rows(cand, ref), [1 / np.sqrt(1.01), 0.0], rtol=1e-6)
    np.testing.assert_array_equal(top1_agreement(cand, ref), [1.0, 0.0])


def test_gate_passes_and_fails() -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((20, 8))
    close = ref + 1e-4 * rng.standard_normal((20, 8))
    assert gate("m", "int8", close, ref, Thresholds("cosine", 0.99, 0.97))["passed"]
    broken = close.copy()
    broken[7] = -broken[7]
    with pytest.raises(AccuracyError) as info:
        gate(
            "m",
            "int8",
            broken,
            ref,
            Thresholds("cosine", 0.99, 0.97),
            output="EMBEDDING",
            labels=[f"s{i}" for i in range(20)],
        )
    message = str(info.value)
    assert "min cosine -1.0000 < 0.97" in message and "`EMBEDDING`[7] 's7' cos -1.0000" in message
    with pytest.raises(SpecError, match="accuracy `metric` must be one of cosine, top1"):
        Thresholds("l2")
