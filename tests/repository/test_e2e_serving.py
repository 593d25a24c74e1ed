"""End to end: differently shaped ONNX graphs imported with ``import_onnx``, checked with ``check``,
served by the real embedded ``tritonserver`` (python backend + portable runner), called over HTTP
and gRPC, and compared with ONNX Runtime run directly on the same file (exact equality).

One server serves the whole zoo (its start-up dominates the cost)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tritonkit.client import AsyncClient, Client
from tritonkit.convert.onnx_import import import_onnx
from tritonkit.errors import ModelLoadError, ServerError
from tritonkit.repository import STAGING_PREFIX, ModelRepository
from tritonkit.repository.check import check_repository
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

#: Models built a second time with the DLPack tensor exchange forced (the path NumPy-2 hosts take).
DLPACK_TWINS = ("two_in", "half_bool")
#: A long queue delay, so concurrent requests reliably meet in one `execute` call.
BATCHING_MODEL = "seq_sum_batched"
PROTOCOLS = ("http", "grpc")


class Served:
    def __init__(self, server: EmbeddedServer, sources: dict[str, Path]) -> None:
        self.server = server
        self.sources = sources
        self._sessions: dict[str, ort.InferenceSession] = {}

    def reference(self, model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if model not in self._sessions:
            self._sessions[model] = ort.InferenceSession(
                str(self.sources[model]), providers=["CPUExecutionProvider"]
            )
        session = self._sessions[model]
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds), strict=True))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, models: dict[str, onnx.ModelProto]) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("e2e")
    repo = ModelRepository(work / "repo", create=True)
    sources: dict[str, Path] = {}
    for name, model in models.items():
        path = work / f"{name}.onnx"
        onnx.save(model, str(path))
        sources[name] = path
        import_onnx(path, repo, name)
    for name in DLPACK_TWINS:
        twin = f"{name}_dlpack"
        sources[twin] = sources[name]
        import_onnx(sources[name], repo, twin, parameters={"tensor_exchange": "dlpack"})
    sources[BATCHING_MODEL] = sources["seq_sum"]
    import_onnx(sources["seq_sum"], repo, BATCHING_MODEL, max_queue_delay_us=300_000)
    assert check_repository(repo) == []
    with EmbeddedServer(repo.root, ServerOptions(log_file=work / "server.log", exit_timeout=1)) as server:
        yield Served(server, sources)


def infer(served: Served, protocol: str, model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One request with raw tritonclient; returns every output as an array."""
    module: Any = httpclient if protocol == "http" else grpcclient
    url = served.server.http_url if protocol == "http" else served.server.grpc_url
    client = module.InferenceServerClient(url)
    try:
        inputs = []
        for name, array in feeds.items():
            item = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            item.set_data_from_numpy(array)
            inputs.append(item)
        result = client.infer(model, inputs)
        outputs = result.get_response()["outputs"] if protocol == "http" else result.get_response().outputs
        names = [o["name"] if protocol == "http" else o.name for o in outputs]
        return {name: result.as_numpy(name) for name in names}
    finally:
        client.close()


def feeds_for(model: str, batch: int, rng: np.random.Generator, seq: int = 5) -> dict[str, np.ndarray]:
    base = model.removesuffix("_dlpack").removesuffix("_batched")
    match base:
        case "two_in":
            return {
                "x": rng.standard_normal((batch, 4), dtype=np.float32),
                "y": rng.standard_normal((batch, 4), dtype=np.float32),
            }
        case "seq_sum":
            return {"ids": rng.integers(-1000, 1000, size=(batch, seq), dtype=np.int64)}
        case "fixed":
            return {"m": rng.standard_normal((2, 3), dtype=np.float32)}
        case "half_bool":
            return {
                "h": rng.standard_normal((batch, 3)).astype(np.float16),
                "flag": rng.integers(0, 2, size=(batch, 3)).astype(bool),
            }
        case "gemm_names":
            return {"input.1": rng.standard_normal((batch, 4), dtype=np.float32)}
        case "strings":
            words = np.array([f"w{i}-ü".encode() for i in range(batch * 2)], dtype=object)
            return {"text": words.reshape(batch, 2)}
        case "gather":
            return {"idx": rng.integers(0, 5, size=(batch, 1), dtype=np.int64)}
    raise AssertionError(model)


