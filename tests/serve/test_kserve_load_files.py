"""The guard's check of a model load's ``file:`` parameters: Triton 2.51 aborts (SIGABRT) on a file
name longer than NAME_MAX bytes, so the guard refuses it with a 400 first (only key holders reach this
route on a default server, but no request may kill the server)."""

from __future__ import annotations

import base64
import json

import pytest

from tritonkit.serve.kserve import RefusedError, check_body, resolve

LOAD = "/v2/repository/models/m/load"
CONTENT = base64.b64encode(b"\0" * 8).decode()


def _body(path: str) -> bytes:
    return json.dumps({"parameters": {"config": "{}", f"file:{path}": CONTENT}}).encode()


def test_a_file_name_over_name_max_is_refused_before_triton() -> None:
    route, _ = resolve("POST", LOAD)
    with pytest.raises(
        RefusedError, match=r"names of at most 255 bytes .* got a name of 256 bytes"
    ) as refused:
        check_body(route, _body("1/" + "a" * 256), None, 1 << 20)
    assert refused.value.status == 400


def test_a_path_over_path_max_is_refused() -> None:
    route, _ = resolve("POST", LOAD)
    with pytest.raises(RefusedError, match=r"4096 bytes in all; got a name of 200 bytes, 4\d{3} in all"):
        check_body(route, _body("/".join(["b" * 200] * 21)), None, 1 << 20)


def test_ordinary_model_load_files_pass() -> None:
    route, _ = resolve("POST", LOAD)
    check_body(route, _body("1/model.onnx"), None, 1 << 20)
    check_body(route, _body("1/" + "c" * 255), None, 1 << 20)
    check_body(route, b"", None, 1 << 20)  # a load without a body: the repository's own files
