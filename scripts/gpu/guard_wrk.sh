#!/usr/bin/env bash
# The HTTP guard's cost with wrk where Triton, the guard and wrk each get their own cores (the GPU host:
# 16 cores, no network). One `tritonkit serve` serves the tiny python model (X + 1, FP32 [4]); wrk posts
# the same JSON request alternately to Triton's own HTTP port, to the guard of `tritonkit serve`, and
# to a second guard on the same Triton that runs asyncio's own event loop; ROUNDS rounds of SECONDS_EACH
# seconds each, interleaved; medians, ratios to direct Triton, each guard's CPU per request, and
# Triton's mean batch size. Writes $OUT/guard_wrk.md (and prints it).
#
# Carries, besides what scripts/gpu/setup.sh unpacks from .whl/ (the Triton bundle, numpy for the
# stubs, the client wheels), the folder .whl/wrk/ (ignored), made on a Debian 12 machine with network:
#   cd .whl/wrk && apt-get download wrk libluajit-5.1-2
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d . httptools==0.9.0 uvloop==0.23.0
# wrk 4.1 from Debian bookworm needs glibc 2.34 and libssl.so.3 (Ubuntu 24.04 has glibc 2.39 and
# OpenSSL 3); both .debs are unpacked with dpkg -x into /tmp/wrk-root. httptools is the guard's parser;
# uvloop gives `tritonkit serve`'s guard uvloop's event loop (leave its wheel out to measure without).
#
# Usage: scripts/gpu/guard_wrk.sh
#   env ROUNDS (5), SECONDS_EACH (5), WRK_THREADS (2), WRK_CONNECTIONS (16),
#       TRITON_CORES (0-7), GUARD_CORE (8), ALT_GUARD_CORE (9), WRK_CORES (10-11),
#       LOCAL=1: on a development machine (its .venv, its wrk, no core pinning, nothing unpacked)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
WHL=${WHL:-$SRC/.whl}
OUT=${OUT:-/tmp/gpu-out}
ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${SECONDS_EACH:-5}
WRK_THREADS=${WRK_THREADS:-2}
WRK_CONNECTIONS=${WRK_CONNECTIONS:-16}
mkdir -p "$OUT"

if [ "${LOCAL:-0}" = 1 ]; then
  PY=${PY:-$SRC/.venv/bin/python}
  WRK=${WRK:-$(command -v wrk)}
  export PYTHONPATH="$SRC/tools"
  PIN=0
