"""The text runner clips huge strings before tokenizing: same tokens, bounded memory and time.

Runs the real runner (``tokenize`` mode, MiniLM's ``tokenizer.json``) in the real python backend.
Before the clip, a 2 MB string grew the stub by about 400 MB (the tokenizer holds ~200 bytes per
character and truncates only afterwards).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tritonkit import config
from tritonkit.backends.runners import runner_path
from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit.serve.process import stubs_of

tokenizers = pytest.importorskip("tokenizers")
minilm = pytest.importorskip("tritonkit.convert.graph.flagship.minilm")
MAX_TOKENS = 256


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    try:
        tokenizer_json = minilm.tokenizer_file()
    except Exception as exc:  # the model package is an optional extra
        pytest.skip(f"MiniLM tokenizer not installed: {exc}")
    repo = tmp_path_factory.mktemp("repo")
    version = repo / "tok" / "1"
    version.mkdir(parents=True)
    shutil.copy(runner_path("text_embedding"), version / "model.py")
    shutil.copy(tokenizer_json, version / "tokenizer.json")
    cfg = ModelConfig(
        name="tok",
        backend="python",
        max_batch_size=4,
        inputs=[TensorConfig("TEXT", "BYTES", [1])],
        outputs=[TensorConfig("input_ids", "INT64", [-1]), TensorConfig("attention_mask", "INT64", [-1])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        parameters={"mode": "tokenize", "max_seq_length": str(MAX_TOKENS)},
    )
    config.save(cfg, repo / "tok" / "config.pbtxt")
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        yield server


def _served_ids(server: EmbeddedServer, text: str) -> list[int]:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    try:
        tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_), binary_data=True)
        result = client.infer("tok", [tensor])
    finally:
        client.close()
    ids, mask = result.as_numpy("input_ids"), result.as_numpy("attention_mask")
    assert ids is not None and mask is not None
    return [int(i) for i in ids[0][mask[0] == 1]]


def _local_ids(text: str) -> list[int]:
    tokenizer = tokenizers.Tokenizer.from_file(str(minilm.tokenizer_file()))
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    return list(tokenizer.encode(text).ids)


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_huge_text_gives_the_same_tokens_with_bounded_memory(served: EmbeddedServer) -> None:
    assert served.pid is not None
    (stub,) = stubs_of(served.pid, served._stub_path())
    prose = "The quick brown fox, tired of jumping, reads a paper on tokenization. " * 40  # > 256 tokens
    before = _peak_rss_kib(stub.pid)
    huge = prose + "filler " * 300_000  # 2.1 MB
    assert _served_ids(served, huge) == _local_ids(prose + "filler " * 1_000)
    spaced = "alpha" + " " * 2_000_000 + "omega\n\n\n beta"  # whitespace runs must not hide words
    assert _served_ids(served, spaced) == _local_ids("alpha omega beta")
    glued = "x." * 1_000_000  # one 2 MB "word" the tokenizer splits at every dot
    assert _served_ids(served, glued) == _local_ids("x." * 10_000)
    grown_mib = (_peak_rss_kib(stub.pid) - before) / 1024
    assert grown_mib < 100, f"the stub's peak memory grew by {grown_mib:.0f} MiB"


def test_short_text_is_tokenized_untouched(served: EmbeddedServer) -> None:
    text = "  Leading   spaces\tand\n\nnew lines  stay as the tokenizer sees them.  "
    assert _served_ids(served, text) == _local_ids(text)
