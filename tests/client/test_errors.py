"""Error mapping: the real server's answers and real socket failures become the client hierarchy,
keeping Triton's own text, on both protocols."""

from __future__ import annotations

import asyncio
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritonkit.client import (
    AsyncClient,
    Client,
    ClientError,
    InferenceTimeoutError,
    InternalServerError,
    InvalidArgumentError,
    ModelNotFoundError,
    QueueFullError,
    RestrictedApiError,
    ServerUnavailableError,
    UnexpectedAnswerError,
)
from tritonkit.client.codec import AnswerError, MissingOutputError
from tritonkit.client.errors import map_error
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions, free_port
from tritonkit.serve.options import DEFAULT_RESTRICTED_APIS

X = {"X": np.ones((1, 4), np.float32)}


def test_unknown_model(client: Client) -> None:
    with pytest.raises(ModelNotFoundError, match="Request for unknown model: 'nope' is not found") as info:
        client.infer("nope", X)
    assert "metadata of `nope`" in str(info.value)


def test_unknown_version(client: Client) -> None:
    with pytest.raises(ModelNotFoundError, match="Request for unknown model: 'add' version 7 is not found"):
        client.infer("add", X, version=7)
    with pytest.raises(ModelNotFoundError):
        client.metadata("add", version=7)


def test_bad_version_argument(client: Client) -> None:
    with pytest.raises(ClientError, match="`version` must be a positive integer, given 'latest'"):
        client.infer("add", X, version="latest")


def _raw_exception(server: EmbeddedServer, protocol: str) -> InferenceServerException:
    """What raw tritonclient raises for a request the server refuses (wrong shape)."""
    mod = httpclient if protocol == "http" else grpcclient
    raw = mod.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    item = mod.InferInput("X", [1, 5], "FP32")
    item.set_data_from_numpy(np.ones((1, 5), np.float32))
    try:
        raw.infer("add", [item])
    except InferenceServerException as exc:
        return exc
    finally:
        raw.close()
    raise AssertionError("the server accepted a wrongly shaped input")


def test_server_invalid_argument_keeps_triton_text(server: EmbeddedServer, protocol: str) -> None:
    err = map_error(_raw_exception(server, protocol), "infer `add`")
    assert type(err) is InvalidArgumentError
    assert "unexpected shape for input 'X' for model 'add'. Expected [-1,4], got [1,5]" in str(err)
    assert not err.retryable


def test_restricted_api_needs_key(server: EmbeddedServer, protocol: str, url: str) -> None:
    with Client(url, protocol) as c:
        with pytest.raises(RestrictedApiError, match="restricted") as info:
            c.models()
        assert c.stats.attempts == 1, "a missing key is not retried"
    assert "tritonkit-admin-key" in str(info.value)


def test_timeout_is_not_retried(client: Client) -> None:
    seconds = {"SECONDS": np.array([1.5], np.float32)}
    client.metadata("slow")
    before = client.stats.attempts
    with pytest.raises(InferenceTimeoutError):
        client.infer("slow", seconds, timeout=0.3)
    assert client.stats.attempts == before + 1
    # the connection a timed-out call left behind must not poison the next call
    out = client.infer("slow", {"SECONDS": np.array([0.0], np.float32)}, timeout=10)
    assert out["SECONDS_OUT"].tolist() == [0.0]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unreachable_server(protocol: str) -> None:
    port = free_port()
    with Client(f"127.0.0.1:{port}", protocol, timeout=1.0, retries=2) as c:
        with pytest.raises(ServerUnavailableError) as info:
            c.infer("add", X)
        assert c.stats.attempts == 3
        assert not c.is_live()
        assert not c.is_ready()
        with pytest.raises(ServerUnavailableError, match=r"server at .* not ready after 0.3 s"):
            c.wait_until_ready(timeout=0.3)
    message = str(info.value)
    assert "\n" not in message and "gave up after 3 attempts" in message