else
  PY=python3
  # shellcheck source=scripts/gpu/setup.sh
  source "$HERE/setup.sh" || exit 1
  ROOT=/tmp/wrk-root
  if [ ! -x "$ROOT/usr/bin/wrk" ]; then
    mkdir -p "$ROOT"
    for deb in "$WHL"/wrk/*.deb; do dpkg -x "$deb" "$ROOT" || exit 1; done
  fi
  export LD_LIBRARY_PATH="$ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  WRK="$ROOT/usr/bin/wrk"
  if ldd "$WRK" | grep -q "not found"; then
    echo "guard_wrk: wrk cannot run here:" >&2
    ldd "$WRK" | grep "not found" >&2
    exit 1
  fi
  GUARD_SITE=/tmp/tritonkit-guard-site
  UVLOOP_SITE=/tmp/tritonkit-uvloop-site
  if [ ! -d "$GUARD_SITE/httptools" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$GUARD_SITE" \
      "$WHL"/wrk/httptools-*.whl 2>&1 | tail -2
  fi
  if [ ! -d "$UVLOOP_SITE/uvloop" ] && ls "$WHL"/wrk/uvloop-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$UVLOOP_SITE" \
      "$WHL"/wrk/uvloop-*.whl 2>&1 | tail -2
  fi
  export PYTHONPATH="$GUARD_SITE:$PYTHONPATH"
  PIN=1
  CORES=$(nproc)
  if [ "$CORES" -lt 12 ]; then
    echo "guard_wrk: $CORES cores; the default pinning needs 12 (set TRITON_CORES, GUARD_CORE, ...)" >&2
  fi
fi
TRITON_CORES=${TRITON_CORES:-0-7}
GUARD_CORE=${GUARD_CORE:-8}
ALT_GUARD_CORE=${ALT_GUARD_CORE:-9}
WRK_CORES=${WRK_CORES:-10-11}
export ROUNDS SECONDS_EACH WRK_THREADS WRK_CONNECTIONS TRITON_CORES GUARD_CORE ALT_GUARD_CORE WRK_CORES \
  PIN WRK SRC OUT
UVLOOP_SITE=${UVLOOP_SITE:-}
export UVLOOP_SITE

PYTHONUNBUFFERED=1 "$PY" - <<'PYEOF'
"""Start the server and the second guard, pin them, run wrk interleaved, write the table."""
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

env = os.environ
src, out = Path(env["SRC"]), Path(env["OUT"])
sys.path.insert(0, str(src))  # tests.support: the test suite's tiny model
from tests.support.python_models import ADD_ONE, write_python_model  # noqa: E402

pin = env["PIN"] == "1"
rounds, seconds = int(env["ROUNDS"]), int(env["SECONDS_EACH"])
work = Path(tempfile.mkdtemp(prefix="guard-wrk-"))
repo = work / "repo"
write_python_model(repo, "add_one", ADD_ONE)
body = work / "body.json"
body.write_bytes(b'{"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}')
path = "/v2/models/add_one/infer"
tick = os.sysconf("SC_CLK_TCK")


def taskset(cores: str) -> list[str]:
    return ["taskset", "-c", cores] if pin else []


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


serve_env = dict(env)
uvloop_site = env.get("UVLOOP_SITE", "")
if uvloop_site and Path(uvloop_site, "uvloop").is_dir():
    serve_env["PYTHONPATH"] = f"{uvloop_site}:{env['PYTHONPATH']}"
guard_port = free_port()
serve = subprocess.Popen(
    [*taskset(env["TRITON_CORES"]), sys.executable, "-m", "tritonkit", "serve", "--repo", str(repo),
     "--http-port", str(guard_port), "--exit-timeout", "1"],
    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=serve_env,
)
alt = None
try:
    assert serve.stdout is not None
    line = serve.stdout.readline()
    if not line.startswith("tritonkit serve: ready"):
        sys.exit(f"guard_wrk: tritonkit serve did not start: {line}{serve.stdout.read()[-2000:]}")
    import threading

    log = (out / "guard_wrk_serve.log").open("w")  # the rest of serve's output, so its pipe never fills
    threading.Thread(target=lambda: shutil.copyfileobj(serve.stdout, log), daemon=True).start()
    triton = next(c for c in children(serve.pid) if Path(f"/proc/{c}/comm").read_text().strip() == "tritonserver")
    cmdline = Path(f"/proc/{triton}/cmdline").read_bytes().split(b"\0")
    triton_port = int(next(a for a in cmdline if a.startswith(b"--http-port=")).split(b"=")[1])
    if pin:  # the guard (every thread of the serve process) on its own core; Triton keeps its cores
        subprocess.run(["taskset", "-a", "-p", "-c", env["GUARD_CORE"], str(serve.pid)], check=True,
                       stdout=subprocess.DEVNULL)
    loop_of_serve = subprocess.run(
        [sys.executable, "-c", "from tritonkit.serve.guard import _event_loop; print(type(_event_loop()).__module__)"],
        capture_output=True, text=True, env=serve_env, check=True).stdout.strip()
    alt_port = free_port()
    alt_source = (
        "import asyncio, signal, tritonkit.serve.guard as g\n"
        "g._event_loop = asyncio.new_event_loop\n"
        f"guard = g.Guard('127.0.0.1', {alt_port}, {triton_port}, max_body_bytes=64 << 20)\n"
        "guard.start(); print('ready', flush=True)\n"
        "signal.sigwait({signal.SIGTERM}); guard.close()\n"
    )
    alt = subprocess.Popen([*taskset(env["ALT_GUARD_CORE"]), sys.executable, "-c", alt_source],
                           stdout=subprocess.PIPE, text=True, env=dict(env))
    assert alt.stdout is not None and alt.stdout.readline().strip() == "ready"

    def stats() -> tuple[int, int]:
        url = f"http://127.0.0.1:{triton_port}/v2/models/add_one/stats"
        with urllib.request.urlopen(url, timeout=10) as answer:
            import json

            model = json.load(answer)["model_stats"][0]
        return int(model["inference_count"]), int(model["execution_count"])

    def wrk(port: int, secs: int) -> tuple[float, int]:
        done = subprocess.run(
            [*taskset(env["WRK_CORES"]), env["WRK"], f"-t{env['WRK_THREADS']}", f"-c{env['WRK_CONNECTIONS']}",
             f"-d{secs}s", "-s", str(src / "tools/tritonkit/loadtest/post.lua"), f"http://127.0.0.1:{port}{path}"],
            capture_output=True, text=True, env={**env, "TRITONKIT_WRK_BODY": str(body)}, timeout=secs + 60,
        )
        rate = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
        bad = re.search(r"Non-2xx or 3xx responses: (\d+)", done.stdout)
        if rate is None:
            sys.exit(f"guard_wrk: wrk gave no rate: {done.stdout[-500:]} {done.stderr[-500:]}")
        return float(rate.group(1)), int(bad.group(1)) if bad else 0

    variants = [
        ("direct Triton", triton_port, None),
        (f"guard of tritonkit serve ({loop_of_serve} loop)", guard_port, serve.pid),
        ("guard, asyncio loop", alt_port, alt.pid),
    ]
    for _, port, _ in variants:
        wrk(port, 2)  # warm-up
    rates: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    batch: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    errors = 0
    for number in range(rounds):
        row = []
        for name, port, pid in variants:
            before, counts = (cpu_ticks(pid) if pid else 0), stats()
            rate, bad = wrk(port, seconds)
            after, counts_after = (cpu_ticks(pid) if pid else 0), stats()
            errors += bad
            rates[name].append(rate)
            if pid:
                cpu[name].append((after - before) / tick * 1e6 / (rate * seconds))
            executions = counts_after[1] - counts[1]
            batch[name].append((counts_after[0] - counts[0]) / executions if executions else 0.0)
            row.append(f"{name}: {rate:,.0f}")
        print(f"round {number + 1}: " + " | ".join(row), flush=True)
    base = statistics.median(rates[variants[0][0]])
    cpu_model = next((row.split(":", 1)[1].strip() for row in Path("/proc/cpuinfo").read_text().splitlines()
                      if row.startswith("model name")), "unknown CPU")
    pinning = (f"Triton {env['TRITON_CORES']}, guard of tritonkit serve {env['GUARD_CORE']}, asyncio guard "
               f"{env['ALT_GUARD_CORE']}, wrk {env['WRK_CORES']}") if pin else "none"
    lines = [
        "## The guard's cost with wrk",
        "",
        f"{cpu_model}, {os.cpu_count()} cores; cores pinned with taskset: {pinning}. "
        f"wrk -t{env['WRK_THREADS']} -c{env['WRK_CONNECTIONS']}, {rounds} rounds x {seconds} s, interleaved; "
        f"tiny python model (X + 1, FP32 [4], JSON body); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| target | median req/s | ratio to direct | CPU µs per request | Triton's mean batch | rounds (req/s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, _, pid in variants:
        median = statistics.median(rates[name])
        per_request = f"{statistics.median(cpu[name]):.1f}" if pid else "-"
        lines.append(
            f"| {name} | {median:,.0f} | {median / base:.2f} | {per_request} | "
            f"{statistics.median(batch[name]):.2f} | {', '.join(f'{r:,.0f}' for r in rates[name])} |"
        )
    lines += ["", f"Non-2xx answers: {errors}."]
    text = "\n".join(lines) + "\n"
    (out / "guard_wrk.md").write_text(text)
    print(text)
finally:
    for process in (alt, serve):
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    shutil.rmtree(work, ignore_errors=True)
PYEOF
