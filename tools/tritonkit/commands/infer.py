"""``tritonkit infer``: send one inference request and print the outputs (or write them as ``.npy``).

Inputs come from ``--input NAME=FILE.npy`` (repeatable) or, for a model with exactly one BYTES input
(e.g. the MiniLM text models, ``TEXT`` dims [1]), from ``--text "..."``, which becomes a one-element
BYTES tensor of the model's shape ([1, 1] when it batches). Outputs are printed (name, dtype, shape,
values truncated) or, with ``--output-dir``, written as ``<name>.npy`` only after the request
succeeded, each through a temporary file renamed into place.
"""

from __future__ import annotations

import argparse
import io
import math
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tritonkit.atomic import write_bytes
from tritonkit.client import Client, ModelMetadata
from tritonkit.commands.client_args import add_client_arguments, client_of
from tritonkit.errors import ClientError


def register(parser: argparse.ArgumentParser) -> None:
    add_client_arguments(parser)
    parser.add_argument("--model", required=True, help="model name")
    parser.add_argument("--model-version", type=int, help="model version (default: the server's choice)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="input tensor (repeatable)")
    source.add_argument("--text", help="text for a model with one BYTES input")
    parser.add_argument("--output", action="append", metavar="NAME", help="only these outputs (repeatable)")
    parser.add_argument("--output-dir", type=Path, help="write <name>.npy files here instead of printing")
    parser.set_defaults(func=run)


def read_inputs(specs: list[str]) -> dict[str, NDArray[Any]]:
    inputs: dict[str, NDArray[Any]] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise ClientError(f"--input expects NAME=FILE.npy, given {spec!r}")
        path = Path(file)
        if not path.is_file():
            raise ClientError(f"input file {path} for `{name}` not found; expected a .npy file")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise ClientError(f"input file {path} for `{name}` is not a readable .npy file ({exc})") from None
    return inputs


def text_input(meta: ModelMetadata, text: str) -> dict[str, NDArray[Any]]:
    byte_inputs = [t for t in meta.inputs if t.datatype == "BYTES"]
    if len(byte_inputs) != 1 or len(meta.inputs) != 1:
        given = ", ".join(f"`{t.name}` {t.datatype}" for t in meta.inputs)
        raise ClientError(
            f"--text needs a model with exactly one BYTES input; model `{meta.name}` has {given}"
        )
    tensor = byte_inputs[0]
    shape = tuple(1 if d == -1 else d for d in tensor.shape)
    if math.prod(shape) != 1:
        raise ClientError(
            f"--text fills one element, but input `{tensor.name}` of `{meta.name}` has shape "
            f"{list(tensor.shape)}; use --input {tensor.name}=FILE.npy"
        )
    return {tensor.name: np.array([text.encode()], dtype=object).reshape(shape)}


def describe(name: str, array: NDArray[Any]) -> str:
    shown = array
    if array.dtype == object:
        shown = np.vectorize(
            lambda v: v.decode(errors="replace") if isinstance(v, bytes) else v, otypes=[object]
        )(array)
    values = np.array2string(shown, threshold=20, edgeitems=3, max_line_width=110)
    dtype = "BYTES" if array.dtype == object else str(array.dtype)
    return f"{name}  dtype={dtype}  shape={list(array.shape)}\n{values}"


def _savable(array: NDArray[Any]) -> NDArray[Any]:
    # Object arrays would be pickled by np.save; BYTES become a fixed-width bytes array instead.
    if array.dtype == object:
        return np.array([bytes(v) for v in array.reshape(-1)], dtype=np.bytes_).reshape(array.shape)
    return array


def write_outputs(outputs: dict[str, NDArray[Any]], directory: Path) -> list[Path]:
    """Each output as ``<name>.npy``, every array serialised before the first file is written."""
    directory.mkdir(parents=True, exist_ok=True)
    encoded = {}
    for name, array in outputs.items():
        buffer = io.BytesIO()
        np.save(buffer, _savable(array), allow_pickle=False)
        encoded[name] = buffer.getvalue()
    return [write_bytes(directory / f"{name}.npy", data) for name, data in encoded.items()]


def run(args: argparse.Namespace) -> int:
    with client_of(args) as client:
        outputs = infer_once(client, args)
    if args.output_dir is not None:
        for path in write_outputs(outputs, args.output_dir):
            print(path)
    else:
        print("\n".join(describe(name, array) for name, array in outputs.items()))
    return 0


def infer_once(client: Client, args: argparse.Namespace) -> dict[str, NDArray[Any]]:
    if args.text is not None:
        inputs = text_input(client.metadata(args.model, args.model_version), args.text)
    else:
        inputs = read_inputs(args.input)
    return client.infer(args.model, inputs, outputs=args.output, version=args.model_version)
