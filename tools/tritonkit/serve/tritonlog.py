"""Reading ``tritonserver``'s log: the one-line reasons a start failed.

Triton logs a failed model load as an escaped one-line string, a python model whose stub could not
start as a line after which it waits (a hang, not an exit), and a busy port as a bind error.
"""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Sequence
from pathlib import Path

from tritonkit.errors import ModelLoadError, PortInUseError, ServerError

__all__ = ["describe_exit", "load_failures", "startup_failure", "stub_failures"]

_LOAD_FAILURE = re.compile(r"failed to load '(?P<model>[^']+)' version (?P<version>\d+): (?P<reason>.*)$")
_POLL_FAILURE = re.compile(r"Poll failed for model directory '(?P<model>[^']+)': (?P<reason>.*)$")
#: Start-up noise on machines without a GPU or DCGM; never the reason a start failed.
_NOISE = ("NVML", "DCGM", "CudaDriverHelper", "pinned memory")
#: Lines that never say why a server ended: its own "Signal (N) received.", stack frames of the trace
#: it prints on SIGSEGV/SIGABRT ("6# __libc_start_main in ..."), and blank lines.
_NOT_A_REASON = re.compile(r"^\s*(?:\d+# |Signal \(\d+\) received|$)")
#: The python backend logs this and then waits for a stub that already exited (a hang, not an exit).
_STUB_FAILURE = re.compile(
    r"Failed to preinitialize Python stub: (?P<reason>.*?)(?: in '(?P<path>[^']+)')?\s*$"
)


def load_failures(lines: Sequence[str]) -> list[str]:
    """One line per model Triton failed to load, or model directory it could not read."""
    failures = []
    for line in lines:
        match = _LOAD_FAILURE.search(line)
        if match:
            # Triton logs the reason as an escaped one-line string; keep its first line only.
            reason = match["reason"].strip().rstrip('"').split("\\n")[0].strip()
            failures.append(f"model `{match['model']}` version {match['version']} failed to load: {reason}")
        poll = _POLL_FAILURE.search(line)
        if poll:
            reason = poll["reason"].strip().rstrip('"').split("\\n")[0].strip()
            failures.append(f"model directory `{poll['model']}` could not be read by Triton: {reason}")
    return failures


def stub_failures(lines: Sequence[str], repo: Path) -> list[str]:
    """Stubs that could not start: Triton then waits for them instead of failing the load."""
    failures = []
    for line in lines:
        match = _STUB_FAILURE.search(line)
        if match is None:
            continue
        where = Path(match["path"] or "")
        with contextlib.suppress(ValueError):
            where = where.relative_to(repo)
        if len(where.parts) >= 2 and where.parts[1].isdigit():
            failures.append(
                f"model `{where.parts[0]}` version {where.parts[1]} failed to load: "
                f"{match['reason'].strip()} (expected {where})"
            )
        else:
            failures.append(f"a python model failed to load: {match['reason'].strip()} {where}".strip())
    return failures


#: what Triton's option parser prints about an option it refuses (then its usage)
_OPTION_REFUSED = re.compile(
    r"unrecognized option|Bad option|Invalid option value|invalid argument for|requires an argument"
)


def startup_failure(code: int, lines: Sequence[str], log_file: Path | None) -> ServerError:
    """The error for a server that exited with ``code`` before it was ready."""
    failures = load_failures(lines)
    if failures:
        more = f" (and {len(failures) - 1} more; see {log_file})" if len(failures) > 1 else ""
        return ModelLoadError(failures[0] + more)
    for line in lines:
        if "already in use" in line or "Address already in use" in line:
            return PortInUseError(f"tritonserver could not bind a port: {line.split(']', 1)[-1].strip()}")
    errors = [
        line.split("] ", 1)[-1].strip('"')
        for line in lines
        if line.startswith("E") and not any(noise in line for noise in _NOISE)
    ]
    refused = [line.strip().rsplit("tritonserver: ", 1)[-1] for line in lines if _OPTION_REFUSED.search(line)]
    if errors:
        detail = errors[-1].strip()
    elif refused:  # Triton's option parser prints its usage and why, without an error line
        detail = " ".join(refused)
    else:
        tail = [line.strip() for line in lines if line.strip()][-2:]
        detail = (
            f"no error line in the log; its last lines: {' | '.join(tail)}" if tail else "its log is empty"
        )
    return ServerError(f"tritonserver exited with code {code} during start-up: {detail}")


def describe_exit(code: int | None, lines: Sequence[str]) -> str:
    """One line on how tritonserver ended: the signal (by name) or exit code, then the log line before
    its crash trace that tells why (``terminate called after ... std::bad_alloc``), when there is one."""
    if code is None:
        how = "tritonserver is still running"
    elif code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"tritonserver died of {name} (signal {-code}, exit code {code})"
    else:
        how = f"tritonserver exited with code {code}"
    cut = next(
        (i for i, line in enumerate(lines) if re.match(r"\s*Signal \(\d+\) received", line)), len(lines)
    )
    reasons = [
        line.strip()
        for line in lines[max(0, cut - 20) : cut]
        if not _NOT_A_REASON.match(line)
        and not any(noise in line for noise in _NOISE)
        and (cut < len(lines) or line.startswith("E"))  # no crash trace: only an error line tells why
    ]
    return f"{how}; last log line: {reasons[-1][:200]}" if reasons else how
