"""Security defaults of the embedded server: restricted APIs refuse without the admin key on HTTP and
gRPC (and answer with it), listeners on loopback only, the key in neither the command line nor the
log, and model names that try to leave the repository refused."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from tritonclient.grpc import service_pb2

from tritonkit.client.protocol import grpc_headers
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions

from .conftest import Record
from .support import GOOD_JSON, grpc_stub, http_request, raw_http, write_add_one

pytestmark = pytest.mark.faults

HTTP_APIS = {
    "model-repository": ("POST", "/v2/repository/index"),
    "shared-memory": ("GET", "/v2/systemsharedmemory/status"),
    "trace": ("GET", "/v2/trace/setting"),
    "logging": ("GET", "/v2/logging"),
}

GRPC_APIS: dict[str, Callable[[object], Callable[..., object]]] = {
    "model-repository": lambda s: lambda **kw: s.RepositoryIndex(service_pb2.RepositoryIndexRequest(), **kw),  # type: ignore[attr-defined]
    "shared-memory": lambda s: (
        lambda **kw: s.SystemSharedMemoryStatus(service_pb2.SystemSharedMemoryStatusRequest(), **kw)
    ),  # type: ignore[attr-defined]
    "trace": lambda s: lambda **kw: s.TraceSetting(service_pb2.TraceSettingRequest(), **kw),  # type: ignore[attr-defined]
    "logging": lambda s: lambda **kw: s.LogSettings(service_pb2.LogSettingsRequest(), **kw),  # type: ignore[attr-defined]
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    repo: Path = tmp_path_factory.mktemp("repo")
    write_add_one(repo)
    log = tmp_path_factory.mktemp("log") / "server.log"
    with EmbeddedServer(repo, ServerOptions(guard=True, exit_timeout=2, log_file=log)) as server:
        yield server


@pytest.mark.parametrize("api", list(HTTP_APIS))
def test_http_restricted_api(served: EmbeddedServer, record: Record, api: str) -> None:
    method, path = HTTP_APIS[api]
    without = raw_http(served.http_port, http_request(method, path))
    with_key = raw_http(served.http_port, http_request(method, path, headers=served.admin_headers))
    passed = 400 <= without[0] < 500 and with_key[0] == 200
    record(
        "security",
        f"HTTP {api} without / with key",
        passed,
        without=without[0],
        message=without[1][:80],
        with_key=with_key[0],
    )
    assert passed, f"{api}: without key {without}, with key {with_key}"


@pytest.mark.parametrize("api", list(GRPC_APIS))
def test_grpc_restricted_api(served: EmbeddedServer, record: Record, api: str) -> None:
    channel, stub = grpc_stub(served.grpc_url)
    call = GRPC_APIS[api](stub)
    try:
        try:
            call(timeout=5)
            without, message = "OK", ""
        except grpc.RpcError as exc:
            without = exc.code().name  # type: ignore[attr-defined]
            message = (exc.details() or "").strip()  # type: ignore[attr-defined]
        metadata = list(grpc_headers(served.admin_headers).items())
        try:
            call(timeout=5, metadata=metadata)
            with_key = "OK"
        except grpc.RpcError as exc:
            with_key = exc.code().name  # type: ignore[attr-defined]
    finally:
        channel.close()
    passed = without not in ("OK",) and with_key == "OK"
    record(
        "security",
        f"gRPC {api} without / with key",
        passed,
        without=without,
        message=message[:80],
        with_key=with_key,
    )
    assert passed, f"{api}: without key {without}, with key {with_key}"


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def test_listeners_are_loopback_only(served: EmbeddedServer, record: Record) -> None:
    assert served.pid is not None
    listening = [
        c for c in psutil.Process(served.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
    ]
    guard = [
        c
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == served.http_port
    ]
    addresses = sorted({f"{c.laddr.ip}:{c.laddr.port}" for c in listening + guard})
    passed = bool(addresses) and all(_loopback(c.laddr.ip) for c in listening + guard)
    record("security", "listeners on loopback only", passed, listeners=" ".join(addresses))
    assert passed, addresses


def test_admin_key_in_neither_command_line_nor_log(served: EmbeddedServer, record: Record) -> None:
    assert served.pid is not None
    raw_http(served.http_port, http_request("GET", "/v2/models/stats", headers=served.admin_headers))
    cmdline = Path(f"/proc/{served.pid}/cmdline").read_bytes().decode(errors="replace")
    assert served.log_file is not None
    log = served.log_file.read_text(errors="replace") if served.log_file.exists() else ""
    in_cmd, in_log = served.admin_key in cmdline, served.admin_key in log
    record(
        "security",
        "admin key not in /proc/<pid>/cmdline or the log",
        not (in_cmd or in_log),
        in_cmdline=in_cmd,
        in_log=in_log,
    )
    assert not in_cmd and not in_log


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/..%2F..%2Fetc%2Fpasswd/config",
        "/v2/models/../../etc/passwd/config",
        "/v2/models/%2E%2E/config",
        "/v2/models/add_one%2F..%2F..%2Fadd_one/infer",
    ],
)
def test_no_path_escape_through_model_names(served: EmbeddedServer, record: Record, path: str) -> None:
    method = "POST" if path.endswith("infer") else "GET"
    status, message = raw_http(
        served.http_port, http_request(method, path, GOOD_JSON if method == "POST" else b"")
    )
    load = raw_http(
        served.http_port,
        http_request("POST", "/v2/repository/models/..%2F..%2Ftmp/load", b"{}", headers=served.admin_headers),
    )
    passed = 400 <= status < 500 and "root:" not in message and load[0] != 200
    record(
        "security",
        f"path escape {path}",
        passed,
        status=status,
        message=message[:80],
        repository_load=load[0],
    )
    assert passed, (status, message, load)


def test_statistics_open_without_the_key(served: EmbeddedServer, record: Record) -> None:
    """NVIDIA's tools read statistics; ``/metrics`` publishes the same counts without a key."""
    status, message = raw_http(served.http_port, http_request("GET", "/v2/models/stats"))
    record("security", "HTTP statistics without key (open by default)", status == 200, status=status)
    assert status == 200, message
