"""The shape-bucket description every runner, the client and the build share (backends/runners/shape_buckets.py)."""

from __future__ import annotations

import pytest

from tritonkit.backends.runners.shape_buckets import (
    BucketError,
    Buckets,
    TooLongError,
    default_edges,
    edge_for,
    edges_from_lengths,
    padded_share,
    plan_groups,
    token_cost,
)

TEXT = Buckets(
    axes={"seq": (32, 64, 128, 256)},
    inputs={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"}},
    outputs={"hidden": {1: "seq"}},
    pad={"input_ids": 0},
)


def test_parameter_round_trips() -> None:
    assert Buckets.parse(TEXT.to_json()) == TEXT
    assert Buckets.parse("") is None


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[1]", "JSON object"),
        ('{"axes": {"seq": [64, 32]}, "inputs": {"x": {"1": "seq"}}}', "ascending"),
        ('{"axes": {"seq": [32]}, "inputs": {"x": {"0": "seq"}}}', "0 is the batch"),
        ('{"axes": {"seq": [32]}, "inputs": {"x": {"1": "len"}}}', "expected one of seq"),
        ('{"axes": {"seq": [32]}, "inputs": {}}', "at least one input"),
        ('{"axes": {"seq": [32]}, "inputs": {"x": {"1": "seq"}}, "pad_at": "gpu"}', "server or client"),
    ],
)
def test_malformed_parameter_is_one_line(text: str, names: str) -> None:
    with pytest.raises(BucketError, match=names) as caught:
        Buckets.parse(text)
    assert "\n" not in str(caught.value)


def test_lengths_edges_and_refusals() -> None:
    lengths = TEXT.lengths({"input_ids": (1, 40), "attention_mask": (1, 40)})
    assert lengths == {"seq": 40}
    assert TEXT.edges_for(lengths) == (64,)
    assert TEXT.padded_shape("input_ids", (3, 40), (64,)) == (3, 64)
    assert TEXT.cut("hidden", lengths) == ((1, 40),)
    with pytest.raises(TooLongError, match="at most 256"):
        TEXT.lengths({"input_ids": (1, 257)})
    with pytest.raises(BucketError, match="disagree on axis seq: 40 and 41"):
        TEXT.lengths({"input_ids": (1, 40), "attention_mask": (1, 41)})


def test_edges() -> None:
    assert edge_for(33, (32, 64)) == 64
    assert default_edges(512) == (16, 32, 64, 128, 256, 512)
    assert default_edges(100, 32) == (32, 64, 100)
    mix = [10] * 50 + [50] * 30 + [150] * 15 + [250] * 5
    edges = edges_from_lengths(mix, 256)
    assert edges[-1] == 256 and list(edges) == sorted(set(edges))
    assert padded_share(mix, edges) < padded_share(mix, (256,))


def test_plan_groups_merges_only_when_cheaper() -> None:
    # A launch costs nothing: every length runs in its own bucket.
    free = plan_groups([(1, (32,)), (1, (64,)), (1, (64,))], token_cost(0))
    assert free == [((32,), [0]), ((64,), [1, 2])]
    # A launch costs more than padding one short row up: it joins the longer group.
    dear = plan_groups([(1, (32,)), (1, (64,)), (1, (64,))], token_cost(1000))
    assert dear == [((64,), [0, 1, 2])]
