"""``batching.queue`` / ``--max-queue-size`` (issue 11, defect 4): written into ``dynamic_batching``
and enforced by the real server: a full queue answers UNAVAILABLE at once while accepted requests succeed.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tritonkit import config
from tritonkit.cli import main
from tritonkit.config import ModelConfig
from tritonkit.convert.spec.buildspec import BatchingSpec, QueueSpec, apply_queue_policy, parse_spec
from tritonkit.errors import SpecError
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

# Echo after 0.3 s: the server's one instance is busy long enough for the queue to fill.
SLOW_RUNNER = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.3)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests
        ]
"""


def _identity(path: Path) -> None:
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 2])
    graph = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_spec_keys_reach_the_config() -> None:
    spec = parse_spec(
        {
            "name": "m",
            "source": {"onnx": "m.onnx"},
            "batching": {
                "queue": {"max_size": 16, "timeout_us": 5000, "timeout_action": "DELAY"},
                "priority_levels": 3,
                "default_priority_level": 2,
            },
        }
    )
    cfg = ModelConfig(name="m", backend="python", max_batch_size=8, dynamic_batching=config.DynamicBatching())
    apply_queue_policy(cfg, spec.batching)
    assert cfg.dynamic_batching is not None
    policy = cfg.dynamic_batching.default_queue_policy
    assert policy is not None and (policy.max_queue_size, policy.default_timeout_microseconds) == (16, 5000)
    assert policy.timeout_action == "DELAY"
    assert (cfg.dynamic_batching.priority_levels, cfg.dynamic_batching.default_priority_level) == (3, 2)


@pytest.mark.parametrize(
    ("batching", "message"),
    [
        ({"queue": {"max_size": -1}}, "spec key `batching.queue.max_size`: expected an integer >= 0, got -1"),
        ({"queue": {"timeout_action": "DROP"}}, "batching.queue.timeout_action"),
        ({"priority_levels": 2, "default_priority_level": 3}, "expected 1..2"),
        ({"default_priority_level": 1}, "expected 0 without `batching.priority_levels`"),
    ],
)
def test_bad_queue_keys_are_one_line(batching: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace(".", r"\.")) as info:
        parse_spec({"name": "m", "source": {"onnx": "m.onnx"}, "batching": batching})
    assert "\n" not in str(info.value)


def test_queue_policy_needs_dynamic_batching() -> None:
    cfg = ModelConfig(name="m", backend="python", max_batch_size=0)
    with pytest.raises(SpecError, match="need dynamic batching; model `m` has max_batch_size 0"):
        apply_queue_policy(cfg, BatchingSpec(queue=QueueSpec(max_size=4)))


@pytest.mark.timeout(300)
def test_full_queue_rejects_fast_and_accepted_requests_succeed(tmp_path: Path) -> None:
    _identity(tmp_path / "m.onnx")
    repo = tmp_path / "repo"
    rc = main(
        [
            "build",
            "--onnx",
            str(tmp_path / "m.onnx"),
            "--repo",
            str(repo),
            "--max-batch-size",
            "1",
            "--max-queue-delay-us",
            "0",
            "--max-queue-size",
            "4",
        ]
    )
    assert rc == 0
    cfg = config.load(repo / "m" / "config.pbtxt")
    assert cfg.dynamic_batching is not None and cfg.dynamic_batching.default_queue_policy is not None
    assert cfg.dynamic_batching.default_queue_policy.max_queue_size == 4
    (repo / "m" / "1" / "model.py").write_text(SLOW_RUNNER)  # the built config, a slow runner

    def call(i: int) -> tuple[str, float]:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
        tensor = httpclient.InferInput("X", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.array([[i, i]], dtype=np.float32))
        start = time.monotonic()
        try:
            out = client.infer("m", [tensor]).as_numpy("Y")
            assert out is not None and out.tolist() == [[i, i]]
            return "ok", time.monotonic() - start
        except InferenceServerException as exc:
            return str(exc.message()), time.monotonic() - start
        finally:
            client.close()

    with EmbeddedServer(repo, ServerOptions(exit_timeout=5)) as server, ThreadPoolExecutor(24) as pool:
        results = list(pool.map(call, range(24)))
    accepted = [t for what, t in results if what == "ok"]
    rejected = [(what, t) for what, t in results if what != "ok"]
    assert len(accepted) >= 5, results
    assert len(rejected) >= 8, results
    assert all("Exceeds maximum queue size" in what for what, _ in rejected), rejected
    assert max(t for _, t in rejected) < 1.0, rejected  # fast: not after waiting behind the queue
