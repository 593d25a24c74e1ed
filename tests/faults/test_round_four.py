"""Issue 41, items 2-4: the HTTP guard's memory (the in-flight budget given back on every path, RSS
after large bodies, parameter maps), files from elsewhere (ONNX external data and symlinked folders
through ``check`` and ``serve``, an ``.npz`` header declaring 4 TiB, YAML alias bombs and deep nesting)
and faults (the guard's port taken after serve's check, a full disk under the log, a cut
``trials.jsonl`` line). Each case records what it measured."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import socket
import subprocess
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import psutil
import pytest
from onnx import TensorProto, helper

from tritonkit.cli import main
from tritonkit.errors import ServerError
from tritonkit.serve import embedded as embedded_module
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit.tune import trial_log

from .conftest import Record, Scale
from .support import GOOD_JSON, http_good, http_request, raw_http, wait_until, write_add_one

pytestmark = pytest.mark.faults

_INFER = "/v2/models/add_one/infer"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root: Path = tmp_path_factory.mktemp("repo")
    write_add_one(root)
    return root


# --- item 2: the guard's memory ----------------------------------------------------------------
def _send(port: int, body: bytes, headers: dict[str, str] | None = None) -> int:
    return raw_http(port, http_request("POST", _INFER, body, headers))[0]


def _reset_mid_body(port: int, body: bytes, sent: int) -> int:
    """Declare ``body``, send ``sent`` bytes of it, then reset the connection (SO_LINGER 0)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.sendall(http_request("POST", _INFER, body)[: -len(body) + sent or None])
        time.sleep(0.05)
    sock.close()
    return 0


_BAD = b"[" * (256 << 10)  # 256 KiB of bad JSON: checked on a worker thread
_PATHS: dict[str, Callable[[int], int]] = {
    "gzip body refused after inflation (bad JSON)": lambda port: _send(
        port, gzip.compress(_BAD), {"Content-Encoding": "gzip"}
    ),
    "deflate body refused after inflation (bad JSON)": lambda port: _send(
        port, zlib.compress(_BAD), {"Content-Encoding": "deflate"}
    ),
    "gzip body inflating past the body limit (413)": lambda port: _send(
        port, gzip.compress(b"\0" * (3 << 20)), {"Content-Encoding": "gzip"}
    ),
    "truncated gzip body (400)": lambda port: _send(
        port, gzip.compress(_BAD)[:-12], {"Content-Encoding": "gzip"}
    ),
    "gzip infer served (200)": lambda port: _send(
        port, gzip.compress(GOOD_JSON), {"Content-Encoding": "gzip"}
    ),
    "plain large body refused on the worker thread": lambda port: _send(port, b"[" * (300 << 10)),
    "plain small body refused inline": lambda port: _send(port, b"[" * 1000),
    "connection reset mid-body": lambda port: _reset_mid_body(port, b"[" * (1 << 20), 512 << 10),
    "connection reset while its body is checked": lambda port: _reset_mid_body(port, _BAD, len(_BAD)),
}


@pytest.fixture(scope="module")
def budget_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """One guarded server with a 16 MiB in-flight budget and a 2 MiB body limit for every path."""
    root: Path = tmp_path_factory.mktemp("budget")
    write_add_one(root)
    server = EmbeddedServer(
        root, ServerOptions(guard=True, exit_timeout=1, max_body_bytes=2 << 20, max_inflight_bytes=16 << 20)
    )
    with server:
        yield server


