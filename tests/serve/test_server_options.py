"""ServerOptions: the one description of a server, checked once, from which tritonserver's command line is
derived; the started server runs exactly that command line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tests.support.python_models import ADD_ONE, write_python_model

from tritonkit.deploy.checks.server import REQUIRED_FLAGS
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions, find_triton, free_port
from tritonkit.serve.install import prepare_backends
from tritonkit.serve.options import ServerOptionError


def test_options_are_frozen_and_keep_what_they_were_given_as_made() -> None:
    apis = ["model-repository"]
    options = ServerOptions(restricted_apis=apis, extra_args=["--log-info=true"], log_file="server.log")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.guard = True  # type: ignore[misc]
    apis.append("trace")  # the caller's list is not the options'
    assert options.restricted_apis == ("model-repository",)
    assert options.extra_args == ("--log-info=true",)
    assert options.log_file == Path("server.log")
    assert hash(options) == hash(dataclasses.replace(options))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"http_port": 99999}, "http port must be 1-65535, given 99999"),
        ({"metrics_port": 0}, "metrics port must be 1-65535, given 0"),
        ({"exit_timeout": -3}, "exit timeout must be 0 or more seconds, given -3"),
        ({"startup_timeout": 0}, "startup timeout must be more than 0 seconds, given 0"),
        (
            {"restricted_apis": ("bogus",)},
            "unknown restricted API 'bogus'; expected some of health, metadata, inference, shared-memory, "
            "model-config, model-repository, statistics, trace, logging",
        ),
        ({"max_body_bytes": 0}, "max body bytes must be 1 or more, given 0"),
        ({"log_max_bytes": 100}, "log max bytes must be 4096 or more, given 100"),
    ],
)
def test_out_of_range_options_are_one_line_when_made_or_replaced(
    given: dict[str, object], message: str
) -> None:
    with pytest.raises(ServerOptionError) as made:
        ServerOptions(**given)  # type: ignore[arg-type]
    assert str(made.value) == message
    with pytest.raises(ServerOptionError) as replaced:
        dataclasses.replace(ServerOptions(), **given)
    assert str(replaced.value) == message
    assert made.value.exit_code == 2


def test_what_defaults_to_another_option_follows_it_through_replace() -> None:
    plain = ServerOptions(max_body_bytes=1 << 20)
    guarded = dataclasses.replace(plain, guard=True)
    assert (plain.guards_grpc, plain.probes_health, plain.inflight_bytes) == (False, False, 4 << 20)
    assert (guarded.guards_grpc, guarded.probes_health) == (True, True)
    assert not dataclasses.replace(guarded, grpc_guard=False, model_control_mode="explicit").guards_grpc
    assert not dataclasses.replace(guarded, model_control_mode="explicit").probes_health
    assert dataclasses.replace(plain, max_inflight_bytes=5).inflight_bytes == 5


def test_triton_listens_on_loopback_behind_each_guard_and_runs_every_required_flag() -> None:
    options = ServerOptions(host="0.0.0.0", guard=True, grpc_guard=False, metrics=False, restricted_apis=())
    args = options.triton_args(http_port=1, grpc_port=2, metrics_port=None, admin_key="key")
    assert args[:4] == [
        "--http-address=127.0.0.1",
        "--http-port=1",
        "--grpc-address=0.0.0.0",
        "--grpc-port=2",
    ]
    assert "--allow-metrics=false" in args and not any(a.startswith("--metrics-") for a in args)
    assert not any("restricted" in a or "key" in a for a in args)
    assert [f"{f}={v}" for f, v in REQUIRED_FLAGS.items() if f"{f}={v}" not in args] == []


def test_the_started_server_runs_the_command_line_derived_from_its_options(tmp_path: Path) -> None:
    """Read back from ``/proc/<pid>/cmdline`` of the real tritonserver: every argument is the options'
    (the admin key as the server overwrote it there after Triton parsed it)."""
    repo = tmp_path / "repo"
    write_python_model(repo, "add_one", ADD_ONE)
    ports = {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port()}
    options = ServerOptions(
        **ports,
        exit_timeout=1,
        log_verbose=1,
        response_cache_bytes=1 << 20,
        restricted_apis=("model-repository", "trace"),
        admin_key="a" * 32,
        extra_args=("--log-info=true",),
    )
    with EmbeddedServer(repo, options) as server:
        assert server.pid is not None
        argv = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        key = "*" * 32 if server.key_hidden else server.admin_key
    install = find_triton()
    assert argv == [
        str(install.binary),
        f"--model-repository={repo.resolve()}",
        f"--backend-directory={prepare_backends(install)}",
        *options.triton_args(**ports, admin_key=key, caches=install.caches),
    ]
    assert "--cache-config=local,size=1048576" in argv and argv[-1] == "--log-info=true"
    assert f"--http-restricted-api=model-repository,trace:tritonkit-admin-key={key}" in argv
