"""Shape buckets on the client side: a model whose config carries the parameter ``shape_buckets``
(:mod:`tritonkit.backends.runners.shape_buckets`, the description the build writes) takes each dynamic
axis up to its last edge; a longer request is refused here, before any bytes are sent, in one line
naming the input, its length and the longest (:class:`InputTooLongError`). Where the config says
``pad_at: client`` (engines that take no ragged input: TensorRT), the request's inputs are padded up
to their edge with the pad values (:func:`pad_request`), so Triton batches the requests of one bucket
together, and the outputs that carry the axis are cut back to the request's own length
(:func:`cut_outputs`). :class:`~tritonkit.client.Client`, :class:`~tritonkit.client.AsyncClient`
(``client.ops``), the Locust users and the measuring generator call these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tritonclient.grpc import model_config_pb2

from tritonkit.backends.runners.shape_buckets import PARAMETER, BucketError, Buckets, TooLongError
from tritonkit.client.errors import InvalidInputError, UnexpectedAnswerError

__all__ = [
    "BucketError",
    "Buckets",
    "InputTooLongError",
    "TooLongError",
    "buckets_of",
    "cut_outputs",
    "pad_request",
    "request_lengths",
]


class InputTooLongError(InvalidInputError):
    """A request longer than the model's last shape bucket on an axis, refused before sending."""


def buckets_of(config: model_config_pb2.ModelConfig, where: str = "the model") -> Buckets | None:
    """The buckets a served config carries (None without the parameter); a malformed value is an
    :class:`UnexpectedAnswerError` naming the model (its config is not what the build writes)."""
    if PARAMETER not in config.parameters:
        return None
    try:
        return Buckets.parse(config.parameters[PARAMETER].string_value)
    except BucketError as exc:
        raise UnexpectedAnswerError(f"{where}'s config: {exc}") from None


def request_lengths(feeds: Mapping[str, Any], buckets: Buckets, where: str = "") -> dict[str, int]:
    """Each bucketed axis's length in one request; :class:`InputTooLongError` above the last edge,
    :class:`InvalidInputError` when inputs sharing an axis disagree (``where`` prefixes the line)."""
    shapes = {name: np.shape(feeds[name]) for name in buckets.inputs if name in feeds}
    prefix = f"{where}: " if where else ""
    try:
        return buckets.lengths(shapes)
    except TooLongError as exc:
        raise InputTooLongError(f"{prefix}{exc}") from None
    except BucketError as exc:
        raise InvalidInputError(f"{prefix}{exc}") from None


def pad_request(
    feeds: Mapping[str, Any], buckets: Buckets, where: str = ""
) -> tuple[dict[str, Any], dict[str, int]]:
    """``feeds`` with every input that carries a bucketed axis padded up to the request's edge (its
    pad value at the end of the axis), and the request's own lengths to cut the answer back to
    (:func:`cut_outputs`). Inputs already at their edge are passed as they are (no copy)."""
    lengths = request_lengths(feeds, buckets, where)
    edges = buckets.edges_for(lengths)
    padded = dict(feeds)
    for name in buckets.inputs:
        if name not in feeds:
            continue
        array = np.asarray(feeds[name])
        shape = buckets.padded_shape(name, array.shape, edges)
        if shape != array.shape:
            widths = [(0, want - have) for have, want in zip(array.shape, shape, strict=True)]
            value = buckets.pad_value(name)
            padded[name] = np.pad(array, widths, constant_values=np.array(value).astype(array.dtype))
    return padded, lengths


def cut_outputs(
    outputs: dict[str, NDArray[Any]], buckets: Buckets, lengths: Mapping[str, int]
) -> dict[str, NDArray[Any]]:
    """Every output that carries a bucketed axis cut back to the request's own length on it."""
    for name, array in outputs.items():
        cuts = buckets.cut(name, lengths)
        if cuts:
            index = [slice(None)] * array.ndim
            for axis, length in cuts:
                if axis < array.ndim:
                    index[axis] = slice(0, length)
            outputs[name] = array[tuple(index)]
    return outputs