@pytest.mark.parametrize("path", list(_PATHS))
def test_budget_given_back(
    path: str, budget_server: EmbeddedServer, fault_scale: Scale, record: Record
) -> None:
    """With a 16 MiB budget, 120 requests of one path (each holding up to 256 KiB while it is read
    or inflated): every one answered without a 503, the budget back to 0, a 1 MiB infer not 503."""
    count = 120 if fault_scale.form == "full" else 80  # > 64: a leak of 256 KiB each spends 16 MiB
    port, guard = budget_server.http_port, budget_server._guard
    assert guard is not None
    statuses = [_PATHS[path](port) for _ in range(count)]
    drained = wait_until(lambda: guard.buffered == 0, 5.0)
    buffered = guard.buffered
    one_mib = _send(port, b"{" + b" " * ((1 << 20) - 2) + b"}")
    good = http_good(port)
    guard.buffered = 0  # a leak is this path's finding only
    refused_503 = statuses.count(503)
    passed = drained and refused_503 == 0 and one_mib != 503 and good
    record(
        "guard-memory",
        f"budget given back: {path} x{count} (16 MiB budget)",
        passed,
        statuses=",".join(f"{s}:{statuses.count(s)}" for s in sorted(set(statuses))),
        buffered_after=buffered,
        one_mib_infer=one_mib,
    )
    assert passed, (
        f"statuses {sorted(set(statuses))}, 503s {refused_503}, buffered {buffered}, 1 MiB: {one_mib}"
    )


def test_guard_returns_memory_after_large_bodies(repo: Path, fault_scale: Scale, record: Record) -> None:
    """Four concurrent 60 MB bodies (inside the default budget), refused by the guard's check: the
    process's RSS comes back within 64 MB of where it started, each round."""
    big = http_request("POST", _INFER, b"[" * 60_000_000)
    me = psutil.Process()
    rounds = 2 if fault_scale.form == "full" else 1
    growths, peaks = [], []
    with EmbeddedServer(repo, ServerOptions(guard=True, exit_timeout=1)) as server:
        time.sleep(0.5)
        before = me.memory_info().rss
        for _ in range(rounds):
            statuses: list[int] = []

            def send(out: list[int] = statuses) -> None:
                out.append(raw_http(server.http_port, big, timeout=60)[0])

            threads = [threading.Thread(target=send) for _ in range(4)]
            for thread in threads:
                thread.start()
            peak = before
            while any(t.is_alive() for t in threads):
                peak = max(peak, me.memory_info().rss)
                time.sleep(0.05)
            wait_until(lambda: me.memory_info().rss - before < 64 << 20, 3.0, step=0.1)
            growths.append((me.memory_info().rss - before) >> 20)
            peaks.append((peak - before) >> 20)
        good = http_good(server.http_port)
    passed = all(g < 64 for g in growths) and good and statuses == [400] * 4
    record(
        "guard-memory",
        f"4 concurrent 60 MB bodies, {rounds} round(s): RSS after",
        passed,
        rss_growth_after_mb=",".join(map(str, growths)),
        rss_peak_mb=",".join(map(str, peaks)),
        statuses=",".join(map(str, statuses)),
    )
    assert passed, f"RSS stayed {growths} MB above the start (peaks {peaks}); statuses {statuses}"


def test_parameter_map_capped(repo: Path, record: Record) -> None:
    body = json.dumps(
        {
            "parameters": {f"key{i}": i for i in range(100_000)},
            "inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}],
        }
    ).encode()
    with EmbeddedServer(repo, ServerOptions(guard=True, exit_timeout=1)) as server:
        started = time.monotonic()
        status, message = raw_http(server.http_port, http_request("POST", _INFER, body), timeout=10)
        seconds = time.monotonic() - started
        good = http_good(server.http_port)
    passed = status == 400 and "100000 keys" in message and seconds < 2 and good
    record(
        "guard-memory", "100,000 keys in a request's parameters", passed, status=status, s=round(seconds, 2)
    )
    assert passed, f"{status} after {seconds:.1f} s: {message}"


# --- item 3: files from elsewhere ----------------------------------------------------------------
def _external_graph(path: Path, location: str) -> None:
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        weight.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 4])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def _external(location: str) -> Callable[[Path], None]:
    return lambda root: _external_graph(root / "add_one" / "1" / "model.onnx", location)


