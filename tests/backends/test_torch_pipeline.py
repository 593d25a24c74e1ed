"""The torch runner's pipelined execute (config parameter ``pipeline: on``), served on the CPU by the
real tritonserver 2.51: it answers as the synchronous runner does, one by one and in batches; a bad
request in a batch fails alone; unloading the model with requests in flight answers every one of
them; many requests in flight for seconds lose none and get their own rows back."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.utils import InferenceServerException

from tritonkit.client.protocol import grpc_headers
from tritonkit.config import load, save
from tritonkit.convert.execution import ServingSpec, plan_execution
from tritonkit.convert.torch_program import write_torch_version
from tritonkit.serve.embedded import EmbeddedServer

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
    pipeline: bool,
    delay_us: int = 500,
    preferred: list[int] | None = None,
    **params: str,
) -> None:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    examples = {"IDS": torch.randint(0, VOCAB, (2, SEQ)), "X": torch.randn(2, 8)}
    plan = plan_execution(ServingSpec(engine="torch", pipeline=pipeline), max_batch_size=8, gpus=[])
    write_torch_version(
        root, name, module, examples, ["Y"], plan, max_batch_size=8, max_queue_delay_us=delay_us
    )
    path = root / name / "config.pbtxt"
    config = load(path)
    assert config.parameters["pipeline"] == ("on" if pipeline else "off")
    config.parameters.update(params)
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


def test_pipelined_answers_equal_the_synchronous_runner(tmp_path: Path) -> None:
    module = _module()
    root = tmp_path / "repo"
    _write(root, "sync", module, pipeline=False)
    # a batch of one is not preferred and the delay is long: the concurrent requests wait for company and
    # batch however slowly a loaded machine sends them (with one preferred, each could leave alone)
    _write(root, "piped", module, pipeline=True, delay_us=100_000, preferred=[8], stats_interval_s="0.000001")
    requests = [_rows(1, seed) for seed in range(24)]
    log = tmp_path / "server.log"
    with EmbeddedServer(root, log_file=log, exit_timeout=1) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        ids, x = _rows(5, 99)  # one request of five rows, alone
        alone = {m: client.infer(m, _inputs(ids, x)).as_numpy("Y") for m in ("sync", "piped")}
        np.testing.assert_allclose(alone["piped"], _want(module, ids, x), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(alone["piped"], alone["sync"])
        got = {m: _concurrently(server.grpc_url, m, requests) for m in ("sync", "piped")}
        stats = _stats(client, "piped")
        client.close()
    for (ids, x), sync, piped in zip(requests, got["sync"], got["piped"], strict=True):
        assert isinstance(piped, np.ndarray), piped
        np.testing.assert_allclose(piped, _want(module, ids, x), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(piped, sync, rtol=1e-6, atol=1e-6)
    # The concurrent requests formed batches (fewer executions than requests).
    assert int(stats["inference_count"]) == 5 + len(requests)
    assert int(stats["execution_count"]) < 1 + len(requests)
    text = log.read_text()
    assert re.search(r"torch_runner ready: piped on cpu .*pipeline depth 2", text)
    assert re.search(r'torch_runner stats .*\\"model\\": \\"piped\\".*\\"pipelined\\": true', text)
    assert "could not be sent" not in text


@pytest.mark.parametrize("pipeline", [False, True], ids=["sync", "piped"])
def test_a_bad_request_in_a_batch_fails_alone(tmp_path: Path, pipeline: bool) -> None:
    module = _module()
    root = tmp_path / "repo"
    # A long delay and a preferred size of 4: the four requests sent at once form one batch.
    _write(root, "m", module, pipeline=pipeline, delay_us=2_000_000, preferred=[4])
    requests = [_rows(1, seed) for seed in range(4)]
    requests[2][0][0, 1] = VOCAB + 40  # a token id outside the embedding
    with EmbeddedServer(root, exit_timeout=1) as server:
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


def test_unloading_with_requests_in_flight_answers_every_request(tmp_path: Path) -> None:
    module = _module(width=512, layers=12)  # some milliseconds a batch on the CPU: requests stay in flight
    root = tmp_path / "repo"
    _write(root, "m", module, pipeline=True)
    requests = [_rows(1, seed) for seed in range(64)]
    log = tmp_path / "server.log"
    with EmbeddedServer(root, log_file=log, model_control_mode="explicit", exit_timeout=1) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        admin = grpc_headers(server.admin_headers)
        client.load_model("m", headers=admin)
        answers: list[Any] = [None] * len(requests)
        done = threading.Semaphore(0)

        def callback(index: int, result: Any, error: Any) -> None:
            try:
                answers[index] = result.as_numpy("Y") if error is None else str(error)
            except Exception as exc:  # the test thread reports it
                answers[index] = f"callback: {exc!r}"
            finally:
                done.release()

        for index, request in enumerate(requests):
            client.async_infer("m", _inputs(*request), functools.partial(callback, index))
        time.sleep(0.02)
        client.unload_model("m", headers=admin)
        deadline = time.monotonic() + 60
        answered = sum(done.acquire(timeout=max(0.0, deadline - time.monotonic())) for _ in requests)
        while client.is_model_ready("m") and time.monotonic() < deadline:
            time.sleep(0.1)
        unloaded = not client.is_model_ready("m")
        client.close()
    assert answered == len(requests), f"{len(requests) - answered} requests got no answer"
    served = 0
    for (ids, x), answer in zip(requests, answers, strict=True):
        if isinstance(answer, np.ndarray):
            np.testing.assert_allclose(answer, _want(module, ids, x), rtol=1e-4, atol=1e-4)
            served += 1
    assert served > 0 and unloaded
    assert "could not be sent" not in log.read_text()


def test_many_requests_in_flight_for_seconds_lose_none(tmp_path: Path) -> None:
    module = _module()
    root = tmp_path / "repo"
    _write(root, "m", module, pipeline=True, delay_us=100, pipeline_senders="4")  # answers sent in parallel
    users = 64
    requests = [_rows(1, seed) for seed in range(users)]
    wants = [_want(module, ids, x) for ids, x in requests]

    async def load(url: str) -> tuple[int, list[str]]:
        client = grpcaio.InferenceServerClient(url)
        sent, wrong = 0, []
        stop = time.monotonic() + 3.0

        async def user(index: int) -> None:
            nonlocal sent
            while time.monotonic() < stop:
                sent += 1
                try:
                    result = await client.infer("m", _inputs(*requests[index]), client_timeout=60)
                except InferenceServerException as exc:
                    wrong.append(f"user {index}: {exc.message()}")
                    continue
                if not np.allclose(result.as_numpy("Y"), wants[index], rtol=1e-5, atol=1e-5):
                    wrong.append(f"user {index}: another request's rows")

        await asyncio.gather(*(user(i) for i in range(users)))
        await client.close()
        return sent, wrong

    log = tmp_path / "server.log"
    with EmbeddedServer(root, log_file=log, exit_timeout=1) as server:
        sent, wrong = asyncio.run(load(server.grpc_url))
        client = grpcclient.InferenceServerClient(server.grpc_url)
        stats = _stats(client, "m")
        client.close()
    assert wrong == []
    assert sent > users
    assert int(stats["inference_stats"]["success"]["count"]) == sent
    assert int(stats["execution_count"]) < sent  # batches formed
    assert "could not be sent" not in log.read_text()


def test_profile_says_compute_infer_is_the_hand_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tritonkit.cli import main  # noqa: PLC0415 (only here)
    from tritonkit.tune.space import PIPELINED_NOTE  # noqa: PLC0415 (only here)

    root = tmp_path / "repo"
    _write(root, "m", _module(), pipeline=True)
    with EmbeddedServer(root, exit_timeout=1) as server:
        code = main(
            ["profile", "--model", "m", "--url", server.http_url, f"--admin-key={server.admin_key}",
             "--concurrency", "2", "--window-s", "0.15", "--stability-pct", "60", "--max-windows", "3",
             "--json", str(tmp_path / "p.json")]
        )  # fmt: skip
    assert code == 0
    assert f"note: {PIPELINED_NOTE}" in capsys.readouterr().out
    assert json.loads((tmp_path / "p.json").read_text())["compute_infer_is"].startswith("hand-over")
