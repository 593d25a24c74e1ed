"""A lone request's trip outside Triton's own time, by request size: the floor any model pays.

Builds (once, under --work) three native-backend versions that do almost nothing (the first 1,000 input
values doubled), taking a 2 KB row (FP32 [512]), 301 KB (FP32 [3, 112, 224], the bytes of an FP16 image;
an FP16 version needs the GPU) and an FP32 image [3, 224, 224] (602 KB), serves them with the embedded
tritonserver on the CPU, and measures one request in flight through five clients: tritonclient's HTTP
and gRPC clients (the tensor built once); HTTP through the standard library's ``http.client`` with the
body tritonclient generates (``generate_request_body`` once, ``parse_response_body`` per reply);
tritonclient's HTTP client with the input and output in system shared memory (the bytes off the
socket); and a socket writing the whole request built once and reading the answer by its length (the
GPU bench's HTTP client, which decodes nothing: the least a client can do). For each it takes Triton's
own per-request split from the statistics extension over the same timed requests (success time, queue,
compute input / infer / output) and reports the trip: the client's mean time minus Triton's mean request
time (p50 shown beside). The trip is the part of a lone request no model config, runner or backend
changes.

    .venv/bin/python scripts/tune/trip.py [--seconds 2] [--rounds 3] [--out docs/benchmarks-trip.md]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tools")]

import numpy as np  # noqa: E402

from tritonkit.machine import description  # noqa: E402
from tritonkit.serve.embedded import EmbeddedServer  # noqa: E402

#: model name -> (row shape, numpy dtype, Triton dtype)
SIZES: dict[str, tuple[tuple[int, ...], Any, str]] = {
    "row2k": ((512,), np.float32, "FP32"),
    "img16": ((3, 112, 224), np.float32, "FP32"),  # the bytes of an FP16 image [3, 224, 224]
    "img32": ((3, 224, 224), np.float32, "FP32"),
}
CLIENTS = (
    "tritonclient HTTP",
    "http.client, tritonclient's body",
    "tritonclient gRPC",
    "tritonclient HTTP, system shared memory",
    "socket, the request's bytes built once",
)
SPLIT = ("queue", "compute_input", "compute_infer", "compute_output")


def build(repo: Path) -> None:
    import torch  # noqa: PLC0415 (heavy)

    from tritonkit.convert.spec.execution import ServingSpec, plan_execution  # noqa: PLC0415
    from tritonkit.convert.targets.torch_program import write_torch_version  # noqa: PLC0415

    class Head(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1)[:, :1000] * 2

    plan = plan_execution(ServingSpec(engine="torch", runner="native"), max_batch_size=8, gpus=[])
    for name, (shape, _, _) in SIZES.items():
        example = torch.ones((2, *shape), dtype=torch.float32)
        write_torch_version(repo, name, Head().eval(), {"x": example}, ["y"], plan, max_batch_size=8)


def statistics_of(url: str, model: str, headers: dict[str, str]) -> dict[str, int]:
    import tritonclient.http as httpclient  # noqa: PLC0415

    client = httpclient.InferenceServerClient(url)
    try:
        stats = client.get_inference_statistics(model, headers=headers)["model_stats"][0]["inference_stats"]
    finally:
        client.close()
    out = {"count": int(stats["success"]["count"]), "success": int(stats["success"]["ns"])}
    out.update({k: int(stats[k]["ns"]) for k in SPLIT})
    return out


def _shared_memory(
    url: str, model: str, x: np.ndarray, triton_dtype: str, headers: dict[str, str]
) -> tuple[Any, Any]:
    """The input written into a system shared-memory region per request, the output read from another:
    what a client on the server's host can do instead of moving the bytes through the socket."""
    import tritonclient.http as httpclient  # noqa: PLC0415
    import tritonclient.utils.shared_memory as shm  # noqa: PLC0415

    web = httpclient.InferenceServerClient(url)
    out_bytes = 4 * min(1000, x[0].size)
    key = f"/tritonkit-trip-{model}"
    regions = {"in": shm.create_shared_memory_region(f"trip_in_{model}", key + "-in", x.nbytes),
               "out": shm.create_shared_memory_region(f"trip_out_{model}", key + "-out", out_bytes)}  # fmt: skip
    web.register_system_shared_memory(f"trip_in_{model}", key + "-in", x.nbytes, headers=headers)
    web.register_system_shared_memory(f"trip_out_{model}", key + "-out", out_bytes, headers=headers)
    tensor = httpclient.InferInput("x", list(x.shape), triton_dtype)
    tensor.set_shared_memory(f"trip_in_{model}", x.nbytes)
    wanted = httpclient.InferRequestedOutput("y")
    wanted.set_shared_memory(f"trip_out_{model}", out_bytes)

    def call() -> None:
        shm.set_shared_memory_region(regions["in"], [x])
        web.infer(model, [tensor], outputs=[wanted])
        shm.get_contents_as_numpy(regions["out"], np.float32, [1, out_bytes // 4]).copy()

    def close() -> None:
        try:
            for name in (f"trip_in_{model}", f"trip_out_{model}"):
                web.unregister_system_shared_memory(name, headers=headers)
        finally:
            for region in regions.values():
                shm.destroy_shared_memory_region(region)
            web.close()

    return call, close


def _socket(url: str, model: str, x: np.ndarray, triton_dtype: str) -> tuple[Any, Any]:
    """The whole HTTP/1.1 request built once and written on one keep-alive socket; the answer read by
    its Content-Length (the GPU bench's HTTP client): the least a client can do per request."""
    import socket  # noqa: PLC0415

    import tritonclient.http as httpclient  # noqa: PLC0415

    tensor = httpclient.InferInput("x", list(x.shape), triton_dtype)
    tensor.set_data_from_numpy(x, binary_data=True)
    wanted = [httpclient.InferRequestedOutput("y", binary_data=True)]
    body, json_size = httpclient.InferenceServerClient.generate_request_body([tensor], outputs=wanted)
    host, port = url.rsplit(":", 1)
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {url}\r\nContent-Length: {len(body)}\r\n"
        f"Inference-Header-Content-Length: {json_size}\r\n\r\n"
    )
    request = head.encode() + body
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def read() -> bytes:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def call() -> None:
        sock.sendall(request)
        raw = b""
        while b"\r\n\r\n" not in raw:
            raw += read()
        top, rest = raw.split(b"\r\n\r\n", 1)
        if not top.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(top.decode(errors="replace"))
        lines = top.split(b"\r\n")
        length = next(
            int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length")
        )
        while len(rest) < length:
            rest += read()

    return call, sock.close


def client_for(client: str, urls: dict[str, str], model: str, headers: dict[str, str]) -> tuple[Any, Any]:
    """``client``'s (one request, close) for ``model``."""
    import tritonclient.grpc as grpcclient  # noqa: PLC0415
    import tritonclient.http as httpclient  # noqa: PLC0415

    shape, dtype, triton_dtype = SIZES[model]
    x = np.random.default_rng(0).standard_normal((1, *shape)).astype(dtype)
    call: Any
    if client == CLIENTS[2]:
        grpc = grpcclient.InferenceServerClient(urls["grpc"])
        g_in = grpcclient.InferInput("x", list(x.shape), triton_dtype)
        g_in.set_data_from_numpy(x)

        def call() -> None:
            grpc.infer(model, [g_in]).as_numpy("y")

        close = grpc.close
    elif client == CLIENTS[0]:
        web = httpclient.InferenceServerClient(urls["http"])
        h_in = httpclient.InferInput("x", list(x.shape), triton_dtype)
        h_in.set_data_from_numpy(x, binary_data=True)
        h_out = [httpclient.InferRequestedOutput("y", binary_data=True)]

        def call() -> None:
            web.infer(model, [h_in], outputs=h_out).as_numpy("y")

        close = web.close
    elif client == CLIENTS[3]:
        call, close = _shared_memory(urls["http"], model, x, triton_dtype, headers)
    elif client == CLIENTS[4]:
        call, close = _socket(urls["http"], model, x, triton_dtype)
    else:
        h_in = httpclient.InferInput("x", list(x.shape), triton_dtype)
        h_in.set_data_from_numpy(x, binary_data=True)
        h_out = [httpclient.InferRequestedOutput("y", binary_data=True)]
        body, json_size = httpclient.InferenceServerClient.generate_request_body([h_in], outputs=h_out)
        parsed = urlparse(f"http://{urls['http']}")
        conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port)
        request_headers = {
            "Inference-Header-Content-Length": str(json_size),
            "Content-Type": "application/octet-stream",
        }

        def call() -> None:
            conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=request_headers)
            reply = conn.getresponse()
            data = reply.read()
            length = reply.getheader("Inference-Header-Content-Length")
            result = httpclient.InferenceServerClient.parse_response_body(
                data, header_length=int(length) if length else None
            )
            result.as_numpy("y")

        close = conn.close
    return call, close