def _model_link(root: Path) -> None:
    outside = root.parent / "elsewhere"
    outside.mkdir()
    (root / "add_one").rename(outside / "add_one")
    os.symlink(outside / "add_one", root / "add_one")


def _version_link(root: Path) -> None:
    outside = root.parent / "elsewhere"
    outside.mkdir()
    (root / "add_one" / "1").rename(outside / "1")
    os.symlink(outside / "1", root / "add_one" / "1")


_FOREIGN: dict[str, Callable[[Path], None]] = {
    "ONNX external data at ../../etc/passwd": _external("../../etc/passwd"),
    "ONNX external data at /etc/passwd": _external("/etc/passwd"),
    "model folder a symlink leaving the repository": _model_link,
    "version folder a symlink leaving the repository": _version_link,
}


@pytest.mark.parametrize("case", list(_FOREIGN))
def test_files_from_elsewhere(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], record: Record
) -> None:
    root = tmp_path / "repo"
    write_add_one(root)
    _FOREIGN[case](root)
    code = main(["check", "--repo", str(root)])
    captured = capsys.readouterr()
    named = [line for line in (captured.out + captured.err).splitlines() if "add_one" in line]
    try:
        with EmbeddedServer(root, ServerOptions(guard=True, exit_timeout=1)) as server:
            served = f"served (infer {'200' if http_good(server.http_port) else 'failed'})"
    except ServerError as exc:
        served = str(exc)
    refused = served.startswith("not serving") and "\n" not in served
    passed = code != 0 and bool(named) and refused
    record(
        "files",
        f"{case}: check and serve",
        passed,
        check_exit=code,
        check_line=(named or [""])[0][:110],
        serve=served[:120],
    )
    assert passed, f"check exit {code} {named[:1]}; serve: {served}"


def test_npz_declaring_4_tib(tmp_path: Path, capsys: pytest.CaptureFixture[str], record: Record) -> None:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40, 4)}
    )
    bomb = tmp_path / "cal.npz"
    with zipfile.ZipFile(bomb, "w") as archive:
        archive.writestr("X.npy", header.getvalue() + b"\0" * 64)
    graph = tmp_path / "m.onnx"
    _external_graph(graph, "w.bin")
    (tmp_path / "w.bin").write_bytes(b"\0" * 16)
    args = ["build", "--onnx", str(graph), "--repo", str(tmp_path / "out"), "--precision", "int8"]
    code = main([*args, "--calibration-data", str(bomb), "--eval-data", str(bomb)])
    err = capsys.readouterr().err.strip()
    passed = code != 0 and len(err.splitlines()) == 1 and "declares" in err and "Traceback" not in err
    record("files", ".npz whose header declares 4 TiB", passed, exit=code, line=err[:120])
    assert passed, err[-400:]


_LAUGHS = "".join(f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))
_YAML: dict[str, str] = {
    "billion laughs as serving.device": f"a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n{_LAUGHS}"
    "source: {flagship: mini}\nserving: {device: *i}\n",
    "a description of 5,000 nested lists": "source: {flagship: mini}\ndescription: "
    + "[" * 5000
    + "]" * 5000
    + "\n",
}


@pytest.mark.parametrize("case", list(_YAML))
def test_yaml_bounds(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], record: Record) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(_YAML[case])
    me = psutil.Process()
    before, started = me.memory_info().rss, time.monotonic()
    code = main(["build", str(spec), "--repo", str(tmp_path / "out")])
    seconds, grown = time.monotonic() - started, (me.memory_info().rss - before) >> 20
    err = capsys.readouterr().err.strip()
    passed = code != 0 and len(err.splitlines()) == 1 and seconds < 5 and grown < 100 and len(err) < 400
    record(
        "files", f"YAML spec: {case}", passed, exit=code, s=round(seconds, 2), rss_mb=grown, line=err[:120]
    )
    assert passed, f"exit {code} after {seconds:.1f} s, RSS +{grown} MB: {err[:300]}"


