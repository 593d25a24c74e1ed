"""Payloads from a model's metadata: dtypes, shapes, batch mix, seeds, real text and images (pure)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tritonkit.config import TensorSpec
from tritonkit.errors import LoadTestError
from tritonkit.measure.payloads import (
    ModelSpec,
    make_payloads,
    parse_batch_mix,
    raw_bytes,
    sample_sentences,
)

TEXT = ModelSpec.describe(
    "minilm", "1", 64, (TensorSpec("TEXT", "BYTES", (-1, 1)),), (TensorSpec("EMB", "FP32", (-1, 384)),)
)
TOKENS = ModelSpec.describe(
    "bert",
    "2",
    8,
    (TensorSpec("input_ids", "INT64", (-1, -1)), TensorSpec("attention_mask", "INT64", (-1, -1))),
    (TensorSpec("logits", "FP16", (-1, 2)),),
)
IMAGE = ModelSpec.describe(
    "resnet", "1", 0, (TensorSpec("x", "FP32", (1, 3, 32, 32)),), (TensorSpec("y", "FP32", (1, 10)),)
)


def test_batch_mix_drives_shapes_and_weights() -> None:
    payloads = make_payloads(TOKENS, {1: 3.0, 4: 1.0}, per_batch=2, variable_dim=12)
    assert [p.batch for p in payloads.payloads] == [1, 1, 4, 4]
    assert payloads.payloads[2].inputs["input_ids"].shape == (4, 12)
    assert payloads.payloads[2].inputs["input_ids"].dtype == np.int64
    assert (payloads.payloads[0].inputs["attention_mask"] == 1).all()
    assert (
        payloads.payloads[3].checks[0].shape == (4, 2) and payloads.payloads[3].checks[0].datatype == "FP16"
    )
    assert sum(payloads.weights) == pytest.approx(1.0)
    draws = [payloads.payloads[payloads.pick(random.Random(i))].batch for i in range(2000)]
    assert 0.7 < draws.count(1) / len(draws) < 0.8  # 3:1


def test_seeded_and_repeatable() -> None:
    a = make_payloads(TOKENS, {2: 1.0}, seed=7).payloads[0].inputs["input_ids"]
    b = make_payloads(TOKENS, {2: 1.0}, seed=7).payloads[0].inputs["input_ids"]
    c = make_payloads(TOKENS, {2: 1.0}, seed=8).payloads[0].inputs["input_ids"]
    assert (a == b).all() and not (a == c).all()


def test_text_for_bytes_inputs() -> None:
    payload = make_payloads(TEXT, {3: 1.0}, per_batch=1).payloads[0]
    text = payload.inputs["TEXT"]
    assert text.shape == (3, 1) and text.dtype == object
    assert all(s.decode() in sample_sentences() for s in text.reshape(-1))
    raw = raw_bytes(text)
    first = text.reshape(-1)[0]
    assert raw[:4] == len(first).to_bytes(4, "little") and raw[4 : 4 + len(first)] == first


def test_images_for_image_inputs() -> None:
    image = make_payloads(IMAGE, source="auto").payloads[0].inputs["x"]
    assert image.shape == (1, 3, 32, 32) and image.dtype == np.float32
    # image-like: neighbouring pixels correlate, unlike white noise
    assert np.corrcoef(image[0, 0, :, :-1].ravel(), image[0, 0, :, 1:].ravel())[0, 1] > 0.5
    noise = make_payloads(IMAGE, source="random").payloads[0].inputs["x"]
    assert abs(np.corrcoef(noise[0, 0, :, :-1].ravel(), noise[0, 0, :, 1:].ravel())[0, 1]) < 0.2


@pytest.mark.parametrize(
    ("spec", "mix", "message"),
    [
        (TOKENS, {16: 1.0}, "batch 16 exceeds model `bert`'s max_batch_size 8"),
        (IMAGE, {2: 1.0}, "does not batch (max_batch_size 0)"),
    ],
)
def test_batch_mix_checked_against_the_model(spec: ModelSpec, mix: dict[int, float], message: str) -> None:
    with pytest.raises(LoadTestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_payloads(spec, mix)


@pytest.mark.parametrize("text", ["", "x", "1:0", "0", "2:-1", "a:b"])
def test_bad_batch_mix(text: str) -> None:
    with pytest.raises(LoadTestError, match="batch mix"):
        parse_batch_mix(text)


def test_batch_mix_parsing() -> None:
    assert parse_batch_mix("1") == {1: 1.0}
    assert parse_batch_mix("1:0.8, 8:0.2") == {1: 0.8, 8: 0.2}


def test_spec_survives_the_json_hand_off_to_locust_processes() -> None:
    # The plan file carries each spec as JSON into every Locust worker; what comes out must describe
    # the same model and build the same payloads.
    back = ModelSpec.from_json(json.loads(json.dumps(TOKENS.to_json())))
    assert (back.name, back.version, back.label, back.max_batch_size) == ("bert", "2", "bert:2", 8)
    assert back.metadata == TOKENS.metadata
    a = make_payloads(TOKENS, {4: 1.0}, seed=3).payloads[0]
    b = make_payloads(back, {4: 1.0}, seed=3).payloads[0]
    assert a.checks == b.checks and all((a.inputs[k] == b.inputs[k]).all() for k in a.inputs)