def lone(call: Any, seconds: float) -> list[float]:
    latencies, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - t)
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--work", default="/tmp/tritonkit-trip")
    parser.add_argument("--out", default="docs/benchmarks-trip.md")
    args = parser.parse_args()
    repo = Path(args.work) / "repo"
    if not all((repo / name / "config.pbtxt").exists() for name in SIZES):
        build(repo)
    p50s: dict[tuple[str, str], list[float]] = {}
    split: dict[tuple[str, str], dict[str, float]] = {}
    with EmbeddedServer(repo) as server:
        urls = {"http": server.http_url, "grpc": server.grpc_url}
        for _ in range(args.rounds):
            for model in SIZES:
                for client in CLIENTS:
                    call, close = client_for(client, urls, model, server.admin_headers)
                    try:
                        call()  # its connection made, untimed and outside the statistics below
                        before = statistics_of(server.http_url, model, server.admin_headers)
                        latencies = lone(call, args.seconds)
                        after = statistics_of(server.http_url, model, server.admin_headers)
                    finally:
                        close()
                    count = after["count"] - before["count"]
                    p50s.setdefault((model, client), []).append(statistics.median(latencies) * 1e3)
                    means = {k: (after[k] - before[k]) / count / 1e6 for k in ("success", *SPLIT)}
                    means["client"] = statistics.fmean(latencies) * 1e3
                    for k, v in means.items():
                        split.setdefault((model, client), {}).setdefault(k, 0.0)
                        split[(model, client)][k] += v / args.rounds
    lines = [
        "# A lone request's trip outside Triton's own time, by request size",
        "",
        f"Machine: {description()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"`scripts/tune/trip.py --rounds {args.rounds} --seconds {args.seconds:g}`: native-backend versions",
        "that double the first 1,000 input values on the CPU, the embedded tritonserver, one request in",
        f"flight for {args.seconds:g} s per figure, clients and sizes interleaved round after round. Triton's",
        "split is the mean per request from its statistics over the same timed requests; the trip is the",
        "client's mean time minus Triton's mean request time (means over the rounds): the front end's and",
        "the client's share. p50: the median of the rounds' medians.",
        "",
        "| request | client | p50 ms | mean ms | Triton request ms | queue / input / infer / output µs | trip ms |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for (model, client), values in p50s.items():
        s = split[(model, client)]
        p50 = statistics.median(values)
        shape, dtype, triton_dtype = SIZES[model]
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize / 1e3
        parts = " / ".join(f"{s[k] * 1e3:.0f}" for k in SPLIT)
        lines.append(
            f"| {triton_dtype} {list(shape)} ({size:.0f} KB) | {client} | {p50:.3f} | {s['client']:.3f} | "
            f"{s['success']:.3f} | {parts} | {s['client'] - s['success']:.3f} |"
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
