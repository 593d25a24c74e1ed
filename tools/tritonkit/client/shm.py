"""Shared-memory transport for :class:`~tritonkit.client.Client` and :class:`~tritonkit.client.AsyncClient`
(opt-in per client).

``shared_memory="system"`` moves tensors through POSIX shared memory (``/dev/shm``), for a server
on the same host; ``"cuda"`` through CUDA IPC memory on GPU 0, for a server on the same GPU host.
Both come from ``tritonclient.utils`` (``shared_memory`` / ``cuda_shared_memory``).

Regions: a request in flight owns a *region set* (one region per tensor name), taken from the
client's pool and put back when the request is done, so concurrent threads or tasks never share a
region while sequential requests reuse registered regions. A tensor larger than its region grows
it: unregister + destroy, then create + register at the next power of two. Outputs whose size is
known before the call (every dim fixed but the batch, not BYTES) come back through shared memory;
others (BYTES, variable dims) come over the wire as usual.

Cleanup: :meth:`ShmPool.close` / :meth:`ShmPool.aclose` (called by the clients' ``close``)
unregister and destroy every region. When a request fails, its region set is destroyed at once
instead of going back to the pool, since the server may still write into it (a timed-out request
keeps running server-side).

The pool does only local work; the registrations it asks for are done by the caller, blocking
(:meth:`ShmPool.infer`) or awaited (:meth:`ShmPool.ainfer`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import secrets
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.utils import serialize_byte_tensor, serialized_byte_size

from tritonkit.client.errors import InvalidArgumentError, ModelNotFoundError
from tritonkit.client.spec import ModelSpec, PreparedInput
from tritonkit.errors import ClientError

if TYPE_CHECKING:
    from tritonkit.client.core import ClientCore

__all__ = ["KINDS", "ShmPool"]

KINDS = ("system", "cuda")
_MIN_REGION = 4096
_names = itertools.count()


def _round_up(size: int) -> int:
    return max(_MIN_REGION, 1 << (max(size, 1) - 1).bit_length())


class _Region:
    """One region: ``name`` on the server, a local handle here; registered by the caller."""

    def __init__(self, kind: str, name: str, size: int) -> None:
        self.kind, self.name, self.size = kind, name, size
        self.registered = False
        if kind == "system":
            import tritonclient.utils.shared_memory as shm

            self._lib: Any = shm
            self.key = f"/{name}"
            self.handle = shm.create_shared_memory_region(name, self.key, size, create_only=True)
        else:
            import tritonclient.utils.cuda_shared_memory as cudashm

            self._lib = cudashm
            self.key = ""
            self.handle = cudashm.create_shared_memory_region(name, size, 0)

    def register(self, transport: Any) -> Any:
        """Call (or, for an async transport, return the awaitable of) the registration."""
        if self.kind == "system":
            return transport.register_system_shm(self.name, self.key, self.size)
        return transport.register_cuda_shm(self.name, self._lib.get_raw_handle(self.handle), 0, self.size)

    def unregister(self, transport: Any) -> Any:
        if self.kind == "system":
            return transport.unregister_system_shm(self.name)
        return transport.unregister_cuda_shm(self.name)

    def write(self, value: NDArray[Any]) -> None:
        self._lib.set_shared_memory_region(self.handle, [value])

    def read(self, dtype: np.dtype[Any], shape: list[int]) -> NDArray[Any]:
        # A copy: the region goes back to the pool and serves the next request.
        return np.array(self._lib.get_contents_as_numpy(self.handle, dtype, shape), copy=True)

    def destroy(self) -> None:
        self._lib.destroy_shared_memory_region(self.handle)


class _Request:
    """One request's plan: regions to drop and to register first, then the tritonclient objects."""

    def __init__(self) -> None:
        self.drop: list[_Region] = []
        self.new: list[_Region] = []
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self.in_shm: dict[str, tuple[_Region, np.dtype[Any]]] = {}


