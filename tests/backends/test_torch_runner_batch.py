"""The torch runner's execute of a batch, served on the CPU by the real tritonserver 2.51: the requests
Triton batched are answered one response each, a bad request in a batch failing alone (its error)
while the others get their own rows."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tritonkit.config import load, save
from tritonkit.convert.spec.execution import ServingSpec, plan_execution
from tritonkit.convert.targets.torch_program import write_torch_version
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

pytestmark = pytest.mark.slow  # a torch version built and served per test: seconds each

VOCAB = 50
SEQ = 5


def _module(width: int = 16, layers: int = 1) -> Any:
    """Token ids and a float row in, 4 floats out; ids outside the vocabulary fail (IndexError)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(VOCAB, 8)
            body: list[torch.nn.Module] = [torch.nn.Linear(8, width)]
            for _ in range(layers):
                body += [torch.nn.ReLU(), torch.nn.Linear(width, width)]
            self.body = torch.nn.Sequential(*body, torch.nn.Linear(width, 4))

        def forward(self, IDS: torch.Tensor, X: torch.Tensor) -> torch.Tensor:  # noqa: N803 (input names)
            out: torch.Tensor = self.body(self.emb(IDS).mean(dim=1) + X)
            return out

    torch.manual_seed(0)
    return Tiny().eval()


def _write(
    root: Path,
    name: str,
    module: Any,
    delay_us: int = 500,
    preferred: list[int] | None = None,
) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    examples = {"IDS": torch.randint(0, VOCAB, (2, SEQ)), "X": torch.randn(2, 8)}
    plan = plan_execution(ServingSpec(engine="torch"), max_batch_size=8, gpus=[])
    write_torch_version(
        root, name, module, examples, ["Y"], plan, max_batch_size=8, max_queue_delay_us=delay_us
    )
    path = root / name / "config.pbtxt"
    config = load(path)
    if preferred is not None and config.dynamic_batching is not None:
        config.dynamic_batching.preferred_batch_size = preferred
    save(config, path)


def _inputs(ids: np.ndarray[Any, Any], x: np.ndarray[Any, Any]) -> list[grpcclient.InferInput]:
    inputs = [
        grpcclient.InferInput("IDS", list(ids.shape), "INT64"),
        grpcclient.InferInput("X", list(x.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(ids)
    inputs[1].set_data_from_numpy(x)
    return inputs


def _rows(n: int, seed: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    return (
        rng.integers(0, VOCAB, (n, SEQ)).astype(np.int64),
        rng.standard_normal((n, 8)).astype(np.float32),
    )


def _want(module: Any, ids: np.ndarray[Any, Any], x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    with torch.inference_mode():
        out: np.ndarray[Any, Any] = module(torch.from_numpy(ids), torch.from_numpy(x)).numpy()
    return out


def _stats(client: Any, model: str) -> dict[str, Any]:
    stats: dict[str, Any] = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return stats


def _concurrently(url: str, model: str, requests: list[tuple[Any, Any]]) -> list[Any]:
    """Each request sent at once from its own thread; its answer (an array) or its error (a string)."""
    answers: list[Any] = [None] * len(requests)

    def send(index: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        try:
            answers[index] = client.infer(model, _inputs(*requests[index]), client_timeout=60).as_numpy("Y")
        except InferenceServerException as exc:
            answers[index] = str(exc.message())
        finally:
            client.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    return answers


def test_a_bad_request_in_a_batch_fails_alone(tmp_path: Path) -> None:
    module = _module()
    root = tmp_path / "repo"
    # A long delay and a preferred size of 4: the four requests sent at once form one batch.
    _write(root, "m", module, delay_us=2_000_000, preferred=[4])
    requests = [_rows(1, seed) for seed in range(4)]
    requests[2][0][0, 1] = VOCAB + 40  # a token id outside the embedding
    with EmbeddedServer(root, ServerOptions(exit_timeout=1)) as server:
        answers = _concurrently(server.grpc_url, "m", requests)
        client = grpcclient.InferenceServerClient(server.grpc_url)
        batches = {
            int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in _stats(client, "m")["batch_stats"]
        }
        client.close()
    assert batches == {4: 1}
    for index, ((ids, x), answer) in enumerate(zip(requests, answers, strict=True)):
        if index == 2:
            assert isinstance(answer, str) and "index out of range" in answer
        else:
            assert isinstance(answer, np.ndarray), answer
            np.testing.assert_allclose(answer, _want(module, ids, x), rtol=1e-5, atol=1e-5)
