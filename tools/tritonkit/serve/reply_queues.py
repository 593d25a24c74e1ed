"""Room for tritonserver's HTTP answers: the workaround for answers Triton 2.51 drops without a word.

Triton's HTTP front end hands a finished answer to its connection's evhtp thread with ``evthr_defer``
(libevhtp ``thread.c``): a 17-byte command sent on that thread's non-blocking ``AF_UNIX`` socketpair.
When the socket's send buffer is full the send fails with EAGAIN, ``InferResponseComplete``
(``src/http_server.cc`` at v2.51.0) ignores the result, and that answer is never written: the client
waits until it gives up, nothing is logged. The default buffer (``net.core.wmem_default``, 212,992
bytes) holds 278 such commands, and libevhtp gives a new connection to the first thread with nothing
queued, so nearly every connection lands on one thread whatever ``--http-thread-count`` says: more
than about 278 HTTP inferences in flight on one server lose answers (measured on a 2-core host: 485 of
1,024 one-request connections never answered, 485 failed sends under strace).

The fix here widens ``SO_SNDBUF`` of the running server's unix stream sockets, through duplicates of
its descriptors (``pidfd_getfd``: the server's parent may take them under the default ptrace rules).
Without ``CAP_NET_ADMIN`` the kernel caps the size at twice ``net.core.wmem_max``. This module owns
that widening and the figure it gives: how many answers the narrowest queue now holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket

__all__ = ["BYTES_PER_QUEUED_REPLY", "DEFAULT_ROOM", "DEFAULT_SNDBUF_ROOM", "widen_reply_queues"]

#: Kernel bytes one queued 17-byte command takes in a unix stream socket's send buffer (its skb's
#: accounting): the default 212,992-byte buffer holds 278 (Linux 6.x, x86-64)
BYTES_PER_QUEUED_REPLY = 768
#: Answers the embedded server's HTTP threads are given room for (3 MiB of send buffer a socket)
DEFAULT_ROOM = 4096
#: Answers the kernel's default send buffer holds
DEFAULT_SNDBUF_ROOM = 278

_SO_SNDBUFFORCE = 32  # Linux; with CAP_NET_ADMIN, past net.core.wmem_max
_SYS_PIDFD_OPEN = 434  # x86-64 and aarch64 alike
_SYS_PIDFD_GETFD = 438


def _unix_stream_inodes() -> set[int]:
    inodes = set()
    with open("/proc/net/unix", encoding="ascii") as table:
        next(table)
        for line in table:
            fields = line.split()
            if len(fields) >= 7 and fields[4] == "0001":  # SOCK_STREAM
                inodes.add(int(fields[6]))
    return inodes


def _failed(call: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{call}: {os.strerror(code)}")


def widen_reply_queues(pid: int, room: int = DEFAULT_ROOM) -> int:
    """Give every unix stream socket of process ``pid`` a send buffer for ``room`` queued answers;
    returns how many the narrowest now holds (0 when it has none). Raises OSError when the sockets
    cannot be reached (no /proc, no pidfd_getfd, no ptrace rights)."""
    inodes = _unix_stream_inodes()
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(_SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        raise _failed(f"pidfd_open({pid})")
    want = max(1 << 20, room * BYTES_PER_QUEUED_REPLY // 2)  # the kernel doubles what it is given
    narrowest: int | None = None
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:  # closed meanwhile
                continue
            if not target.startswith("socket:[") or int(target[8:-1]) not in inodes:
                continue
            fd = libc.syscall(_SYS_PIDFD_GETFD, pidfd, int(name), 0)
            if fd < 0:
                raise _failed(f"pidfd_getfd({pid}, {name})")
            with socket.socket(fileno=fd) as sock:  # closes only the duplicate
                try:
                    sock.setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, want)
                except PermissionError:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, want)
                size = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            narrowest = size if narrowest is None else min(narrowest, size)
    finally:
        with contextlib.suppress(OSError):
            os.close(pidfd)
    return (narrowest or 0) // BYTES_PER_QUEUED_REPLY
