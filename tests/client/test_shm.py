"""Shared-memory transport: round trips through real regions the real server reads and writes,
registration reused across calls, growth, and cleanup on close and on errors."""

from __future__ import annotations

import asyncio
import gc
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tritonkit.client import AsyncClient, Client, ClientError, InferenceTimeoutError
from tritonkit.client.protocol import grpc_headers
from tritonkit.serve.embedded import EmbeddedServer


def _server_regions(server: EmbeddedServer) -> set[str]:
    """Region names the server has registered, asked with raw tritonclient."""
    raw = httpclient.InferenceServerClient(server.http_url)
    try:
        return {r["name"] for r in raw.get_system_shared_memory_status(headers=server.admin_headers)}
    finally:
        raw.close()


def _dev_shm(names: list[str]) -> list[str]:
    return [n for n in names if Path("/dev/shm", n).exists()]


def test_system_shm_round_trip(server: EmbeddedServer, protocol: str, url: str) -> None:
    c = Client(url, protocol, shared_memory="system", headers=server.admin_headers)
    try:
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_array_equal(c.infer("add", {"X": x})["Y"], x + 1)
        names = c._shm.region_names  # type: ignore[union-attr]
        assert len(names) == 2  # in:X and out:Y
        assert set(names) <= _server_regions(server)
        assert _dev_shm(names) == names
        # reused: a second call of the same size registers nothing new
        y = c.infer("add", {"X": x * 2})["Y"]
        np.testing.assert_array_equal(y, x * 2 + 1)
        assert c._shm.region_names == names  # type: ignore[union-attr]
        # the result is a copy, not a view into the reused region
        first = c.infer("add", {"X": np.zeros((1, 4), np.float32)})["Y"]
        c.infer("add", {"X": np.full((1, 4), 5, np.float32)})
        np.testing.assert_array_equal(first, np.ones((1, 4), np.float32))
        # two inputs, two outputs, one selected
        a, b = np.full((2, 3), 3, np.float32), np.ones((2, 3), np.float32)
        out = c.infer("pair", {"A": a, "B": b})
        np.testing.assert_array_equal(out["SUM"], a + b)
        np.testing.assert_array_equal(out["DIFF"], a - b)
        assert list(c.infer("pair", {"A": a, "B": b}, outputs=["DIFF"])) == ["DIFF"]
        # BYTES inputs go through shared memory too; BYTES outputs (size unknown) over the wire
        text = c.infer("echo", {"TEXT": ["shm", "wörld"]})["OUT"]
        assert text.reshape(-1).tolist() == [b"SHM", "wörld".encode().upper()]
    finally:
        names = c._shm.region_names  # type: ignore[union-attr]
        c.close()
    assert not set(names) & _server_regions(server), "close() unregisters every region"
    assert _dev_shm(names) == [], "close() destroys every region"


def test_regions_grow(server: EmbeddedServer, protocol: str, url: str) -> None:
    with Client(url, protocol, shared_memory="system", headers=server.admin_headers) as c:
        small = np.ones((1, 4), np.float32)
        c.infer("add", {"X": small})
        before = c._shm.region_names  # type: ignore[union-attr]
        big = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
        np.testing.assert_array_equal(c.infer("add", {"X": big})["Y"], big + 1)
        # 8*4*4 = 128 bytes still fits the 4 KiB minimum: nothing re-registered
        assert c._shm.region_names == before  # type: ignore[union-attr]
        huge = np.ones((2, 2048), np.float32)  # 16 KiB > 4 KiB
        with pytest.raises(ClientError):
            c.infer("add", {"X": huge})  # wrong shape: refused before any region is touched
        assert c._shm.region_names == before  # type: ignore[union-attr]
        texts = ["x" * 3000, "y" * 3000]  # 6 KiB serialized: the TEXT region grows past 4 KiB
        assert c.infer("echo", {"TEXT": texts})["OUT"].reshape(-1).tolist() == [
            t.upper().encode() for t in texts
        ]
        after = c._shm.region_names  # type: ignore[union-attr]
        assert set(before) <= set(after) and len(after) == 3
        assert set(after) <= _server_regions(server)


