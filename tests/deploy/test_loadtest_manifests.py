"""The load-test overlay run for real on loopback: the master Job's script and the workers' arguments,
with the rendered ConfigMaps as their environment and scenario, running the project's
``loadtests/locustfile.py`` against the embedded Triton server.

Only what cannot exist outside a cluster is changed: the Service names become loopback addresses, the
master port a free one, the mounted folders temp folders, the model a tiny probe model, the run short."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tritonkit import deploy
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions, free_port
from tritonkit_bench.probe_model import write_probe_model

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]


def _workload(objects: list[Obj], kind: str, component: str) -> Obj:
    for obj in objects:
        labels = obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
        if obj["kind"] == kind and labels.get("app.kubernetes.io/component") == component:
            return obj
    raise AssertionError(f"no {kind} for {component}")


def _scenario(objects: list[Obj]) -> dict[str, Any]:
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].startswith("locust-scenario-"):
            return json.loads(obj["data"]["scenario.json"])  # type: ignore[no-any-return]
    raise AssertionError("no locust-scenario ConfigMap")


@pytest.mark.slow
def test_master_and_worker_run_the_project_locustfile(
    rendered: Callable[[str], list[Obj]], tmp_path: Path
) -> None:
    objects = rendered("loadtest")
    master = _workload(objects, "Job", "master")["spec"]["template"]["spec"]["containers"][0]
    worker = _workload(objects, "Deployment", "worker")["spec"]["template"]["spec"]["containers"][0]
    env, missing = deploy.container_env(master, objects)
    assert not missing
    assert deploy.container_env(worker, objects)[0] == env  # one settings ConfigMap for both

    # the locustfile the pods run is this repository's (the image copies loadtests/ to /app/loadtests)
    locustfile = REPO / Path(env["LOCUST_LOCUSTFILE"]).relative_to("/app")
    assert locustfile.is_file(), locustfile
    assert master["command"] == ["/bin/sh", "-c"]
    reports = tmp_path / "reports"
    script = master["args"][0].replace("/reports", str(reports))
    port = free_port()
    worker_args = [
        a.replace("=locust-master", "=127.0.0.1").replace("=5557", f"={port}") for a in worker["args"]
    ]
    assert worker["command"] == ["locust"] and "--worker" in worker_args
    assert {"--master-host=127.0.0.1", f"--master-port={port}"} <= set(worker_args)  # the Service, here

    repo = tmp_path / "repo"
    write_probe_model(repo, "probe_add")
    with EmbeddedServer(repo, ServerOptions(exit_timeout=1)) as server:
        scenario = _scenario(objects)
        scenario.update(
            http_url=server.http_url,
            grpc_url=server.grpc_url,
            users=2,
            duration=3.0,
            report_dir=str(tmp_path / "worker-reports"),  # the workers' emptyDir
            models=[
                {"name": "probe_add", "version": "", "weight": 1, "batch_mix": {"1": 1.0}, "source": "random"}
            ],
        )
        config = tmp_path / "etc" / Path(env["TRITONKIT_LOADTEST_CONFIG"]).name  # the mounted ConfigMap
        config.parent.mkdir()
        config.write_text(json.dumps(scenario))
        run_env = {
            **os.environ,
            **env,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(tmp_path),
            "LOCUST_LOCUSTFILE": str(locustfile),
            "TRITONKIT_LOADTEST_CONFIG": str(config),
            "LOCUST_EXPECT_WORKERS": "1",
            "LOCUST_EXPECT_WORKERS_MAX_WAIT": "60",
            "LOCUST_MASTER_BIND_HOST": "127.0.0.1",
            "LOCUST_MASTER_BIND_PORT": str(port),
        }
        master_proc = subprocess.Popen(
            ["/bin/sh", "-c", script],
            env=run_env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        worker_proc = subprocess.Popen(
            ["locust", *worker_args],
            env=run_env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            output, _ = master_proc.communicate(timeout=120)
        finally:
            for proc in (master_proc, worker_proc):
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=15)
    assert master_proc.returncode == 0, output[-3000:]
    runs = list(reports.iterdir())
    assert len(runs) == 1 and runs[0].name.endswith(f"-{scenario['scenario']}")
    names = {p.name for p in runs[0].iterdir()}
    assert {"locust_stats.csv", "report.html", "locust.log", "run_config.json"} <= names, names
    assert json.loads((runs[0] / "run_config.json").read_text())["report_dir"] == str(runs[0])
    with open(runs[0] / "locust_stats.csv", newline="") as handle:
        rows = {row["Name"]: row for row in csv.DictReader(handle)}
    assert int(rows["Aggregated"]["Request Count"]) > 0 and int(rows["Aggregated"]["Failure Count"]) == 0
    assert any(name.startswith("probe_add") for name in rows), sorted(
        rows
    )  # events named by the project's users
    assert list((tmp_path / "worker-reports" / ".latency").glob("*.json"))  # the worker's histogram
