"""The flagship builds at reduced size, served by the real embedded tritonserver and queried over
loopback HTTP/gRPC: MiniLM text in, embeddings out, matching sentence-transformers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritonkit.convert.graph.flagship.minilm import model_dir
from tritonkit.convert.inputs.data import english_sentences
from tritonkit.repository.store import ModelRepository

pytestmark = pytest.mark.slow  # the flagship builds (the fixture: 44 s here) and their server

SENTENCES = [
    "A quick brown fox jumps over the lazy dog.",
    "Triton serves models over HTTP and gRPC.",
    "x",
    "Sentence embeddings map text to vectors; similar meanings land close together. " * 6,
]


def _embed(url: str, model: str, sentences: list[str]) -> np.ndarray:
    client = httpclient.InferenceServerClient(url)
    text = np.array([[s.encode("utf-8")] for s in sentences], dtype=object)
    inp = httpclient.InferInput("TEXT", list(text.shape), "BYTES")
    inp.set_data_from_numpy(text)
    result = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput("EMBEDDING")])
    return np.asarray(result.as_numpy("EMBEDDING"))


@pytest.fixture(scope="module")
def reference() -> Any:
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415 (optional (models extra))

    model = SentenceTransformer(str(model_dir()), device="cpu")
    return lambda sentences: model.encode(sentences, normalize_embeddings=True)


def test_flagship_versions_written(flagship_repo: tuple[Path, Any]) -> None:
    repo = ModelRepository(flagship_repo[0])
    names = repo.models()
    for model in ("minilm", "resnet50"):
        for precision in ("fp32", "fp16", "int8"):
            assert f"{model}_{precision}" in names
    manifest = repo.read_manifest("minilm_int8", 1)
    assert manifest.precision == "int8"
    assert manifest.accuracy is not None and manifest.accuracy["passed"] is True
    assert manifest.accuracy["metric"] == "cosine"
    assert manifest.extra["precision_details"]["format"] == "QDQ"
    # The tokenizer travels inside the version: the version dir is self-contained.
    assert (repo.version_dir("minilm_int8", 1) / "tokenizer.json").is_file()
    assert repo.read_manifest("resnet50_fp32", 1).extra["synthetic_weights"] is True


def test_minilm_fp32_matches_sentence_transformers(flagship_server: Any, reference: Any) -> None:
    got = _embed(flagship_server.http_url, "minilm_fp32", SENTENCES)
    want = reference(SENTENCES)
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    cos = np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.9999, cos


@pytest.mark.parametrize(
    ("model", "mean_min", "min_min"), [("minilm_fp16", 0.999, 0.99), ("minilm_int8", 0.99, 0.97)]
)
def test_minilm_reduced_precision_served(
    flagship_server: Any, reference: Any, model: str, mean_min: float, min_min: float
) -> None:
    sentences = english_sentences()[-48:]  # held-out end of the corpus, never calibrated on
    got = _embed(flagship_server.http_url, model, sentences)
    want = reference(sentences)
    cos = np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.mean() >= mean_min and cos.min() >= min_min, (cos.mean(), cos.min())


def test_minilm_concurrent_requests_over_grpc(flagship_server: Any) -> None:
    """Concurrent single-sentence requests (batched server-side) each get their own row back."""
    single = _embed(flagship_server.http_url, "minilm_fp32", SENTENCES)

    def one(index: int) -> tuple[int, np.ndarray]:
        client = grpcclient.InferenceServerClient(flagship_server.grpc_url)
        inp = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[SENTENCES[index].encode()]], dtype=object))
        try:
            return index, np.asarray(client.infer("minilm_fp32", [inp]).as_numpy("EMBEDDING"))[0]
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        rows = list(pool.map(one, [i % len(SENTENCES) for i in range(16)]))
    for index, row in rows:
        # Padding to a longer neighbour changes nothing for the masked mean, up to float noise.
        np.testing.assert_allclose(row, single[index], atol=1e-4)


def test_resnet_served(flagship_server: Any, flagship_repo: tuple[Path, Any]) -> None:
    config = ModelRepository(flagship_repo[0]).read_config("resnet50_int8")
    dims = config.input("image").dims
    client = httpclient.InferenceServerClient(flagship_server.http_url)
    image = np.random.default_rng(3).standard_normal((2, *dims)).astype(np.float32)
    outputs = {}
    for precision in ("fp32", "fp16", "int8"):
        inp = httpclient.InferInput("image", list(image.shape), "FP32")
        inp.set_data_from_numpy(image)
        outputs[precision] = client.infer(f"resnet50_{precision}", [inp]).as_numpy("logits")
    assert outputs["fp32"].shape == (2, 1000)
    for precision in ("fp16", "int8"):
        cos = np.sum(outputs[precision] * outputs["fp32"], axis=1) / (
            np.linalg.norm(outputs[precision], axis=1) * np.linalg.norm(outputs["fp32"], axis=1)
        )
        assert cos.min() > 0.95, (precision, cos)


def test_minilm_unicode_text_and_empty_text_refused(flagship_server: Any, reference: Any) -> None:
    sentences = ["Ünïcödé, 日本語 and emoji 🙂 survive tokenization.", "plain ASCII"]
    got = _embed(flagship_server.http_url, "minilm_fp32", sentences)
    want = reference(sentences)
    cos = np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.9999, cos
    # An empty element is the caller's mistake (an empty or undecodable body ends up there): 400, one line.

    with pytest.raises(InferenceServerException, match=r"TEXT element 0 is empty"):
        _embed(flagship_server.http_url, "minilm_fp32", ["", "x"])


def test_minilm_wrong_input_type_is_refused(flagship_server: Any) -> None:

    client = httpclient.InferenceServerClient(flagship_server.http_url)
    bad = httpclient.InferInput("TEXT", [1, 1], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 1), dtype=np.float32))
    with pytest.raises(InferenceServerException, match=r"TYPE_STRING|BYTES"):
        client.infer("minilm_int8", [bad])
    # The model keeps serving after a bad request.
    assert _embed(flagship_server.http_url, "minilm_int8", ["still alive"]).shape == (1, 384)


def test_text_ensemble_layout_matches_sentence_transformers(
    flagship_server: Any, flagship_repo: tuple[Path, Any], reference: Any
) -> None:
    repo = ModelRepository(flagship_repo[0])
    assert repo.read_config("minilmens_fp32_text").platform == "ensemble"
    assert repo.read_config("minilmens_tokenizer").parameters["mode"] == "tokenize"
    assert [t.name for t in repo.read_config("minilmens_fp32").inputs] == ["input_ids", "attention_mask"]
    got = _embed(flagship_server.http_url, "minilmens_fp32_text", SENTENCES)
    want = reference(SENTENCES)
    cos = np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.9999, cos