def test_failed_call_releases_regions(server: EmbeddedServer, protocol: str, url: str) -> None:
    with Client(url, protocol, shared_memory="system", headers=server.admin_headers) as c:
        c.infer("slow", {"SECONDS": np.array([0.0], np.float32)})
        names = c._shm.region_names  # type: ignore[union-attr]
        assert len(names) == 2
        with pytest.raises(InferenceTimeoutError):
            c.infer("slow", {"SECONDS": np.array([1.0], np.float32)}, timeout=0.3)
        assert c._shm.region_names == []  # type: ignore[union-attr]
        assert _dev_shm(names) == []
        assert c.infer("slow", {"SECONDS": np.array([0.0], np.float32)})["SECONDS_OUT"].tolist() == [0.0]


def test_threads_use_separate_region_sets(server: EmbeddedServer, protocol: str, url: str) -> None:
    errors: list[BaseException] = []
    with Client(url, protocol, shared_memory="system", headers=server.admin_headers) as c:

        def work(i: int) -> None:
            try:
                for j in range(20):
                    x = np.full((2, 4), i * 1000 + j, np.float32)
                    np.testing.assert_array_equal(c.infer("add", {"X": x})["Y"], x + 1)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        # one region set (in:X, out:Y) per request in flight at once, reused afterwards
        assert 2 <= len(c._shm.region_names) <= 8  # type: ignore[union-attr]
        assert len(c._shm.region_names) % 2 == 0  # type: ignore[union-attr]
    assert not errors, errors[0]


def test_async_client_shm(server: EmbeddedServer, protocol: str, url: str) -> None:
    async def main() -> list[str]:
        c = AsyncClient(url, protocol, shared_memory="system", headers=server.admin_headers)
        try:
            xs = [np.full((2, 4), i, np.float32) for i in range(16)]
            outs = await asyncio.gather(*(c.infer("add", {"X": x}) for x in xs))
            for x, out in zip(xs, outs, strict=True):
                np.testing.assert_array_equal(out["Y"], x + 1)
            text = await c.infer("echo", {"TEXT": ["a", "b"]})
            assert text["OUT"].reshape(-1).tolist() == [b"A", b"B"]
            names: list[str] = c._shm.region_names
            assert names and set(names) <= _server_regions(server)
            with pytest.raises(InferenceTimeoutError):
                await c.infer("slow", {"SECONDS": np.array([1.0], np.float32)}, timeout=0.3)
            return c._shm.region_names  # type: ignore[no-any-return]
        finally:
            await c.close()

    names = asyncio.run(main())
    assert not set(names) & _server_regions(server)
    assert _dev_shm(names) == []


def test_unknown_kind() -> None:
    with pytest.raises(ClientError, match="unknown shared_memory 'gpu'; expected one of none, system, cuda"):
        Client("127.0.0.1:1", shared_memory="gpu")


@pytest.mark.gpu
def test_cuda_shm_round_trip(server: EmbeddedServer, protocol: str, url: str) -> None:
    with Client(url, protocol, shared_memory="cuda", headers=server.admin_headers) as c:
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_array_equal(c.infer("add", {"X": x})["Y"], x + 1)
        np.testing.assert_array_equal(c.infer("add", {"X": x * 3})["Y"], x * 3 + 1)
        raw = (httpclient if protocol == "http" else grpcclient).InferenceServerClient(url)
        status = raw.get_cuda_shared_memory_status(headers=grpc_headers(server.admin_headers))
        assert status  # the two regions are registered while the client is open


def test_forgotten_client_leaves_no_files(server: EmbeddedServer, url: str, protocol: str) -> None:
    c = Client(url, protocol, shared_memory="system", headers=server.admin_headers)
    c.infer("add", {"X": np.ones((1, 4), np.float32)})
    names = c._shm.region_names  # type: ignore[union-attr]
    assert _dev_shm(names) == names
    del c
    gc.collect()
    assert _dev_shm(names) == []


def _cuda_shm_importable() -> bool:
    try:
        import tritonclient.utils.cuda_shared_memory  # noqa: F401, PLC0415 (raises without cuda-python: probed)
    except Exception:
        return False
    return True


@pytest.mark.skipif(_cuda_shm_importable(), reason="cuda-python is installed here: the refusal cannot happen")
def test_cuda_kind_without_cuda_python_is_refused() -> None:
    with pytest.raises(ClientError, match="shared_memory='cuda' needs CUDA and cuda-python here"):
        Client("127.0.0.1:1", shared_memory="cuda")
