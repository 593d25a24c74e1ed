"""The native runner serves shape buckets, on the CPU: a torch version with a dynamic sequence axis built
with ``serving: {runner: native}`` is traced once per (batch bucket, shape bucket) into ``model.ts`` and
served by tritonkit's C++ backend (compiled here for this torch) inside the real tritonserver. Requests
of mixed lengths share executes, each padded to its bucket with its inputs' pad values; the token-level
output is cut back to each request's own length and both outputs equal the module run at that length
over HTTP and gRPC; a request above the last edge fails alone with shape_buckets.TooLongError's line;
the backend groups an execute's requests by the timed cost table it logs at load exactly as
``shape_buckets.plan_groups`` does (a tiny group merged upward where that is cheaper). The fixed-shape
path is ``tests/backends/test_native.py``'s; the GPU half (a CUDA graph per (batch, shape) bucket) runs
in ``scripts/gpu/buckets.py --runner native``."""

from __future__ import annotations

import functools
import json
import re
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from numpy.typing import NDArray
from tritonclient.utils import InferenceServerException

from tritonkit.backends import native
from tritonkit.backends.runners.shape_buckets import Buckets, TooLongError, plan_groups
from tritonkit.config import DynamicBatching, ModelConfig, TensorConfig, load, save
from tritonkit.config.tensors import TensorSpec
from tritonkit.convert.graph.export import TorchSource
from tritonkit.convert.graph.source import Source
from tritonkit.convert.spec.buildspec import parse_spec
from tritonkit.convert.spec.execution import ServingSpec, plan_execution
from tritonkit.convert.targets.buckets import apply_buckets
from tritonkit.convert.targets.gpu_target import plan_version
from tritonkit.convert.targets.torch_program import write_torch_version
from tritonkit.errors import ServerError
from tritonkit.repository.check import check_repository, executions
from tritonkit.repository.onnx_io import GraphIO
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the native backend needs g++ to compile")

EDGES = (8, 16, 32)
BUCKETS = Buckets(
    axes={"seq": EDGES},
    inputs={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}},
    outputs={"hidden": {1: "seq"}},
    pad={"input_ids": 0, "attention_mask": 0},
)
MAX_BATCH = 8
LONG_DELAY_US = 1_500_000


