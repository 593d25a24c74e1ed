"""Bad models and bad text at serve time (issue 11, defects 7 and 13).

One real server, started in the "serve the others" mode (``exit_on_error=False,
strict_readiness=False``), on a repository with a good text model (the real text runner, MiniLM's
tokenizer) and two bad ones: a ``model.py`` that does not compile and a text model whose config
promises 512-wide output from a 384-wide graph. The good model serves; each bad one is named in one
line; empty and non-UTF-8 TEXT are INVALID_ARGUMENT (HTTP 400), not 200 or 500, on both protocols.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tritonkit import config
from tritonkit.backends.runners import runner_path
from tritonkit.config import InstanceGroup, ModelConfig, TensorConfig
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

pytest.importorskip("tokenizers")
minilm = pytest.importorskip("tritonkit.convert.graph.flagship.minilm")


def _wide_text_model(root: Path, tokenizer: Path) -> None:
    """The text runner on a 384-wide graph whose config promises 512."""
    version = root / "wide" / "1"
    version.mkdir(parents=True)
    shutil.copy(runner_path("text_embedding"), version / "model.py")
    shutil.copy(tokenizer, version / "tokenizer.json")
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", 384])
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1, 384], [0.0] * 384)
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["f"], ["s"], keepdims=1),
        helper.make_node("MatMul", ["s", "w"], ["sentence_embedding"]),
    ]
    graph = helper.make_graph(nodes, "enc", [ids, mask], [out], initializer=[weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), version / "model.onnx")
    cfg = ModelConfig(
        name="wide",
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("TEXT", "BYTES", [1])],
        outputs=[TensorConfig("EMBEDDING", "FP32", [512])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    config.save(cfg, root / "wide" / "config.pbtxt")


def _tokenize_model(root: Path, name: str, tokenizer: Path) -> Path:
    version = root / name / "1"
    version.mkdir(parents=True)
    shutil.copy(runner_path("text_embedding"), version / "model.py")
    shutil.copy(tokenizer, version / "tokenizer.json")
    cfg = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=4,
        inputs=[TensorConfig("TEXT", "BYTES", [1])],
        outputs=[TensorConfig("input_ids", "INT64", [-1]), TensorConfig("attention_mask", "INT64", [-1])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        parameters={"mode": "tokenize"},
    )
    config.save(cfg, root / name / "config.pbtxt")
    return version


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    try:
        tokenizer = Path(minilm.tokenizer_file())
    except Exception as exc:  # the model package is an optional extra
        pytest.skip(f"MiniLM tokenizer not installed: {exc}")
    root = tmp_path_factory.mktemp("repo")
    _tokenize_model(root, "good", tokenizer)
    broken = _tokenize_model(root, "broken", tokenizer)
    (broken / "model.py").write_text("def initialize(self:\n")
    _wide_text_model(root, tokenizer)
    with EmbeddedServer(
        root, ServerOptions(exit_timeout=1, exit_on_error=False, strict_readiness=False)
    ) as server:
        yield server


def test_the_good_model_serves_and_each_bad_one_is_named(served: EmbeddedServer) -> None:
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        assert client.is_model_ready("good")
        assert not client.is_model_ready("broken")
        assert not client.is_model_ready("wide")
        tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[b"hello"]], dtype=np.object_))
        assert client.infer("good", [tensor]).as_numpy("input_ids") is not None
    finally:
        client.close()
    failures = served.load_failures()
    assert any("broken" in line for line in failures), failures
    wide = [line for line in failures if "wide" in line]
    assert wide and "config.pbtxt dims [512], the graph gives [384]" in wide[0], failures
    assert all("\n" not in line for line in failures)


@pytest.mark.parametrize(
    ("value", "message"),
    [(b"", "TEXT element 0 is empty"), (b"  \n", "TEXT element 0 is empty"), (b"\xff\xfe", "not UTF-8")],
)
def test_bad_text_is_invalid_argument_over_http_and_grpc(
    served: EmbeddedServer, value: bytes, message: str
) -> None:
    data = np.array([[value]], dtype=np.object_)
    http = httpclient.InferenceServerClient(served.http_url)
    try:
        tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(data)
        with pytest.raises(InferenceServerException) as info:
            http.infer("good", [tensor])
        assert message in str(info.value.message())
        assert info.value.status() == "400", info.value.status()
    finally:
        http.close()
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    try:
        gtensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
        gtensor.set_data_from_numpy(data)
        with pytest.raises(InferenceServerException) as ginfo:
            grpc.infer("good", [gtensor])
        assert message in str(ginfo.value.message())
        assert ginfo.value.status() == "StatusCode.INVALID_ARGUMENT", ginfo.value.status()
    finally:
        grpc.close()


@pytest.mark.timeout(180)
def test_serve_skip_bad_models_names_the_bad_one_and_serves_the_good(tmp_path: Path) -> None:
    for name, body in (("good", "class TritonPythonModel:\n    pass\n"), ("bad", "def x(:\n")):
        (tmp_path / name / "1").mkdir(parents=True)
        (tmp_path / name / "1" / "model.py").write_text(body)
        cfg = ModelConfig(
            name=name,
            backend="python",
            max_batch_size=0,
            inputs=[TensorConfig("X", "FP32", [1])],
            outputs=[TensorConfig("Y", "FP32", [1])],
            instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
        )
        config.save(cfg, tmp_path / name / "config.pbtxt")
    tools = str(Path(__file__).resolve().parents[2] / "tools")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tools, os.environ.get("PYTHONPATH")) if p)}
    serve = ["serve", "--repo", str(tmp_path), "--skip-bad-models", "--exit-timeout", "1"]  # stopped idle
    proc = subprocess.Popen(
        [sys.executable, "-m", "tritonkit", *serve],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any("not serving" in line for line in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        ready = next(line for line in lines if "ready" in line)
        url = ready.split("http=", 1)[1].split()[0]
        bad = [line for line in lines if "not serving" in line]
        assert bad == [
            "tritonkit serve: not serving: model `bad` version 1 failed to load: "
            "Internal: SyntaxError: invalid syntax (model.py, line 1)\n"
        ], lines
        client = httpclient.InferenceServerClient(url.removeprefix("http://"))
        try:
            assert client.is_server_ready() and client.is_model_ready("good")
            assert not client.is_model_ready("bad")
        finally:
            client.close()
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
