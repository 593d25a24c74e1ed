"""Validation before sending, from the real server's metadata/config: every refusal says expected vs given
and nothing reaches the wire (the client's attempt counter does not move)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tritonkit import TritonKitError
from tritonkit.client import Client, InvalidArgumentError, InvalidInputError
from tritonkit.client.spec import _lossless

F32 = np.float32


def _refused(
    client: Client, model: str, inputs: dict[str, Any], match: str, **kwargs: Any
) -> InvalidInputError:
    client.metadata(model)  # cache first, so the counter below sees inference attempts only
    before = client.stats.attempts
    with pytest.raises(InvalidInputError, match=match) as info:
        client.infer(model, inputs, **kwargs)
    assert client.stats.attempts == before, "a refused request must not be sent"
    assert isinstance(info.value, InvalidArgumentError) and isinstance(info.value, TritonKitError)
    assert "\n" not in str(info.value)
    return info.value


def test_unknown_input_name(client: Client) -> None:
    _refused(
        client, "add", {"Z": np.ones((1, 4), F32)}, r"unknown input `Z` for model `add`; expected \{`X`\}"
    )


def test_missing_input(client: Client) -> None:
    _refused(
        client,
        "pair",
        {"A": np.ones((1, 3), F32)},
        r"missing input `B` for model `pair`; expected \{`A`, `B`\}, given \{`A`\}",
    )


def test_dtype_mismatch(client: Client) -> None:
    _refused(
        client,
        "add",
        {"X": np.ones((1, 4), np.float64)},
        r"input `X` of model `add` expects FP32 \(float32\), given float64",
    )


def test_dtype_mismatch_suggests_lossless_cast(client: Client) -> None:
    _refused(
        client,
        "fixed",
        {"A": np.ones((2, 3), np.int32)},
        r"expects INT64 \(int64\), given int32; pass safe_cast=True",
    )


def test_safe_cast_only_when_lossless(server: Any, protocol: str, url: str) -> None:
    with Client(url, protocol, safe_cast=True) as c:
        a = np.arange(6, dtype=np.int32).reshape(2, 3)
        np.testing.assert_array_equal(c.infer("fixed", {"A": a})["Z"], (a + a).astype(np.int64))
        x16 = np.ones((1, 4), np.float16)
        assert c.infer("add", {"X": x16})["Y"].dtype == np.float32
        # float64 -> float32 and int64 -> float32 lose precision: refused even with safe_cast
        _refused(c, "add", {"X": np.ones((1, 4), np.float64)}, "expects FP32 \\(float32\\), given float64$")
        _refused(c, "add", {"X": np.ones((1, 4), np.int64)}, "expects FP32 \\(float32\\), given int64$")


def test_lossless_table() -> None:
    d = np.dtype
    assert _lossless(d("int16"), d("float32"))
    assert _lossless(d("int32"), d("float64"))
    assert not _lossless(d("int32"), d("float32"))
    assert not _lossless(d("int64"), d("float64"))  # numpy calls it "safe"; 2**53 + 1 says otherwise
    assert _lossless(d("uint8"), d("int16"))
    assert not _lossless(d("uint64"), d("int64"))
    assert not _lossless(d("float32"), d("float16"))


def test_rank_mismatch_mentions_batch_dimension(client: Client) -> None:
    _refused(
        client,
        "add",
        {"X": np.ones(4, F32)},
        r"input `X` of model `add` expects rank 2 \(shape \[-1, 4\]\), given rank 1 \(shape \[4\]\) .* prepend a batch",
    )


def test_dim_fixed_by_model(client: Client) -> None:
    _refused(
        client,
        "add",
        {"X": np.ones((2, 5), F32)},
        r"expects shape \[-1, 4\], given \[2, 5\] \(dim 1 must be 4\)",
    )
    _refused(
        client,
        "fixed",
        {"A": np.ones((3, 3), np.int64)},
        r"expects shape \[2, 3\], given \[3, 3\] \(dim 0 must be 2\)",
    )


def test_batch_above_max_batch_size(client: Client) -> None:
    _refused(
        client, "add", {"X": np.ones((9, 4), F32)}, r"batch of 9 is above model `add`'s max_batch_size 8"
    )


def test_inputs_must_share_batch(client: Client) -> None:
    _refused(
        client,
        "pair",
        {"A": np.ones((2, 3), F32), "B": np.ones((3, 3), F32)},
        r"must share the batch size; `B` has 3, expected 2",
    )


def test_unknown_output_name(client: Client) -> None:
    _refused(
        client,
        "pair",
        {"A": np.ones((1, 3), F32), "B": np.ones((1, 3), F32)},
        r"unknown output `MEAN` for model `pair`; expected some of `SUM`, `DIFF`",
        outputs=["MEAN"],
    )


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("hello", r"expects a list or array of str/bytes .* given a single str"),
        (np.ones((1, 1), F32), r"expects BYTES \(str/bytes\), given float32"),
        ([1, 2], r"expects str or bytes elements, given an element of type int"),
        (["a", None], r"expects str or bytes elements, given an element of type NoneType"),
        (["ok", "\ud800"], r"input `TEXT` of .*: element 1 is not valid UTF-8 text"),
        (42, r"expects BYTES as list\[str\], list\[bytes\] or an object array, given int"),
    ],
)
def test_bytes_input_checks(client: Client, value: Any, match: str) -> None:
    _refused(client, "echo", {"TEXT": value}, match)


def test_numeric_input_must_be_array(client: Client) -> None:
    _refused(
        client, "add", {"X": [[1.0, 2.0, 3.0, 4.0]]}, r"expects a numpy array of FP32 \(float32\), given list"
    )


def test_infer_batch_bad_batch_size(client: Client) -> None:
    with pytest.raises(InvalidInputError, match=r"`batch_size` for model `add` must be 1..8 .* given 9"):
        client.infer_batch("add", {"X": np.ones((20, 4), F32)}, batch_size=9)


def test_inputs_must_be_a_mapping(client: Client) -> None:
    _refused(client, "add", [np.ones((1, 4), F32)], r"inputs of model `add` must be a mapping .* given list")  # type: ignore[arg-type]


def test_infer_batch_needs_a_batch_dimension(client: Client) -> None:
    with pytest.raises(
        InvalidInputError, match=r"needs arrays or lists with a batch dimension, given `X`: float"
    ):
        client.infer_batch("add", {"X": 1.0})