class ShmPool:
    """Region sets of one client; see the module docstring."""

    def __init__(self, kind: str, transport: Any) -> None:
        if kind not in KINDS:
            raise ClientError(f"unknown shared_memory {kind!r}; expected one of none, {', '.join(KINDS)}")
        if kind == "cuda":
            try:
                import tritonclient.utils.cuda_shared_memory  # noqa: F401
            except Exception as exc:
                raise ClientError(
                    f"shared_memory='cuda' needs CUDA and cuda-python here ({type(exc).__name__}: {exc})"
                ) from None
        self.kind = kind
        self._transport = transport
        self._lock = threading.Lock()
        self._free: list[dict[str, _Region]] = []
        self._sets: list[dict[str, _Region]] = []
        # pid + a random token: a pid reused after a crashed process must not hit its leftover files.
        self._prefix = f"tritonkit-{os.getpid()}-{secrets.token_hex(4)}-{next(_names)}"
        # A client dropped without close() must not leave files in /dev/shm behind: destroy the
        # local side when the pool is collected or the interpreter exits (no network from there).
        weakref.finalize(self, _destroy_local, self._sets)

    @property
    def region_names(self) -> list[str]:
        with self._lock:
            return sorted(r.name for s in self._sets for r in s.values())

    # -- region sets -------------------------------------------------------------------------------
    def _take(self) -> dict[str, _Region]:
        with self._lock:
            if self._free:
                return self._free.pop()
            regions: dict[str, _Region] = {}
            self._sets.append(regions)
            return regions

    def _give_back(self, regions: dict[str, _Region]) -> None:
        with self._lock:
            self._free.append(regions)

    def _forget(self, regions: dict[str, _Region]) -> list[_Region]:
        with self._lock:
            self._sets[:] = [s for s in self._sets if s is not regions]
            self._free[:] = [s for s in self._free if s is not regions]
        out = list(regions.values())
        regions.clear()
        return out

    def _region(self, regions: dict[str, _Region], role: str, size: int, req: _Request) -> _Region:
        region = regions.get(role)
        if region is not None and region.size >= size:
            return region
        if region is not None:
            req.drop.append(regions.pop(role))
        region = _Region(self.kind, f"{self._prefix}-{next(_names)}", _round_up(size))
        regions[role] = region
        req.new.append(region)
        return region

    def _plan(
        self,
        regions: dict[str, _Region],
        spec: ModelSpec,
        prepared: list[PreparedInput],
        names: tuple[str, ...],
    ) -> _Request:
        t = self._transport
        req = _Request()
        batch = 0
        for name, datatype, array in prepared:
            data = serialize_byte_tensor(array) if datatype == "BYTES" else np.ascontiguousarray(array)
            size = serialized_byte_size(data) if datatype == "BYTES" else data.nbytes
            region = self._region(regions, f"in:{name}", size, req)
            region.write(data)
            item = t.InferInput(name, list(array.shape), datatype)
            item.set_shared_memory(region.name, size)
            req.inputs.append(item)
            batch = array.shape[0] if array.ndim else 0
        for name in names:
            out = t.make_output(name)
            tensor = spec.outputs[name]
            shape = list(tensor.shape)
            if spec.max_batch_size > 0 and shape:
                shape[0] = batch
            if tensor.datatype != "BYTES" and all(d >= 0 for d in shape):
                dtype = tensor.numpy_dtype
                size = math.prod(shape) * dtype.itemsize
                region = self._region(regions, f"out:{name}", size, req)
                out.set_shared_memory(region.name, size)
                req.in_shm[name] = (region, dtype)
            req.outputs.append(out)
        return req

    @staticmethod
    def _results(req: _Request, result: Any, names: tuple[str, ...]) -> dict[str, NDArray[Any]]:
        values: dict[str, NDArray[Any]] = {}
        for name in names:
            if name in req.in_shm:
                region, dtype = req.in_shm[name]
                values[name] = region.read(dtype, _shape_of(result.get_output(name)))
            else:
                values[name] = result.as_numpy(name)
        return values

    # -- blocking ----------------------------------------------------------------------------------
    def infer(
        self,
        call: Callable[[Any, Callable[[float | None], Any], float | None], Any],
        core: ClientCore,
        model: str,
        version: str,
        spec: ModelSpec,
        prepared: list[PreparedInput],
        names: tuple[str, ...],
        timeout: float | None,
    ) -> dict[str, NDArray[Any]]:
        """Send one request through a region set; ``call`` is the client's retrying ``_call``."""
        t = self._transport
        regions = self._take()
        try:
            req = self._plan(regions, spec, prepared, names)
            for region in req.drop:
                self._release(region)
            for region in req.new:
                region.register(t)
                region.registered = True
            result = call(
                ("infer", model, version),
                lambda r: t.infer_objects(model, version, req.inputs, req.outputs, r),
                timeout,
            )
            values = self._results(req, result, names)
        except BaseException as exc:
            if isinstance(exc, (ModelNotFoundError, InvalidArgumentError)):
                core.forget(model, version)
            for region in self._forget(regions):  # the server may still write into them
                with contextlib.suppress(Exception):
                    self._release(region)
            _raise_local(exc)
            raise
        self._give_back(regions)
        return values

    def _release(self, region: _Region) -> None:
        try:
            if region.registered:
                region.unregister(self._transport)
        finally:
            region.destroy()

    def close(self) -> None:
        with self._lock:
            sets = list(self._sets)
            self._sets.clear()
            self._free.clear()
        errors = []
        for regions in sets:
            for region in regions.values():
                try:
                    self._release(region)
                except Exception as exc:  # keep releasing the others; report after
                    errors.append(exc)
        if errors:
            raise ClientError(f"could not release {len(errors)} shared-memory region(s): {errors[0]}")

    # -- asyncio -----------------------------------------------------------------------------------
    async def ainfer(
        self,
        call: Callable[[Any, Callable[[float | None], Awaitable[Any]], float | None], Awaitable[Any]],
        core: ClientCore,
        model: str,
        version: str,
        spec: ModelSpec,
        prepared: list[PreparedInput],
        names: tuple[str, ...],
        timeout: float | None,
    ) -> dict[str, NDArray[Any]]:
        """:meth:`infer` for :class:`AsyncClient`: registrations and the request are awaited."""
        t = self._transport
        regions = self._take()
        try:
            req = self._plan(regions, spec, prepared, names)
            for region in req.drop:
                await self._arelease(region)
            for region in req.new:
                await region.register(t)
                region.registered = True
            result = await call(
                ("infer", model, version),
                lambda r: t.infer_objects(model, version, req.inputs, req.outputs, r),
                timeout,
            )
            values = self._results(req, result, names)
        except BaseException as exc:
            if isinstance(exc, (ModelNotFoundError, InvalidArgumentError)):
                core.forget(model, version)
            for region in self._forget(regions):
                with contextlib.suppress(Exception):
                    await self._arelease(region)
            _raise_local(exc)
            raise
        self._give_back(regions)
        return values

    async def _arelease(self, region: _Region) -> None:
        try:
            if region.registered:
                await region.unregister(self._transport)
        finally:
            region.destroy()

    async def aclose(self) -> None:
        with self._lock:
            sets = list(self._sets)
            self._sets.clear()
            self._free.clear()
        errors = []
        for regions in sets:
            for region in regions.values():
                try:
                    await self._arelease(region)
                except Exception as exc:
                    errors.append(exc)
        if errors:
            raise ClientError(f"could not release {len(errors)} shared-memory region(s): {errors[0]}")


def _raise_local(exc: BaseException) -> None:
    """Re-raise the shared-memory libraries' own errors (local create/write/read) as a ClientError."""
    if type(exc).__name__ in ("SharedMemoryException", "CudaSharedMemoryException"):
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        raise ClientError(
            f"shared memory ({exc}{cause}); is /dev/shm (or the GPU) available and large enough?"
        ) from None


def _destroy_local(sets: list[dict[str, _Region]]) -> None:
    for regions in sets:
        for region in regions.values():
            with contextlib.suppress(Exception):
                region.destroy()
    sets.clear()


def _shape_of(output: Any) -> list[int]:
    shape = output["shape"] if isinstance(output, dict) else output.shape
    return [int(d) for d in shape]
