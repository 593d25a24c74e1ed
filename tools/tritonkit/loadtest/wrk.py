"""Cross-check with a C load generator: ``wrk`` posting the same request to the HTTP endpoint.

The body is exactly what the HTTP user sends for the model's first payload (KServe v2 JSON header
plus binary tensors, made by ``tritonclient.http``), so the two throughputs compare the load
generators, not the encodings. The Lua script (``tritonkit/loadtest/post.lua``, loaded here as
:data:`LUA_SCRIPT`) reads the body file and its JSON-header length from the environment.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from tritonkit.errors import LoadTestError
from tritonkit.measure.payloads import ModelSpec, http_request, make_payloads

__all__ = ["LUA_SCRIPT", "cross_check", "parse_wrk_output", "request_body", "wrk_available"]

#: The wrk Lua script, shipped as package data next to this module (``post.lua``).
LUA_SCRIPT = resources.files(__package__ or "tritonkit.loadtest").joinpath("post.lua").read_text()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wrk_available() -> str | None:
    """Path of ``wrk``, or ``None`` (Debian package ``wrk``; ``make tools`` installs it)."""
    return shutil.which("wrk")


def request_body(
    spec: ModelSpec, batch_mix: Mapping[int, float] | None = None, seed: int = 0
) -> tuple[bytes, int]:
    """(body, JSON header length) of the first payload, as the HTTP user sends it."""
    payload = make_payloads(spec, batch_mix, per_batch=1, seed=seed).payloads[0]
    _, _, body, json_size = http_request(payload)
    return body, json_size


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def parse_wrk_output(text: str) -> dict[str, Any]:
    """Requests/s, totals, non-2xx count and latency percentiles (ms) from ``wrk --latency``."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    total = re.search(r"(\d+) requests in ([\d.]+)(\w+)", text)
    if not rps or not total:
        raise LoadTestError(f"could not read wrk's output: {' '.join(text.split())[:200]}")
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors:(.*)", text)
    percentiles = {}
    for pct, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M):
        percentiles[f"p{pct}_ms"] = round(float(value) * _UNITS[unit], 3)
    return {
        "rps": float(rps[1]),
        "requests": int(total[1]),
        "non_2xx": int(non2xx[1]) if non2xx else 0,
        "socket_errors": errors[1].strip() if errors else "",
        **percentiles,
    }


def cross_check(
    http_url: str,
    spec: ModelSpec,
    batch_mix: Mapping[int, float] | None = None,
    *,
    connections: int = 16,
    duration: float = 10.0,
    threads: int | None = None,
    seed: int = 0,
    report_dir: Path | None = None,
) -> dict[str, Any]:
    """Run ``wrk`` against ``/v2/models/<model>/versions/<v>/infer`` and return its figures.

    Returns ``{"skipped": reason}`` when wrk is not installed (the report says so).
    """
    binary = wrk_available()
    if binary is None:
        return {"skipped": "wrk is not installed (Debian package `wrk`; `make tools`)", "rps": None}
    body, header_length = request_body(spec, batch_mix, seed)
    folder = Path(report_dir) if report_dir is not None else Path.cwd()
    body_path, script_path = folder / "wrk_body.bin", folder / "wrk_post.lua"
    body_path.write_bytes(body)
    script_path.write_text(LUA_SCRIPT)
    host = http_url.split("://", 1)[-1].rstrip("/")
    url = f"http://{host}/v2/models/{spec.name}/versions/{spec.version}/infer"
    threads = threads or max(1, min(connections, os.cpu_count() or 1))
    command = [
        binary,
        f"-t{threads}",
        f"-c{max(connections, threads)}",
        f"-d{max(1, round(duration))}s",
        "--latency",
        "-s",
        str(script_path),
        url,
    ]
    env = dict(os.environ, TRITONKIT_WRK_BODY=str(body_path), TRITONKIT_WRK_HEADER_LENGTH=str(header_length))
    cpu_before = _children_cpu()
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=duration + 60, check=False
    )
    if result.returncode != 0:
        raise LoadTestError(
            f"wrk failed (code {result.returncode}): {(result.stderr or result.stdout).strip()[:200]}"
        )
    cpu = _children_cpu() - cpu_before
    figures = parse_wrk_output(result.stdout)
    if figures["requests"]:
        figures["cpu_us_per_request"] = round(cpu * 1e6 / figures["requests"], 1)
    figures.update(
        {
            "connections": max(connections, threads),
            "threads": threads,
            "duration_s": round(duration),
            "url": url,
            "body_bytes": len(body),
        }
    )
    if report_dir is not None:
        (folder / "wrk.txt").write_text(result.stdout)
    return figures