def to_ort(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # ONNX Runtime wants str objects for string tensors; Triton carries bytes.
    return {
        k: np.vectorize(lambda b: b.decode(), otypes=[object])(v) if v.dtype == object else v
        for k, v in feeds.items()
    }


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    """Exact equality of values and dtypes; shapes equal up to Triton's rank-1 presentation."""
    assert set(got) == set(want)
    for name, reference in want.items():
        actual = got[name]
        expected = reference
        if reference.dtype == object:  # ORT returns str objects, Triton carries bytes
            expected = np.vectorize(lambda s: s.encode() if isinstance(s, str) else s, otypes=[object])(
                reference
            )
        assert actual.dtype == expected.dtype, name
        if expected.ndim == 1 and actual.shape != expected.shape:
            # A rank-1 batched output is configured as dims [1] + reshape []: clients see [batch, 1].
            assert actual.shape == (*expected.shape, 1), name
            actual = actual.reshape(expected.shape)
        np.testing.assert_array_equal(actual, expected, err_msg=name)


ZOO = ("two_in", "seq_sum", "fixed", "half_bool", "gemm_names", "strings", "gather")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "model",
    [*ZOO, *(f"{m}_dlpack" for m in DLPACK_TWINS)],
)
def test_served_outputs_equal_onnxruntime(served: Served, protocol: str, model: str) -> None:
    rng = np.random.default_rng(abs(hash((model, protocol))) % 2**32)
    feeds = feeds_for(model, batch=3, rng=rng)
    got = infer(served, protocol, model, feeds)
    assert_same(got, served.reference(model, to_ort(feeds)))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ZOO)
def test_tritonkit_clients_equal_onnxruntime(served: Served, protocol: str, model: str) -> None:
    """The client library's own request encoding and answer decoding (client.codec), every dtype of
    the zoo, blocking and asyncio, against ONNX Runtime."""
    rng = np.random.default_rng(abs(hash((model, protocol, "tritonkit"))) % 2**32)
    feeds = feeds_for(model, batch=2, rng=rng)
    want = served.reference(model, to_ort(feeds))
    url = served.server.http_url if protocol == "http" else served.server.grpc_url
    with Client(url, protocol) as client:
        assert_same(client.infer(model, feeds), want)

    async def main() -> dict[str, np.ndarray]:
        async with AsyncClient(url, protocol) as aclient:
            return await aclient.infer(model, feeds)

    assert_same(asyncio.run(main()), want)


def test_models_metadata_match_graph(served: Served) -> None:
    client = httpclient.InferenceServerClient(served.server.http_url)
    try:
        meta = client.get_model_metadata("gemm_names")
        config = client.get_model_config("fixed")
    finally:
        client.close()
    assert [i["name"] for i in meta["inputs"]] == ["input.1"]  # initializer-inputs are not inputs
    assert meta["inputs"][0]["shape"] == [-1, 4]
    assert meta["outputs"][0]["name"] == "onnx::Gemm_0"
    assert config["max_batch_size"] == 0
    assert config["input"][0]["dims"] == ["2", "3"] or config["input"][0]["dims"] == [2, 3]


def test_concurrent_mixed_shapes_are_batched_and_split_back(served: Served) -> None:
    """Requests of several batch sizes at once, in two waves of one sequence length each: each
    request gets its own rows back, and the queue delay grouped each wave into fewer executions.

    A wave holds one sequence length because Triton's dynamic batcher dispatches the batch it is
    forming as soon as the next queued request has another shape: requests of both lengths sent at
    once form as many batches as their arrival order alternates, which no client controls."""
    rng = np.random.default_rng(7)
    waves = [[(1, 5), (2, 5), (2, 5), (1, 5)], [(3, 7), (1, 7), (4, 7), (2, 7)]]
    client = httpclient.InferenceServerClient(served.server.http_url, concurrency=4)
    try:
        for shapes in waves:
            requests = [feeds_for(BATCHING_MODEL, batch=b, rng=rng, seq=s) for b, s in shapes]
            before = client.get_inference_statistics(BATCHING_MODEL, headers=served.server.admin_headers)[
                "model_stats"
            ][0]
            pending = []
            for feeds in requests:
                item = httpclient.InferInput("ids", list(feeds["ids"].shape), "INT64")
                item.set_data_from_numpy(feeds["ids"])
                pending.append(client.async_infer(BATCHING_MODEL, [item]))
            results = [p.get_result() for p in pending]
            after = client.get_inference_statistics(BATCHING_MODEL, headers=served.server.admin_headers)[
                "model_stats"
            ][0]
            for feeds, result in zip(requests, results, strict=True):
                want = served.reference(BATCHING_MODEL, feeds)
                assert_same({n: result.as_numpy(n) for n in want}, want)
            executions = int(after["execution_count"]) - int(before["execution_count"])
            inferences = int(after["inference_count"]) - int(before["inference_count"])
            assert inferences == sum(b for b, _ in shapes)
            assert executions < len(requests), (
                f"the 300 ms queue delay should have grouped some of {shapes}: {executions} executions"
            )
    finally:
        client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_runtime_error_is_an_error_response_and_the_model_keeps_serving(
    served: Served, protocol: str
) -> None:
    bad = {"idx": np.array([[99]], dtype=np.int64)}  # out of range for the 5-row table
    with pytest.raises(InferenceServerException) as err:
        infer(served, protocol, "gather", bad)
    assert "idx" in str(err.value) or "indices" in str(err.value).lower() or "out of" in str(err.value)
    good = {"idx": np.array([[4], [0]], dtype=np.int64)}
    assert_same(infer(served, protocol, "gather", good), served.reference("gather", good))


