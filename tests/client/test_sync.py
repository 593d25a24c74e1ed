"""Every method of the blocking Client, on both protocols, against the real embedded server."""

from __future__ import annotations

import threading

import numpy as np
import psutil
import pytest

from tritonkit.client import Client, ClientError, ModelInfo, TensorSpec
from tritonkit.serve.embedded import EmbeddedServer


def test_infer_returns_model_outputs(client: Client) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = client.infer("add", {"X": x})
    assert set(out) == {"Y"}
    np.testing.assert_array_equal(out["Y"], x + 1)
    assert out["Y"].dtype == np.float32


def test_infer_selected_outputs_only(client: Client) -> None:
    a = np.full((2, 3), 5, np.float32)
    b = np.full((2, 3), 2, np.float32)
    both = client.infer("pair", {"A": a, "B": b})
    np.testing.assert_array_equal(both["SUM"], a + b)
    np.testing.assert_array_equal(both["DIFF"], a - b)
    only = client.infer("pair", {"A": a, "B": b}, outputs=["DIFF"])
    assert list(only) == ["DIFF"]
    np.testing.assert_array_equal(only["DIFF"], a - b)
    reordered = client.infer("pair", {"A": a, "B": b}, outputs=("DIFF", "SUM"))
    assert list(reordered) == ["DIFF", "SUM"]
    none_named = client.infer("pair", {"A": a, "B": b}, outputs=[])  # as in tritonclient: every output
    assert list(none_named) == ["SUM", "DIFF"]
    np.testing.assert_array_equal(none_named["SUM"], a + b)


def test_infer_explicit_version_and_unbatched_model(client: Client) -> None:
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.testing.assert_array_equal(client.infer("fixed", {"A": a}, version=1)["Z"], a + a)
    np.testing.assert_array_equal(client.infer("fixed", {"A": a}, version="1", timeout=10)["Z"], a + a)


@pytest.mark.parametrize(
    "text",
    [["hello", "wörld"], [b"hello", "w\u00f6rld".encode()], np.array([["hello"], ["wörld"]], dtype=object)],
    ids=["list-str", "list-bytes", "object-array"],
)
def test_bytes_round_trip(client: Client, text: object) -> None:
    out = client.infer("echo", {"TEXT": text})["OUT"]
    assert out.dtype == object
    assert out.shape == (2, 1)
    assert [v for v in out.reshape(-1)] == [b"HELLO", "wörld".encode().upper()]  # bytes.upper(): ASCII only


def test_infer_batch_splits_and_joins(client: Client) -> None:
    x = np.arange(21 * 4, dtype=np.float32).reshape(21, 4)  # max_batch_size 8 -> chunks 8, 8, 5
    client.metadata("add")  # fetch (and cache) the model's metadata first: only inference is counted below
    before = client.stats.attempts
    out = client.infer_batch("add", {"X": x})
    np.testing.assert_array_equal(out["Y"], x + 1)
    assert client.stats.attempts - before == 3
    out = client.infer_batch("add", {"X": x}, batch_size=5)  # 5 chunks
    np.testing.assert_array_equal(out["Y"], x + 1)
    small = client.infer_batch("add", {"X": x[:2]})
    np.testing.assert_array_equal(small["Y"], x[:2] + 1)


def test_infer_batch_bytes_list(client: Client) -> None:
    words = [f"w{i}" for i in range(10)]  # echo has max_batch_size 4
    out = client.infer_batch("echo", {"TEXT": words})["OUT"]
    assert out.reshape(-1).tolist() == [w.upper().encode() for w in words]


def test_health(client: Client) -> None:
    assert client.is_live()
    assert client.is_ready()
    assert client.is_ready("add")
    assert client.is_ready("add", version=1)
    assert not client.is_ready("no_such_model")
    client.wait_until_ready(timeout=5)
    client.wait_until_ready(timeout=5, model="echo")


def test_metadata_and_config(client: Client) -> None:
    meta = client.metadata("pair")
    assert meta.name == "pair"
    assert meta.versions == ("1",)
    assert meta.inputs == (TensorSpec("A", "FP32", (-1, 3)), TensorSpec("B", "FP32", (-1, 3)))
    assert [t.name for t in meta.outputs] == ["SUM", "DIFF"]
    cfg = client.config("pair")
    assert cfg.name == "pair"
    assert cfg.max_batch_size == 4
    assert [i.name for i in cfg.input] == ["A", "B"]
    assert client.config("fixed", version=1).max_batch_size == 0


def test_statistics_count_requests(client: Client) -> None:
    before = {s.version: s.success_count for s in client.statistics("fixed")}
    client.infer("fixed", {"A": np.zeros((2, 3), np.int64)})
    (stats,) = client.statistics("fixed")
    assert stats.name == "fixed" and stats.version == "1"
    assert stats.success_count == before.get("1", 0) + 1
    assert stats.inference_count >= stats.success_count
    everything = client.statistics()
    assert {s.name for s in everything} >= {"add", "pair", "fixed", "echo"}


def test_models_lists_repository(client: Client) -> None:
    models = client.models()
    assert ModelInfo("add", "1", "READY") in models
    assert {m.name for m in models} == {"add", "pair", "fixed", "echo", "slow", "queued"}
    assert all(m.state == "READY" for m in models)


def test_threads_share_one_client(client: Client) -> None:
    errors: list[BaseException] = []
    results: dict[int, bool] = {}

    def work(i: int) -> None:
        try:
            for j in range(25):
                x = np.full((1, 4), i * 100 + j, np.float32)
                y = client.infer("add", {"X": x})["Y"]
                assert y[0, 0] == i * 100 + j + 1
            results[i] = True
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert len(results) == 8


def test_closed_client_refuses_calls(url: str, protocol: str) -> None:
    c = Client(url, protocol)
    assert c.infer("add", {"X": np.zeros((1, 4), np.float32)})["Y"].shape == (1, 4)
    c.close()
    c.close()  # idempotent
    with pytest.raises(ClientError, match="closed"):
        c.infer("add", {"X": np.zeros((1, 4), np.float32)})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"protocol": "websocket"}, "unknown protocol 'websocket'; expected one of http, grpc"),
        ({"timeout": 0}, "`timeout` must be > 0"),
        ({"retries": -1}, "`retries` must be a RetryPolicy or an int >= 0"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ClientError, match=message):
        Client("127.0.0.1:1", **kwargs)  # type: ignore[arg-type]


def test_bad_url() -> None:
    with pytest.raises(ClientError, match="url must be host:port"):
        Client("http://127.0.0.1:8000/v2/models")


def _connections_to(port: int) -> int:
    """This process's established TCP connections to ``port`` on loopback."""
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def test_connection_reuse(server: EmbeddedServer, protocol: str, url: str) -> None:
    port = int(url.rsplit(":", 1)[1])
    before = _connections_to(port)
    with Client(url, protocol) as c:
        for i in range(20):
            c.infer("add", {"X": np.full((1, 4), i, np.float32)})
        assert _connections_to(port) - before == 1, "sequential calls reuse one connection"

        def work() -> None:
            for _ in range(10):
                c.infer("add", {"X": np.zeros((1, 4), np.float32)})

        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        # HTTP: one keep-alive connection per thread; gRPC: one HTTP/2 connection for every thread
        expected = 4 if protocol == "http" else 1
        assert _connections_to(port) - before == expected
    assert _connections_to(port) == before, "close() closes every connection"