# --- item 4: faults ------------------------------------------------------------------------------
@pytest.mark.parametrize("role", ["http", "grpc", "metrics"])
def test_port_taken_after_the_check(
    repo: Path,
    role: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    record: Record,
) -> None:
    """Another process takes a port between serve's check and its bind (the guards', Triton's own)."""
    taken: list[socket.socket] = []
    check = embedded_module.check_port

    def check_then_take(host: str, port: int, checked: str) -> None:
        check(host, port, checked)
        if checked == role:
            sock = socket.socket()
            sock.bind((host, port))
            sock.listen()
            taken.append(sock)

    monkeypatch.setattr(embedded_module, "check_port", check_then_take)
    ports = {}
    for name in ("http", "grpc", "metrics"):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports[name] = probe.getsockname()[1]
    flags = [f"--{name}-port={port}" for name, port in ports.items()]
    try:
        code = main(["serve", "--repo", str(repo), *flags])
    finally:
        for sock in taken:
            sock.close()
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if line.strip()]
    passed = code != 0 and bool(lines) and str(ports[role]) in lines[-1] and "Traceback" not in err
    record(
        "faults-41",
        f"{role} port taken between serve's check and its bind",
        passed,
        exit=code,
        line=lines[-1][:120] if lines else "",
    )
    assert passed, err[-500:]


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs, filled but for 32 KiB (root only: skipped where mount is not allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode()[:80]}")
    try:
        (mount / "filler").write_bytes(b"\0" * (224 << 10))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_under_the_log(
    repo: Path, tiny_disk: Path, fault_scale: Scale, capfd: pytest.CaptureFixture[str], record: Record
) -> None:
    """Triton logging every request onto a disk that fills: every request still answered."""
    count = 400 if fault_scale.form == "full" else 200
    server = EmbeddedServer(
        repo, ServerOptions(guard=True, exit_timeout=2, log_file=tiny_disk / "server.log", log_verbose=1)
    )
    with server:
        started = time.monotonic()
        answered = sum(
            raw_http(server.http_port, http_request("POST", _INFER, GOOD_JSON), timeout=5)[0] == 200
            for _ in range(count)
        )
        seconds = time.monotonic() - started
        stop_started = time.monotonic()
    stop_s = time.monotonic() - stop_started
    said = [line for line in capfd.readouterr().err.splitlines() if "writing the server log" in line]
    passed = answered == count and len(said) == 1 and stop_s < 10
    record(
        "faults-41",
        f"log's disk full: {count} verbose-logged requests",
        passed,
        answered=answered,
        s=round(seconds, 1),
        said_once=len(said) == 1,
        stop_s=round(stop_s, 1),
    )
    assert passed, f"{answered}/{count} answered; said {len(said)} times; stop took {stop_s:.1f} s"


def test_cut_trial_line_set_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str], record: Record) -> None:
    """A tune killed twice mid-write: the resumed runs' rows start on fresh lines, the cut ones are
    set aside (named), and every whole row reads back."""
    log = tmp_path / trial_log.LOG
    trial_log.append(log, {"kind": "header", "model": "m"})
    for key in ("a", "b"):
        trial_log.append(log, {"kind": "trial", "key": key})
        with log.open("a") as handle:
            handle.write('{"kind": "trial", "key": "cut-' + key)  # killed mid-line
        trial_log.append(log, {"kind": "trial", "key": key + "2"})  # the resumed run's first row
    header, rows = trial_log.load_rows(tmp_path)
    err = capsys.readouterr().err
    keys = [row.get("key") for row in rows]
    aside = log.with_name(log.name + ".cut")
    passed = (
        header is not None
        and keys == ["a", "a2", "b", "b2"]
        and aside.exists()
        and len(aside.read_text().splitlines()) == 2
        and str(aside) in err
    )
    record("faults-41", "trials.jsonl cut twice, resumed", passed, rows=len(rows), set_aside=aside.exists())
    assert passed, f"{keys}; {err}"
