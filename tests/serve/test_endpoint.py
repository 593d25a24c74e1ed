"""serve.endpoint: the one way the measuring tools get a server (a given url, or an embedded server)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.http as httpclient
from tests.support.python_models import ADD_ONE, write_python_model

from tritonkit.errors import ServerError
from tritonkit.serve.endpoint import endpoint
from tritonkit.serve.options import ADMIN_HEADER


def test_a_given_url_names_the_other_endpoints_or_guesses_tritons_default_ports() -> None:
    with endpoint("grpc://10.0.0.5:9001/", protocol="grpc", admin_key="k") as where:
        assert (where.grpc, where.http, where.url("grpc")) == (
            "10.0.0.5:9001",
            "10.0.0.5:8000",
            "10.0.0.5:9001",
        )
        assert where.metrics == "http://10.0.0.5:8002/metrics" and not where.metrics_named
        assert where.headers == {ADMIN_HEADER: "k"} and where.server is None
    with endpoint(
        "h:1", http_url="http://h:2", metrics_url="http://h:3/metrics", repo="/nonexistent"
    ) as where:  # a url never touches the repository
        assert (where.http, where.grpc, where.url("http")) == ("h:2", "h:8001", "h:2")
        assert where.metrics_named and where.headers == {}


def test_a_model_missing_from_the_repository_is_refused_before_a_server_starts(tmp_path: Path) -> None:
    with (
        pytest.raises(
            ServerError, match=rf"model `ghost` not found in {tmp_path}; expected .*ghost/config.pbtxt"
        ),
        endpoint(repo=tmp_path, load=["ghost"]),
    ):
        pass


def test_the_embedded_server_loads_only_the_models_asked_for_and_stops_after(tmp_path: Path) -> None:
    write_python_model(tmp_path, "wanted", ADD_ONE)
    write_python_model(tmp_path, "other", ADD_ONE)
    with endpoint(repo=tmp_path, load=["wanted"], exit_timeout=1) as where:
        assert (
            where.server is not None and where.metrics_named and where.headers == where.server.admin_headers
        )
        client = httpclient.InferenceServerClient(where.http)
        try:
            index = {
                m["name"]: m.get("state") for m in client.get_model_repository_index(headers=where.headers)
            }
        finally:
            client.close()
        assert index == {"wanted": "READY", "other": None}  # explicit model control: `other` not loaded
        server = where.server
    assert not server.is_running()
