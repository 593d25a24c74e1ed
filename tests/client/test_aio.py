"""AsyncClient: the same methods and keyword arguments as Client, on both protocols, against the real server."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import numpy as np
import pytest

from tritonkit.client import (
    AsyncClient,
    Client,
    ClientError,
    InferenceTimeoutError,
    InvalidInputError,
    ModelNotFoundError,
    ServerUnavailableError,
)
from tritonkit.serve.embedded import EmbeddedServer, free_port

PUBLIC = [
    "infer",
    "infer_batch",
    "wait_until_ready",
    "is_live",
    "is_ready",
    "models",
    "metadata",
    "config",
    "statistics",
    "close",
]


def test_twins_have_the_same_signatures() -> None:
    assert inspect.signature(Client.__init__) == inspect.signature(AsyncClient.__init__)
    for name in PUBLIC:
        sync, aio = getattr(Client, name), getattr(AsyncClient, name)
        assert inspect.signature(sync).parameters == inspect.signature(aio).parameters, name
        assert inspect.iscoroutinefunction(aio), name


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_every_method(server: EmbeddedServer, protocol: str, url: str) -> None:
    async def main() -> None:
        async with AsyncClient(url, protocol, timeout=30, headers=server.admin_headers) as c:
            await c.wait_until_ready(timeout=5, model="add")
            assert await c.is_live() and await c.is_ready() and await c.is_ready("add", version=1)
            assert not await c.is_ready("nope")
            x = np.arange(8, dtype=np.float32).reshape(2, 4)
            np.testing.assert_array_equal((await c.infer("add", {"X": x}))["Y"], x + 1)
            a = np.ones((1, 3), np.float32)
            only = await c.infer("pair", {"A": a, "B": a}, outputs=["SUM"], version=1, timeout=10)
            assert list(only) == ["SUM"]
            text = (await c.infer("echo", {"TEXT": ["ab", b"cd"]}))["OUT"]
            assert text.reshape(-1).tolist() == [b"AB", b"CD"]
            big = np.arange(19 * 4, dtype=np.float32).reshape(19, 4)
            np.testing.assert_array_equal((await c.infer_batch("add", {"X": big}))["Y"], big + 1)
            assert (await c.metadata("pair")).inputs[0].shape == (-1, 3)
            assert (await c.config("pair")).max_batch_size == 4
            assert {m.name for m in await c.models()} == {"add", "pair", "fixed", "echo", "slow", "queued"}
            (stats,) = await c.statistics("add")
            assert stats.success_count >= 1
            with pytest.raises(ModelNotFoundError, match="'nope' is not found"):
                await c.infer("nope", {"X": x})
            with pytest.raises(InvalidInputError, match=r"expects shape \[-1, 4\], given \[2, 3\]"):
                await c.infer("add", {"X": np.ones((2, 3), np.float32)})
            with pytest.raises(InferenceTimeoutError):
                await c.infer("slow", {"SECONDS": np.array([1.5], np.float32)}, timeout=0.3)
        with pytest.raises(ClientError, match="closed"):
            await c.infer("add", {"X": x})

    _run(main())


def test_many_tasks_share_one_client(protocol: str, url: str) -> None:
    async def main() -> list[float]:
        async with AsyncClient(url, protocol) as c:

            async def one(i: int) -> float:
                out = await c.infer("add", {"X": np.full((1, 4), i, np.float32)})
                return float(out["Y"][0, 0])

            return list(await asyncio.gather(*(one(i) for i in range(64))))

    assert _run(main()) == [i + 1.0 for i in range(64)]


def test_unreachable_server_async(protocol: str) -> None:
    async def main() -> None:
        async with AsyncClient(f"127.0.0.1:{free_port()}", protocol, timeout=1.0, retries=2) as c:
            with pytest.raises(ServerUnavailableError, match="gave up after 3 attempts"):
                await c.infer("add", {"X": np.ones((1, 4), np.float32)})
            assert c.stats.attempts == 3
            assert not await c.is_live()

    _run(main())