def test_bad_request_batched_with_good_ones_fails_alone(served: Served) -> None:
    client = httpclient.InferenceServerClient(served.server.http_url, concurrency=4)

    def submit(idx: np.ndarray) -> Any:
        item = httpclient.InferInput("idx", list(idx.shape), "INT64")
        item.set_data_from_numpy(idx)
        return client.async_infer("gather", [item])

    try:
        goods = [np.array([[i % 5]], dtype=np.int64) for i in range(3)]
        pending = [
            submit(goods[0]),
            submit(np.array([[42]], dtype=np.int64)),
            submit(goods[1]),
            submit(goods[2]),
        ]
        outcomes: list[Any] = []
        for p in pending:
            try:
                outcomes.append(p.get_result().as_numpy("rows"))
            except InferenceServerException as exc:
                outcomes.append(exc)
    finally:
        client.close()
    assert isinstance(outcomes[1], InferenceServerException)
    for got, idx in zip([outcomes[0], outcomes[2], outcomes[3]], goods, strict=True):
        np.testing.assert_array_equal(got, served.reference("gather", {"idx": idx})["rows"])


def test_tritonkit_client_over_http_and_grpc(served: Served) -> None:
    rng = np.random.default_rng(3)
    feeds = feeds_for("two_in", batch=2, rng=rng)
    want = served.reference("two_in", feeds)
    for protocol, url in (("http", served.server.http_url), ("grpc", served.server.grpc_url)):
        with Client(url, protocol=protocol) as client:
            got = client.infer("two_in", feeds)
        assert_same({k: got[k] for k in want}, want)


def test_leftover_staging_directory_breaks_triton_which_is_why_check_reports_it(
    tmp_path: Path, models: dict[str, onnx.ModelProto]
) -> None:
    """Triton 2.51 loads hidden root directories as models: the reason writes never leave one behind,
    and the embedded server refuses, naming it, before Triton fails on it."""
    repo = ModelRepository(tmp_path / "repo", create=True)
    source = tmp_path / "two_in.onnx"
    onnx.save(models["two_in"], str(source))
    import_onnx(source, repo, "two_in")
    stale = repo.root / f"{STAGING_PREFIX}killed"
    (stale / "two_in" / "1").mkdir(parents=True)
    assert check_repository(repo)[0].startswith(f"{STAGING_PREFIX}killed: staging directory left")
    with (
        pytest.raises(ServerError, match=f"holds {STAGING_PREFIX}killed, left by an interrupted build"),
        EmbeddedServer(repo.root, ServerOptions(startup_timeout=60)),
    ):
        pass
    import_onnx(source, repo, "again")  # the next write removes it (no live writer)
    assert not stale.exists()


def test_runner_load_error_reaches_the_caller(tmp_path: Path, models: dict[str, onnx.ModelProto]) -> None:
    """A runner that cannot start (CUDA asked for, ORT has none) fails the load with its own message."""
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("ONNX Runtime here has the CUDA provider, so this model would load")
    repo = ModelRepository(tmp_path / "repo", create=True)
    source = tmp_path / "two_in.onnx"
    onnx.save(models["two_in"], str(source))
    import_onnx(source, repo, "needs_cuda", parameters={"execution_provider": "cuda"})
    with pytest.raises(ModelLoadError) as err, EmbeddedServer(repo.root, ServerOptions(startup_timeout=60)):
        pass
    assert "needs_cuda" in str(err.value)
    assert "`execution_provider` is cuda but ONNX Runtime offers only" in str(err.value)
