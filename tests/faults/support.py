"""Models, raw HTTP and gRPC helpers and process checks the fault cases share."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import textwrap
import time
from pathlib import Path

import grpc
import psutil
from tests.support.python_models import SLOW_ADD_ONE, write_python_model
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tritonkit.config import save
from tritonkit.config.model_config import (
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    TensorConfig,
)

#: Decodes TEXT the way the text runner does: strict UTF-8, a bad element answered INVALID_ARGUMENT.
TEXT_LEN = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            try:
                values = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
                n = [len(v.decode("utf-8")) for v in values]
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("N", np.array(n, np.float32).reshape(-1, 1))]))
            except UnicodeDecodeError as exc:
                error = pb_utils.TritonError(f"TEXT is not UTF-8: {exc.reason}", pb_utils.TritonError.INVALID_ARG)
                out.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
            except Exception as exc:
                message = " ".join(str(exc).split()) or type(exc).__name__
                out.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message)))
        return out
"""


def write_add_one(
    repo: Path, name: str = "add_one", *, seconds: float = 0.0, queue: QueuePolicy | None = None
) -> Path:
    """X[FP32, 4] -> Y = X + 1 (python backend, max batch 8), sleeping ``seconds`` per batch."""
    return write_python_model(repo, name, SLOW_ADD_ONE.replace("SECONDS", repr(seconds)), queue=queue)


def write_text_len(repo: Path, name: str = "text_len") -> Path:
    """TEXT[BYTES, 1] -> N[FP32, 1]: the character count of each UTF-8 string."""
    config = ModelConfig(
        name=name,
        backend="python",
        max_batch_size=8,
        inputs=[TensorConfig("TEXT", "BYTES", [1])],
        outputs=[TensorConfig("N", "FP32", [1])],
        instance_groups=[InstanceGroup(kind="KIND_CPU", count=1)],
    )
    version = repo / name / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(textwrap.dedent(TEXT_LEN))
    save(config, repo / name / "config.pbtxt")
    return repo / name


GOOD_JSON = json.dumps(
    {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
).encode()


def raw_http(port: int, request: bytes, *, timeout: float = 10.0, half_close: bool = True) -> tuple[int, str]:
    """Send bytes as they are; the status (0 when no answer came) and the body's first line. Without
    ``half_close`` the connection stays open for writing, as a client waiting for its answer keeps it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(request)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may refuse before the whole request is sent; read what it said
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
    if not data.startswith(b"HTTP/1."):
        return 0, data[:80].decode("latin-1")
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    text = body.decode("utf-8", "replace")
    with contextlib.suppress(ValueError, AttributeError):
        text = str(json.loads(text).get("error", text))
    return status, (text.strip().splitlines() or [""])[0][:200]


def http_request(
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    length: int | None = None,
) -> bytes:
    fields = {
        "Host": "127.0.0.1",
        "Connection": "close",
        "Content-Length": str(len(body) if length is None else length),
    }
    fields.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return head.encode() + body


def http_ready(port: int) -> bool:
    try:
        return raw_http(port, http_request("GET", "/v2/health/ready"), timeout=5)[0] == 200
    except OSError:
        return False


def http_good(port: int) -> bool:
    try:
        return (
            raw_http(port, http_request("POST", "/v2/models/add_one/infer", GOOD_JSON), timeout=10)[0] == 200
        )
    except OSError:
        return False


def grpc_stub(url: str) -> tuple[grpc.Channel, service_pb2_grpc.GRPCInferenceServiceStub]:
    channel = grpc.insecure_channel(url)
    return channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)


def grpc_good_request() -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_one")
    tensor = request.inputs.add(name="X", datatype="FP32", shape=[1, 4])
    del tensor
    request.raw_input_contents.append(b"\x00\x00\x80\x3f" * 4)
    return request


def grpc_ready_and_good(url: str) -> tuple[bool, bool]:
    channel, stub = grpc_stub(url)
    try:
        try:
            ready = stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=5).ready
        except grpc.RpcError:
            ready = False
        try:
            stub.ModelInfer(grpc_good_request(), timeout=10)
            good = True
        except grpc.RpcError:
            good = False
        return bool(ready), good
    finally:
        channel.close()


def own_orphans(repo: Path) -> list[str]:
    """tritonserver or python-stub processes still alive that serve ``repo`` (their command line
    names its path), so another test's servers on this machine are never counted."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if str(repo) in cmd and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid} {cmd[:80]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _mapped_shm() -> set[str]:
    names = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        names.update(
            line.rsplit("/dev/shm/", 1)[1].split(" ")[0] for line in text.splitlines() if "/dev/shm/" in line
        )
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    names.add(target[len("/dev/shm/") :].split(" ")[0])
        except OSError:
            continue
    return names


def leaked_shm(before: set[str]) -> list[str]:
    """``/dev/shm`` regions of this user created since ``before`` that no live process maps or holds."""
    new = shm_regions() - before
    return sorted(new - _mapped_shm()) if new else []


def triton_pids() -> set[int]:
    pids = set()
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except psutil.NoSuchProcess:
            continue
        if "tritonserver" in cmd or "triton_python_backend_stub" in cmd:
            pids.add(proc.pid)
    return pids


def shm_regions() -> set[str]:
    """``/dev/shm`` entries owned by this user."""
    root = Path("/dev/shm")
    out = set()
    for entry in root.iterdir():
        try:
            if entry.stat().st_uid == os.getuid():
                out.add(entry.name)
        except OSError:
            continue
    return out


def wait_until(predicate: object, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(step)
    return False