def _module() -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    class Tokens(torch.nn.Module):
        """Masked self-attention over the sequence (a pad key, mask 0, weighs nothing), positions made
        on the input's device, a per-token output and its masked mean."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(50, 8)
            self.pos = torch.nn.Embedding(32, 8)
            self.proj = torch.nn.Linear(8, 8)

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
            h = self.embed(input_ids) + self.pos(positions)
            keep = attention_mask.to(torch.bool)
            scores = (h @ h.transpose(1, 2)).masked_fill(~keep[:, None, :], -1e9)
            hidden = self.proj(scores.softmax(-1) @ h)
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return hidden, (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    torch.manual_seed(0)
    return Tokens().eval()


PLANES = Buckets(axes={"len": (4, 8)}, inputs={"x": {2: "len"}}, outputs={"y": {2: "len"}}, pad={"x": 1e9})


def _planes() -> Any:
    import torch  # noqa: PLC0415

    class Planes(torch.nn.Module):
        """The bucketed axis is axis 2 of a float input: ``low`` (its minimum) holds only where the pad
        value (1e9, above every value) fills the padding."""

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x * 2, x.min(dim=2).values

    return Planes().eval()


def _ids(rows: int, length: int, seed: int) -> NDArray[np.int64]:
    return np.random.default_rng(seed).integers(1, 50, (rows, length)).astype(np.int64)


def _expected(ids: NDArray[np.int64]) -> tuple[NDArray[Any], NDArray[Any]]:
    import torch  # noqa: PLC0415

    with torch.no_grad():
        hidden, pooled = _module()(torch.from_numpy(ids), torch.ones_like(torch.from_numpy(ids)))
    return hidden.numpy(), pooled.numpy()


@pytest.fixture(scope="module")
def native_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch  # noqa: PLC0415

    repo = tmp_path_factory.mktemp("native_buckets") / "repo"
    plan = plan_execution(ServingSpec(engine="torch", runner="native"), max_batch_size=MAX_BATCH, gpus=[])
    ids = torch.randint(1, 50, (2, 12))
    examples = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    write_torch_version(
        repo,
        "tok",
        _module(),
        examples,
        ["hidden", "pooled"],
        plan,
        max_batch_size=MAX_BATCH,
        buckets=BUCKETS,
    )
    write_torch_version(
        repo,
        "planes",
        _planes(),
        {"x": torch.rand(2, 2, 6) + 1},
        ["y", "low"],
        plan,
        max_batch_size=4,
        buckets=PLANES,
    )
    # The same, its batcher waiting long for a full batch: one execute meets every length sent at once.
    shutil.copytree(repo / "tok", repo / "gather")
    for name, extra in (
        ("gather", {}),
        ("gather_answering", {"answer_thread": "true"}),
        ("gather_chunked", {"graph_max_batch": "4"}),  # methods up to 4 rows; 8-row executes run as two
    ):
        if name != "gather":
            shutil.copytree(repo / "gather", repo / name)
        path = repo / name / "config.pbtxt"
        config = load(path)
        config.name = name
        assert config.dynamic_batching is not None
        config.dynamic_batching.max_queue_delay_microseconds = LONG_DELAY_US
        config.dynamic_batching.preferred_batch_size = []
        config.parameters.update(extra)
        save(config, path)
    return repo


@pytest.fixture(scope="module")
def server(native_repo: Path) -> Iterator[EmbeddedServer]:
    with EmbeddedServer(native_repo, ServerOptions(exit_timeout=1, log_verbose=1)) as running:
        yield running


def _inputs(module: Any, ids: NDArray[np.int64]) -> list[Any]:
    feeds = []
    for name, value in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
        tensor = module.InferInput(name, list(value.shape), "INT64")
        tensor.set_data_from_numpy(value)
        feeds.append(tensor)
    return feeds


def _call(server: EmbeddedServer, model: str, ids: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer(model, _inputs(grpcclient, ids))
    return {"hidden": result.as_numpy("hidden"), "pooled": result.as_numpy("pooled")}


def _concurrently(calls: list[Callable[[], Any]]) -> list[Any]:
    """Each call's result (or the exception it raised), all started at once."""
    results: list[Any] = [None] * len(calls)

    def one(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception as exc:  # the refused request's answer, compared by the test
            results[index] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def _settled_stats(server: EmbeddedServer, model: str, inferences: int) -> Any:
    """The model's statistics once Triton has counted ``inferences`` (it counts a request after its answer)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    deadline = time.monotonic() + 10
    while True:
        stats = client.get_inference_statistics(model).model_stats[0]
        if stats.inference_count >= inferences or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def _log(server: EmbeddedServer) -> str:
    assert server.log_file is not None
    return server.log_file.read_text(errors="replace")


def _cost_table(server: EmbeddedServer, model: str) -> dict[tuple[int, tuple[int, ...]], float]:
    """The load-time line's cost table: ms by (batch bucket, edges)."""
    line = next(
        ln
        for ln in _log(server).splitlines()
        if f"tritonkit_torch: {model} on cpu: " in ln and "cost ms" in ln
    )
    table = line.split("cost ms by (batch, edges): ", 1)[1]
    return {
        (int(rows), tuple(int(e) for e in edges.split(", "))): float(ms)
        for rows, edges, ms in re.findall(r"(\d+)x\[([\d, ]+)\] ([\d.]+)", table)
    }


def _executes(
    server: EmbeddedServer, model: str
) -> list[tuple[list[tuple[int, tuple[int, ...]]], list[Any]]]:
    """Each verbose execute line of ``model``: its requests' (rows, edges) and its groups."""
    found = []
    for members, groups in re.findall(
        rf"tritonkit_torch: {model} execute: requests (.*?); groups (.*?)$", _log(server), re.MULTILINE
    ):
        requests = [
            (int(rows), tuple(int(e) for e in edges.split(", ")))
            for rows, edges in re.findall(r"(\d+)x\[([\d, ]+)\]", members)
        ]
        runs = [
            (tuple(int(e) for e in edges.split(", ")), [int(p) for p in positions.split(",")])
            for edges, positions in re.findall(r"\[([\d, ]+)\]:([\d,]+)", groups)
        ]
        found.append((requests, runs))
    return found


def _python_cost(table: dict[tuple[int, tuple[int, ...]], float]) -> Callable[[int, tuple[int, ...]], float]:
    """gpu_requests.BucketedPath's cost on the backend's table: each chunk's time plus 0.02 ms."""
    sizes = sorted({rows for rows, _ in table})

    def cost(rows: int, edges: tuple[int, ...]) -> float:
        pieces = [sizes[-1]] * (rows // sizes[-1])
        if rows % sizes[-1]:
            pieces.append(next(b for b in sizes if b >= rows % sizes[-1]))
        total = 0.0
        for bucket in pieces:
            total += table[(bucket, edges)] + 0.02
        return total

    return cost


@pytest.mark.slow
def test_the_build_traces_a_method_per_batch_and_shape_bucket_and_checks_clean(native_repo: Path) -> None:
    import torch  # noqa: PLC0415

    config = load(native_repo / "tok" / "config.pbtxt")
    assert config.backend == "tritonkit_torch"
    assert [(t.name, list(t.dims), t.allow_ragged_batch) for t in config.inputs] == [
        ("input_ids", [-1], True),
        ("attention_mask", [-1], True),
    ]
    assert [list(t.dims) for t in config.outputs] == [[-1, 8], [8]]
    assert Buckets.parse(config.parameters["shape_buckets"]) == BUCKETS  # padded on the server
    version = native_repo / "tok" / "1"
    assert not (version / "model.py").exists() and not (version / "shape_buckets.py").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load: what the C++ backend reads
        program = torch.jit.load(str(version / "model.ts"), map_location="cpu")  # type: ignore[no-untyped-call]
    names = [name for name, _, _ in native.method_names([1, 2, 4, 8], BUCKETS)]
    assert names[:3] == ["b1_s8", "b1_s16", "b1_s32"] and len(names) == 12
    assert all(hasattr(program, name) for name in names)
    assert not hasattr(program, "b8")
    ids = _ids(3, 11, 5)  # a method answers a padded batch's real rows as the module does
    padded = np.zeros((4, 16), dtype=np.int64)
    padded[:3, :11] = ids
    with torch.no_grad():
        hidden, pooled = program.b4_s16(
            torch.from_numpy(padded), torch.from_numpy((padded > 0).astype(np.int64))
        )
    want_hidden, want_pooled = _expected(ids)
    np.testing.assert_allclose(hidden[:3, :11].numpy(), want_hidden, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pooled[:3].numpy(), want_pooled, rtol=1e-5, atol=1e-5)
    assert check_repository(native_repo, "embedded", gpus=[]) == []
    assert next(e for e in executions(native_repo) if e.startswith("tok ")).startswith(
        "tok version 1 executes on cpu: engine torch (native runner), fp32"
    )


@pytest.mark.slow
def test_answers_equal_the_module_at_each_requests_own_length_over_http_and_grpc(
    server: EmbeddedServer,
) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    http = httpclient.InferenceServerClient(server.http_url)
    for rows, length in ((1, 1), (2, 5), (1, 8), (3, 9), (1, 16), (2, 17), (MAX_BATCH, 32)):
        ids = _ids(rows, length, rows * 100 + length)
        want_hidden, want_pooled = _expected(ids)
        for module, client in ((grpcclient, grpc), (httpclient, http)):
            result = client.infer("tok", _inputs(module, ids))
            assert result.as_numpy("hidden").shape == (rows, length, 8)
            np.testing.assert_allclose(result.as_numpy("hidden"), want_hidden, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(result.as_numpy("pooled"), want_pooled, rtol=1e-5, atol=1e-5)
    table = _cost_table(server, "tok")
    assert set(table) == {(b, (e,)) for b in (1, 2, 4, 8) for e in EDGES}
    assert re.search(
        r"tritonkit_torch: tok on cpu: 12 methods for 4 batch x 3 shape buckets; cost ms", _log(server)
    )


@pytest.mark.slow
def test_an_inner_bucketed_axis_is_padded_with_its_inputs_pad_value_and_cut(server: EmbeddedServer) -> None:
    """Axis 2 of ``x`` is bucketed: its rows are not one block each (staged and answered through torch,
    not row by row), the padding is ``x``'s pad value (the minimum stays the request's own)."""
    import torch  # noqa: PLC0415

    x = [np.random.default_rng(n).uniform(1, 2, (1 + n % 2, 2, n)).astype(np.float32) for n in (3, 5, 8, 2)]

    def call(value: NDArray[np.float32]) -> Any:
        tensor = httpclient.InferInput("x", list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        with httpclient.InferenceServerClient(server.http_url) as client:
            return client.infer("planes", [tensor])

    for value, answer in zip(x, _concurrently([functools.partial(call, v) for v in x]), strict=True):
        with torch.no_grad():
            y, low = _planes()(torch.from_numpy(value))
        np.testing.assert_array_equal(answer.as_numpy("y"), y.numpy())
        np.testing.assert_array_equal(answer.as_numpy("low"), low.numpy())


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gather", "gather_answering", "gather_chunked"])
def test_concurrent_mixed_lengths_share_executes_and_each_gets_its_own_length(
    server: EmbeddedServer, model: str
) -> None:
    """Eight one-row requests of eight lengths at once: fewer executes than requests (Triton's batcher
    hands ragged requests to one execute), each answer cut back to its own length; ``gather_answering``
    writes its answers on a second thread, ``gather_chunked`` runs groups above its ``graph_max_batch`` of
    4 in chunks."""
    before = _settled_stats(server, model, 0).inference_count
    lengths = [2, 31, 9, 16, 17, 5, 32, 11]
    sent = [_ids(1, n, 7 * i + n) for i, n in enumerate(lengths)]
    got = _concurrently([functools.partial(_call, server, model, ids) for ids in sent])
    for ids, answer in zip(sent, got, strict=True):
        want_hidden, want_pooled = _expected(ids)
        np.testing.assert_allclose(answer["hidden"], want_hidden, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(answer["pooled"], want_pooled, rtol=1e-5, atol=1e-5)
    stats = _settled_stats(server, model, before + len(sent))
    assert stats.inference_count == before + len(sent)
    assert stats.execution_count < stats.inference_count, "mixed lengths did not share an execute"


@pytest.mark.slow
def test_a_too_long_request_fails_alone_with_the_one_line_message(server: EmbeddedServer) -> None:
    """The line the python runners answer with, from the buckets as the config carries them."""
    too_long = _ids(1, 40, 3)
    served = Buckets.parse(load(server.repo / "gather" / "config.pbtxt").parameters["shape_buckets"])
    assert served is not None
    with pytest.raises(TooLongError) as raised:
        served.lengths({"input_ids": too_long.shape, "attention_mask": too_long.shape})
    message = str(raised.value)
    assert (
        message
        == "input `input_ids` is 40 long on axis seq; the model takes at most 32 (its last shape bucket)"
    )
    good = [_ids(1, n, n) for n in (3, 12, 30)]
    calls: list[Callable[[], Any]] = [functools.partial(_call, server, "gather", ids) for ids in good]
    calls.append(functools.partial(_call, server, "gather", too_long))
    results = _concurrently(calls)
    for ids, answer in zip(good, results[:3], strict=True):
        np.testing.assert_allclose(answer["hidden"], _expected(ids)[0], rtol=1e-5, atol=1e-5)
    refused = results[3]
    assert isinstance(refused, InferenceServerException)
    assert refused.message() == message
    with (  # the same line over HTTP
        httpclient.InferenceServerClient(server.http_url) as http,
        pytest.raises(InferenceServerException) as over_http,
    ):
        http.infer("tok", _inputs(httpclient, too_long))
    assert over_http.value.message() == message
    # the refused request shared its execute with the three others, and was not among its groups' rows
    assert any(
        len(requests) == 3 and sorted(e for _, (e,) in requests) == [8, 16, 32]
        for requests, _ in _executes(server, "gather")
    )


@pytest.mark.slow
def test_the_backend_groups_as_plan_groups_does_on_its_logged_cost_table(server: EmbeddedServer) -> None:
    """One row of bucket 8 beside three of bucket 16: three rows run as batch bucket 4 anyway, so the
    tiny group rides in the padding for free (its own run saved, whatever the timed table says) and the
    backend pads it up into 16: one run. And every execute's groups, in every test of this model, are
    what ``shape_buckets.plan_groups`` makes of its requests on the table the backend logged at load."""
    table = _cost_table(server, "gather")
    cost = _python_cost(table)
    assert cost(1, (8,)) + cost(3, (16,)) - cost(4, (16,)) == pytest.approx(cost(1, (8,)))
    assert cost(1, (8,)) > 0
    sent = [_ids(1, 5, 1), _ids(3, 12, 2)]
    got = _concurrently([functools.partial(_call, server, "gather", ids) for ids in sent])
    for ids, answer in zip(sent, got, strict=True):
        want_hidden, want_pooled = _expected(ids)
        np.testing.assert_allclose(answer["hidden"], want_hidden, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(answer["pooled"], want_pooled, rtol=1e-5, atol=1e-5)
    executes = _executes(server, "gather")
    for requests, groups in executes:
        assert groups == [(edges, positions) for edges, positions in plan_groups(requests, cost)], table
    pair = [groups for requests, groups in executes if sorted(requests) == [(1, (8,)), (3, (16,))]]
    assert pair, f"the two requests did not share an execute: {executes}"
    assert pair[-1] == [((16,), [0, 1])]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"axes": {"seq": [8, 16, 24, 32]}},
            "model.ts has no method b1_s24 for batch bucket 1 and shape bucket [24]",
        ),
        ({"axes": {"seq": [16, 8]}}, "`shape_buckets.axes.seq` must be ascending distinct integers >= 1"),
        ({"inputs": {"input_ids": {"1": "len"}}}, "`shape_buckets.inputs.input_ids` names axis 'len'"),
    ],
)
def test_shape_buckets_the_program_or_config_cannot_serve_fail_to_load_with_one_line(
    native_repo: Path, tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(native_repo / "tok", repo / "tok")
    path = repo / "tok" / "config.pbtxt"
    config = load(path)
    config.parameters["shape_buckets"] = json.dumps(
        {**json.loads(config.parameters["shape_buckets"]), **change}
    )
    save(config, path)
    with (
        pytest.raises(ServerError, match=re.escape(message)),
        EmbeddedServer(repo, ServerOptions(exit_timeout=1)),
    ):
        pass


def _dynamic_source() -> Source:
    import torch  # noqa: PLC0415

    ids = torch.randint(1, 50, (2, 12))
    module = TorchSource(
        _module(),
        (ids, torch.ones_like(ids)),
        ("input_ids", "attention_mask"),
        ("hidden", "pooled"),
        dynamic_axes={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}, "hidden": {1: "seq"}},
    )
    graph = GraphIO(
        (TensorSpec("input_ids", "INT64", (-1, -1)), TensorSpec("attention_mask", "INT64", (-1, -1))),
        (TensorSpec("hidden", "FP32", (-1, -1, 8)), TensorSpec("pooled", "FP32", (-1, 8))),
        17,
    )
    return Source(onnx=Path("unused.onnx"), origin=Path("unused.onnx"), graph=graph, torch=module)


@pytest.mark.parametrize("runner", ["native", "auto"])
def test_a_dynamic_axis_source_is_planned_on_the_native_runner(
    runner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runner: native`` takes a source with dynamic axes, and ``auto`` picks native for it on a GPU
    where the backend compiles (here told it does: this host has no CUDA headers)."""
    monkeypatch.setattr(native, "unavailable", lambda cuda=True: None)
    spec = parse_spec(
        {"name": "tok", "source": {"torch": f"{__name__}:_module"}, "serving": {"runner": runner}}
    )
    plan = plan_version(spec, _dynamic_source(), "fp32", MAX_BATCH, gpus=[0], profile=None)
    assert (plan.device, plan.engine, plan.runner, plan.runner_reason) == ("gpu", "torch", "native", "")


def test_a_native_gpu_config_pads_on_the_server_and_gathers_four_graph_batches() -> None:
    """The native backend pads on the server like the python runners (ragged inputs, ``pad_at:
    server``) without their helper file, and on a GPU gathers as the torch runner does: its graphs keep
    the spec's max batch (``graph_max_batch``, which the backend reads), an execute takes four times it."""
    config = ModelConfig(
        name="m",
        backend=native.BACKEND,
        max_batch_size=64,
        inputs=[TensorConfig("input_ids", "INT64", [-1]), TensorConfig("attention_mask", "INT64", [-1])],
        outputs=[TensorConfig("hidden", "FP32", [-1, 8]), TensorConfig("pooled", "FP32", [8])],
        dynamic_batching=DynamicBatching(preferred_batch_size=[1, 2, 4, 8, 16, 32, 64]),
        parameters={"engine": "torch", "device": "cuda"},
    )
    assert apply_buckets(config, BUCKETS) == {}
    assert all(t.allow_ragged_batch for t in config.inputs)
    written = Buckets.parse(config.parameters["shape_buckets"])
    assert written is not None and written.pad_at == "server"
    assert config.max_batch_size == 256 and config.parameters["graph_max_batch"] == "64"
