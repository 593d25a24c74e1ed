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

Cleanup: :meth:`ShmPool.close` (run by the clients' ``close``)
unregister and destroy every region. When a request fails, its region set is destroyed at once
instead of going back to the pool, since the server may still write into it (a timed-out request
keeps running server-side).

The pool does only local work: :meth:`ShmPool.infer` and :meth:`ShmPool.close` are operations
(:mod:`tritonkit.client.ops`) that yield their registrations and requests as steps, which the
client performs blocking or awaited.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import secrets
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import tritonclient.utils.shared_memory as shm
from numpy.typing import NDArray
from tritonclient.utils import serialize_byte_tensor, serialized_byte_size

from tritonkit.client.core import ClientCore, Op, Step, Transport, send
from tritonkit.client.errors import InvalidArgumentError, ModelNotFoundError
from tritonkit.client.protocol import INFER_OBJECTS
from tritonkit.client.spec import ModelSpec, PreparedInput
from tritonkit.errors import ClientError

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
            self._lib: Any = shm
            self.key = f"/{name}"
            self.handle = shm.create_shared_memory_region(name, self.key, size, create_only=True)
        else:
            # Raises without cuda-python (CPU hosts): imported only when a CUDA region is asked for.
            import tritonclient.utils.cuda_shared_memory as cudashm  # noqa: PLC0415

            self._lib = cudashm
            self.key = ""
            self.handle = cudashm.create_shared_memory_region(name, size, 0)

    def register(self, transport: Transport, timeout: float | None) -> Step:
        """The step that registers the region with the server (within the client's ``timeout``)."""
        if self.kind == "system":
            return transport.call, (
                "register_system_shared_memory",
                (self.name, self.key, self.size),
                timeout,
            )
        handle = self._lib.get_raw_handle(self.handle)
        return transport.call, ("register_cuda_shared_memory", (self.name, handle, 0, self.size), timeout)

    def unregister(self, transport: Transport, timeout: float | None) -> Step:
        """The step that unregisters it: within ``timeout``, so a stalled server cannot hold a close."""
        return transport.call, (f"unregister_{self.kind}_shared_memory", (self.name,), timeout)

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

    def __init__(self, kind: str, transport: Transport, timeout: float | None = None) -> None:
        if kind not in KINDS:
            raise ClientError(f"unknown shared_memory {kind!r}; expected one of none, {', '.join(KINDS)}")
        if kind == "cuda":
            try:
                import tritonclient.utils.cuda_shared_memory  # noqa: F401, PLC0415 (raises without cuda-python: probed)
            except Exception as exc:
                raise ClientError(
                    f"shared_memory='cuda' needs CUDA and cuda-python here ({type(exc).__name__}: {exc})"
                ) from None
        self.kind = kind
        self._transport = transport
        #: each register / unregister call's timeout: the client's
        self.timeout = timeout
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

    # -- operations (driven by the client: blocking or awaited) -------------------------------
    def infer(
        self,
        call: Callable[..., Op[Any]],
        core: ClientCore,
        model: str,
        version: str,
        spec: ModelSpec,
        prepared: list[PreparedInput],
        names: tuple[str, ...],
        timeout: float | None,
    ) -> Op[dict[str, NDArray[Any]]]:
        """Send one request through a region set; ``call`` is the client's retrying ``_call``."""
        t = self._transport
        regions = self._take()
        try:
            req = self._plan(regions, spec, prepared, names)
            for region in req.drop:
                yield from self._release(region)
            for region in req.new:
                yield region.register(t, self.timeout)
                region.registered = True
            args = (
                model,
                req.inputs,
                version,
                req.outputs,
            )  # tritonclient's infer(model, inputs, version, outputs)
            result = yield from call(("infer", model, version), timeout, send, t.call, INFER_OBJECTS, args)
            values = self._results(req, result, names)
        except BaseException as exc:
            if isinstance(exc, (ModelNotFoundError, InvalidArgumentError)):
                core.forget(model, version)
            for region in self._forget(regions):  # the server may still write into them
                with contextlib.suppress(Exception):
                    yield from self._release(region)
            _raise_local(exc)
            raise
        self._give_back(regions)
        return values

    def _release(self, region: _Region) -> Op[None]:
        try:
            if region.registered:
                yield region.unregister(self._transport, self.timeout)
        finally:
            region.destroy()

    def close(self) -> Op[None]:
        """Unregister and destroy every region."""
        with self._lock:
            sets = list(self._sets)
            self._sets.clear()
            self._free.clear()
        errors = []
        for regions in sets:
            for region in regions.values():
                try:
                    yield from self._release(region)
                except Exception as exc:  # keep releasing the others; report after
                    errors.append(exc)
        if errors:
            first = errors[0]  # a timeout's text can be empty (asyncio's): name its type then
            raise ClientError(
                f"could not release {len(errors)} shared-memory region(s): {str(first) or type(first).__name__}"
            )


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