@pytest.mark.parametrize(
    ("status", "text", "kind", "retryable"),
    [
        ("StatusCode.UNAVAILABLE", "Exceeds maximum queue size", QueueFullError, False),
        ("503", "Exceeds maximum queue size", QueueFullError, False),
        ("StatusCode.UNAVAILABLE", "Server not ready", ServerUnavailableError, True),
        ("503", "Server not ready", ServerUnavailableError, True),
        ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", InferenceTimeoutError, False),
        ("StatusCode.INTERNAL", "boom", InternalServerError, False),
        ("500", "boom", InternalServerError, False),
        ("StatusCode.NOT_FOUND", "x", ModelNotFoundError, False),
        (
            "StatusCode.NOT_FOUND",
            "Request for unknown model: 'a' has no available versions",
            ServerUnavailableError,
            True,
        ),
        (
            "StatusCode.UNAVAILABLE",
            "This protocol is restricted, expecting header 'k'",
            RestrictedApiError,
            False,
        ),
        ("403", "This API is restricted, expecting header 'k'", RestrictedApiError, False),
    ],
)
def test_status_table(status: str, text: str, kind: type[ClientError], retryable: bool) -> None:
    err = map_error(InferenceServerException(msg=text, status=status), "infer `m`")
    assert type(err) is kind
    assert str(err) == f"infer `m`: {text}"
    assert err is not None and err.retryable is retryable


def test_socket_failures() -> None:
    refused = map_error(ConnectionRefusedError(111, "Connection refused"), "w")
    assert isinstance(refused, ServerUnavailableError) and refused.retryable
    dns = map_error(socket.gaierror(-2, "Name or service not known"), "w")
    assert isinstance(dns, ServerUnavailableError) and not dns.retryable
    assert map_error(KeyError("x"), "w") is None


def test_an_unreadable_answer_is_a_server_error() -> None:
    """Never the caller's fault (InvalidArgumentError would also drop the cached model spec)."""
    err = map_error(MissingOutputError("B", ("A", "B")), "infer `m`")
    assert type(err) is UnexpectedAnswerError and isinstance(err, InternalServerError) and not err.retryable
    assert str(err) == "infer `m`: the answer lacks output `B`; expected `A`, `B`"
    err = map_error(AnswerError("unknown datatype 'FP8' in the server's answer"), "infer `m`")
    assert type(err) is UnexpectedAnswerError and not err.retryable


def test_headers_reach_the_server_on_infer(repo: Path, tmp_path: Path) -> None:
    """With inference restricted, infer needs the key: the codec path sends the caller's headers."""
    shutil.copytree(repo / "add", tmp_path / "repo" / "add")
    x = {"X": np.ones((1, 4), np.float32)}
    with EmbeddedServer(
        tmp_path / "repo",
        ServerOptions(restricted_apis=(*DEFAULT_RESTRICTED_APIS, "inference"), exit_timeout=1),
    ) as server:
        for protocol in ("http", "grpc"):
            url = server.http_url if protocol == "http" else server.grpc_url
            with Client(url, protocol) as c, pytest.raises(RestrictedApiError, match="restricted"):
                c.infer("add", x)
            with Client(url, protocol, headers=server.admin_headers) as c:
                np.testing.assert_array_equal(c.infer("add", x)["Y"], x["X"] + 1)

            async def both(url: str = url, protocol: str = protocol) -> None:
                async with AsyncClient(url, protocol) as c:
                    with pytest.raises(RestrictedApiError, match="restricted"):
                        await c.infer("add", x)
                async with AsyncClient(url, protocol, headers=server.admin_headers) as c:
                    np.testing.assert_array_equal((await c.infer("add", x))["Y"], x["X"] + 1)

            asyncio.run(both())


def test_an_answer_that_disagrees_with_the_cache_drops_it(client: Client) -> None:
    """As if `add` had been reloaded without an output the client cached: the call fails as the
    server's (UnexpectedAnswerError), the cached spec is dropped, and the next call re-reads it."""
    x = {"X": np.ones((1, 4), np.float32)}
    client.infer("add", x)
    stale = client._core.specs[("add", "")]
    stale.output_names = ("Y", "GONE")
    with pytest.raises(UnexpectedAnswerError, match="the answer lacks output `GONE`; expected `Y`, `GONE`"):
        client.infer("add", x)
    assert ("add", "") not in client._core.specs
    np.testing.assert_array_equal(client.infer("add", x)["Y"], x["X"] + 1)
    assert client._core.specs[("add", "")].output_names == ("Y",)
