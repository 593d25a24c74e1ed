"""Putting a config into service without a restart, and writing the winner back to the repository.

Owns :class:`RepositoryApi` (Triton's model-repository extension over HTTP: ``load`` with a config
override, the JSON form of the ``ModelConfig`` message, sent with the admin-key header that unlocks the
restricted ``model-repository`` API; the server must run with ``--model-control-mode=explicit``), and
:func:`write_config` / :func:`write_as_model`: the winner validated through :mod:`tritonkit.config` and
handed to the repository's writer (:class:`tritonkit.repository.ModelRepository`: atomic, under the
repository's lock, nothing half-written or hidden left behind), with the unified diff against the old
config returned for printing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import http.client
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritonkit.config import ModelConfig, from_pbtxt, problems, to_dict, to_pbtxt
from tritonkit.errors import TritonKitError
from tritonkit.repository import ModelRepository

__all__ = ["WRITER", "RepositoryApi", "read_config", "write_as_model", "write_config"]

#: Who ``config.origin.json`` says rewrote a config.
WRITER = "tritonkit tune"


class RepositoryApi:
    """Load, reload and unload models on a running server (HTTP endpoint ``host:port``)."""

    def __init__(
        self,
        http_url: str,
        headers: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        log: str | os.PathLike[str] | None = None,
    ) -> None:

        self.url = http_url
        #: where the server's log is (named when the server stops answering), if known
        self.log = str(log) if log is not None else "the server's log"
        self.headers = dict(headers or {})
        self._client = httpclient.InferenceServerClient(
            http_url, connection_timeout=timeout, network_timeout=timeout
        )

    def _do(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> None:

        try:
            fn(*args, headers=self.headers or None, **kwargs)
        except InferenceServerException as exc:
            message = " ".join(str(exc.message() or exc).split())
            hint = ""
            if "explicit" in message or "polling" in message:
                hint = "; expected a server started with --model-control-mode=explicit"
            elif "restricted" in message.lower() or "unauthenticated" in message.lower():
                hint = "; expected the admin key of the model-repository API (--admin-key)"
            raise TritonKitError(f"{what} on {self.url} failed: {message}{hint}") from None
        except (OSError, ValueError, RuntimeError, http.client.HTTPException) as exc:  # the server went away
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise TritonKitError(
                f"{what} on {self.url} failed: the server did not answer ({detail}); see {self.log}"
            ) from None

    def load(self, model: str, config: ModelConfig | None = None) -> None:
        """(Re)load ``model``; with ``config`` that config replaces ``config.pbtxt`` for this load only."""
        extra = {} if config is None else {"config": json.dumps(to_dict(config))}
        self._do(f"loading model `{model}`", self._client.load_model, model, **extra)

    def unload(self, model: str) -> None:
        self._do(f"unloading model `{model}`", self._client.unload_model, model)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()


def read_config(model_dir: str | os.PathLike[str]) -> ModelConfig:
    path = Path(model_dir) / "config.pbtxt"
    try:
        return from_pbtxt(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TritonKitError(f"no config.pbtxt in {model_dir}; expected a model directory") from None


def _valid_text(cfg: ModelConfig) -> str:
    found = problems(cfg)
    if found:
        raise TritonKitError(f"the tuned config of `{cfg.name}` is not valid: {found[0]}")
    return to_pbtxt(cfg)


def _diff(old: str, new: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"{name} (before)",
            f"{name} (tuned)",
        )
    )


def _repository(model_dir: str | os.PathLike[str]) -> tuple[ModelRepository, str]:
    folder = Path(model_dir)
    return ModelRepository(folder.parent), folder.name


def write_config(model_dir: str | os.PathLike[str], cfg: ModelConfig) -> str:
    """Replace ``<model_dir>/config.pbtxt`` with ``cfg`` (through the repository's writer: atomic, under
    its lock, recorded as tune's in ``config.origin.json``); return the diff (empty: unchanged)."""
    text = _valid_text(cfg)
    repository, name = _repository(model_dir)
    old = repository.write_config(name, cfg, writer=WRITER)
    return _diff(old, text, str(Path(model_dir) / "config.pbtxt"))


def write_as_model(model_dir: str | os.PathLike[str], name: str, cfg: ModelConfig) -> tuple[Path, str]:
    """A new model ``name`` next to ``model_dir``: its versions copied, ``cfg`` (renamed) as its config
    (:meth:`tritonkit.repository.ModelRepository.clone_model`: whole or not at all)."""
    renamed = dataclasses.replace(cfg, name=name)
    text = _valid_text(renamed)
    repository, source = _repository(model_dir)
    old = (Path(model_dir) / "config.pbtxt").read_text(encoding="utf-8")
    target = repository.clone_model(source, name, renamed, writer=WRITER)
    return target, _diff(old, text, str(target / "config.pbtxt"))
