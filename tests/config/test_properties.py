"""Properties: any generated valid ModelConfig survives ``to_pbtxt`` -> ``from_pbtxt`` unchanged, and
any text given to ``from_pbtxt`` is a ModelConfig or one ``ConfigError`` line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tritonkit import config
from tritonkit.config import (
    TRITON_DTYPES,
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
)
from tritonkit.errors import ConfigError

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)
DIMS = st.lists(st.integers(1, 4096) | st.just(-1), min_size=1, max_size=4)
INT32 = st.integers(0, 2**31 - 1)
UINT64 = st.integers(0, 2**63 - 1)


@st.composite
def tensors(draw: st.DrawFn, prefix: str) -> list[TensorConfig]:
    count = draw(st.integers(1, 3))
    return [
        TensorConfig(
            f"{prefix}{i}_{draw(NAMES)}",
            draw(st.sampled_from(TRITON_DTYPES)),
            draw(DIMS),
            optional=draw(st.booleans()) if prefix == "IN" else False,
        )
        for i in range(count)
    ]


QUEUES = st.builds(
    QueuePolicy,
    max_queue_size=INT32,
    default_timeout_microseconds=UINT64,
    allow_timeout_override=st.booleans(),
    timeout_action=st.sampled_from(["REJECT", "DELAY"]),
)


@st.composite
def batchers(draw: st.DrawFn) -> DynamicBatching:
    levels = draw(st.integers(0, 4))
    return DynamicBatching(
        max_queue_delay_microseconds=draw(UINT64),
        preferred_batch_size=draw(st.lists(st.integers(1, 64), max_size=3)),
        preserve_ordering=draw(st.booleans()),
        priority_levels=levels,
        default_priority_level=draw(st.integers(1, levels)) if levels else 0,
        default_queue_policy=draw(st.none() | QUEUES),
    )


GROUPS = st.builds(
    InstanceGroup,
    kind=st.sampled_from(["KIND_CPU", "KIND_GPU", "KIND_AUTO"]),
    count=st.integers(1, 8),
)
POLICIES = st.sampled_from(
    [None, VersionPolicy.all(), VersionPolicy.latest(2), VersionPolicy.specific([1, 3])]
)


@st.composite
def model_configs(draw: st.DrawFn) -> ModelConfig:
    return ModelConfig(
        draw(NAMES),
        backend=draw(st.sampled_from(["python", "onnxruntime", "tensorrt"])),
        max_batch_size=draw(st.integers(0, 256)),
        inputs=draw(tensors("IN")),
        outputs=draw(tensors("OUT")),
        dynamic_batching=draw(st.none() | batchers()),
        instance_groups=draw(st.lists(GROUPS, max_size=2)),
        version_policy=draw(POLICIES),
        parameters=draw(st.dictionaries(NAMES, st.text(max_size=10), max_size=3)),
        response_cache=draw(st.booleans()),
    )


@settings(max_examples=150, deadline=None)
@given(model_configs())
def test_pbtxt_round_trip_is_identity(cfg: ModelConfig) -> None:
    assert config.from_pbtxt(config.to_pbtxt(cfg)) == cfg


@settings(max_examples=150, deadline=None)
@given(
    st.text(max_size=200)
    | st.builds(
        "".join,
        st.lists(
            st.sampled_from(
                [
                    'name: "m"',
                    "max_batch_size:",
                    " 8",
                    " -1",
                    "input",
                    " [",
                    " ]",
                    " {",
                    " }",
                    " data_type: TYPE_FP32",
                    " dims:",
                    " TYPE_BOGUS",
                    "\n",
                    '"',
                    "dynamic_batching",
                    " 99999999999999999999",
                ]
            ),
            max_size=20,
        ),
    )
)
def test_any_text_is_a_config_or_one_line_error(text: str) -> None:
    try:
        config.from_pbtxt(text)
    except ConfigError as error:
        assert str(error) and "\n" not in str(error), repr(str(error))
