"""How much load generator a level gets: processes and connections, sized to the host and the request.

Owns the one sizing rule (:func:`auto_processes`, a pure function of the level, the request's size and
the host's cores), what one process carries (:func:`per_process`), the cores the generator may use
(:func:`generator_cores`: all but one on a load host of its own; on the server's own host, cores left
for the server), how many pooled connections a process opens (:func:`connections`), where the host's
cores come from (:func:`host_cores`: the scheduler's affinity, not the machine's count) and whether a
server shares this host (:func:`is_local`). :class:`Capacity` is what a level was measured with; its
:meth:`Capacity.describe` is what reports and the generator-limited line say.

Why: from one process a 786 KB request is CPU-bound from about 4 requests in flight (the H200 report
of issue 40: every trial of a default ``tune`` stopped at concurrency 2-4, the server held 4x more
under ``--workers 4``); a lone request keeps the blocking one-request path of one process, and a level
needs no more processes than requests in flight.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import socket
from urllib.parse import urlsplit

from tritonkit.errors import TritonKitError

__all__ = [
    "AUTO",
    "Capacity",
    "auto_processes",
    "connections",
    "generator_cores",
    "host_cores",
    "is_local",
    "parse_workers",
    "per_process",
    "pools",
]

#: ``workers`` value meaning "sized per level by :func:`auto_processes`"
AUTO = 0

#: requests in flight one aiohttp pool carries (tritonclient.http.aio's ``conn_limit`` default)
HTTP_POOL = 100


@dataclasses.dataclass(frozen=True)
class Capacity:
    """The generator one level was measured with: ``processes`` load loops (1: this process's own
    thread), each with up to ``connections`` (HTTP: one per request in flight; gRPC: one channel), ``auto`` whether
    the count was chosen by the rule (and may grow) or given (``--workers N``)."""

    processes: int
    connections: int
    auto: bool
    cpu: float = 0.0

    def describe(self) -> str:
        share = f" at {self.cpu:.0%} CPU".replace("%", " %") if self.cpu else ""
        noun = "process" if self.processes == 1 else "processes"
        return f"{self.processes} {noun}{share}"

    def as_dict(self) -> dict[str, object]:
        return {"processes": self.processes, "connections": self.connections, "auto": self.auto}


def parse_workers(text: str) -> int:
    """``--workers``: ``auto`` (:data:`AUTO`) or a whole number >= 1; one line otherwise."""
    if text.strip().lower() == "auto":
        return AUTO
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise TritonKitError(f"--workers {text}: expected auto or a whole number >= 1")
    return value


def host_cores() -> int:
    """The cores this process may be scheduled on (``sched_getaffinity``; ``os.cpu_count`` elsewhere)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def is_local(url: str) -> bool:
    """Whether the server at ``url`` (HOST:PORT or a URL) runs on this host: loopback, or this host's name."""
    host = (urlsplit(url if "://" in url else f"//{url}").hostname or "").lower()
    if not host or host in ("localhost", socket.gethostname().lower()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def generator_cores(cores: int, local: bool) -> int:
    """Cores the generator's processes may use: all but one on a load host of its own; beside the
    server, half of them (at most 8 kept for the server, at least 1 each)."""
    if not local:
        return max(1, cores - 1)
    return max(1, cores - max(1, min(cores // 2, 8)))


def per_process(request_bytes: int) -> int:
    """Requests in flight one process carries before its CPU is the limit: fewer for larger requests
    (each costs a copy into the socket and one out of it): 16 below 16 KiB, 8 below 256 KiB, else 4."""
    if request_bytes < 16 * 1024:
        return 16
    if request_bytes < 256 * 1024:
        return 8
    return 4


def auto_processes(mode: str, value: float, request_bytes: int, ceiling: int) -> int:
    """Processes for one level (``mode`` concurrency/rate/poisson at ``value``): one for a lone
    request (it keeps the blocking one-request path), else enough that each carries
    :func:`per_process` requests in flight (an open loop: its rate over 2,000 requests/s a process,
    scaled like it), never more than the requests in flight nor ``ceiling`` (:func:`generator_cores`)."""
    if mode == "concurrency":
        in_flight = int(value)
        if in_flight <= 1:
            return 1
        wanted = math.ceil(in_flight / per_process(request_bytes))
        return max(1, min(wanted, in_flight, ceiling))
    rate_per_process = 2000.0 * per_process(request_bytes) / 16
    return max(1, min(math.ceil(value / rate_per_process), ceiling))


def connections(in_flight: int, protocol: str) -> int:
    """Connections one process keeps for ``in_flight`` requests: HTTP one per request in flight (keep-alive,
    in :func:`pools`); gRPC one channel (HTTP/2 multiplexes the calls; processes add connections)."""
    return 1 if protocol == "grpc" else max(1, in_flight)


def pools(in_flight: int, protocol: str) -> int:
    """HTTP clients (connection pools of :data:`HTTP_POOL`) one process needs so that no request waits
    for a connection: a pool's limit would otherwise cap the requests in flight unseen; gRPC one."""
    return 1 if protocol == "grpc" else max(1, math.ceil(in_flight / HTTP_POOL))
