"""More architectures as `source.torch` entry points, beside tests/support/torch_zoo.py: transformers'
RoBERTa, ALBERT, ELECTRA, GPT-2, the T5 encoder, Swin, DeiT, CLIP's vision tower, Wav2Vec2 and
Whisper's encoder, and LSTM / GRU text classifiers. The transformers models are passed as they are
(no wrapper): their `ModelOutput` is read by output name, their inputs go by keyword, GPT-2 with
`use_cache=False`. Each family at a test size (`small`) and the reference model's size (`full`);
random weights (seeded). Data for any family: :func:`arrays`, from the entry point's example inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import transformers as tf
from torch import nn

from tritonkit.convert.graph.export import TorchSource

__all__ = ["FAMILIES", "arrays", "source"]

SEED = 0
_TEXT_AXES = {"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}}


def _text(
    module: nn.Module, outputs: tuple[str, ...], full: bool, vocab: int, mask: bool = True
) -> TorchSource:
    seq = 128 if full else 16
    ids = torch.randint(1, vocab, (2, seq))
    inputs = (ids, torch.ones_like(ids)) if mask else (ids,)
    names = ("input_ids", "attention_mask") if mask else ("input_ids",)
    axes: dict[str, dict[int, str]] = {n: dict(_TEXT_AXES[n]) for n in names}
    axes.update({o: {1: "sequence"} for o in outputs if o in ("last_hidden_state", "logits")})
    return TorchSource(module.eval(), inputs, names, outputs, axes)


def _image(module: nn.Module, outputs: tuple[str, ...], size: int) -> TorchSource:
    return TorchSource(module.eval(), (torch.randn(2, 3, size, size),), ("pixel_values",), outputs)


def _encoder(full: bool, model: Any, config: Any, **small: Any) -> nn.Module:
    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    return model(config() if full else config(vocab_size=1000, max_position_embeddings=64, **sizes, **small))  # type: ignore[no-any-return]


def roberta_source(full: bool) -> TorchSource:
    module = _encoder(full, tf.RobertaModel, tf.RobertaConfig)
    return _text(module, ("last_hidden_state",), full, 50265 if full else 1000)


def albert_source(full: bool) -> TorchSource:  # one layer's weights shared by every layer
    module = _encoder(full, tf.AlbertModel, tf.AlbertConfig, embedding_size=16)
    return _text(module, ("pooler_output",), full, 30000 if full else 1000)


def electra_source(full: bool) -> TorchSource:
    module = _encoder(full, tf.ElectraModel, tf.ElectraConfig, embedding_size=16)
    return _text(module, ("last_hidden_state",), full, 30522 if full else 1000)


def gpt2_source(full: bool) -> TorchSource:  # forward(input_ids, past_key_values, ...): by keyword
    small = {"vocab_size": 1000, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 64}
    config = tf.GPT2Config(use_cache=False, **({} if full else small))
    return _text(tf.GPT2LMHeadModel(config), ("logits",), full, config.vocab_size)


def t5_encoder_source(full: bool) -> TorchSource:
    small = {"vocab_size": 1000, "d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 2, "num_heads": 2}
    config = tf.T5Config(
        **({"d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8} if full else small)
    )
    return _text(tf.T5EncoderModel(config), ("last_hidden_state",), full, config.vocab_size)


def swin_source(full: bool) -> TorchSource:
    small = {"image_size": 32, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 2],
             "window_size": 4, "num_labels": 10}  # fmt: skip
    config = tf.SwinConfig(num_labels=1000) if full else tf.SwinConfig(**small)
    return _image(tf.SwinForImageClassification(config), ("logits",), config.image_size)


def _vit_like(full: bool, model: Any, config: Any, outputs: tuple[str, ...]) -> TorchSource:
    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    cfg = (
        config(**({"patch_size": 32} if config is tf.CLIPVisionConfig and full else {}))
        if full
        else (config(image_size=32, patch_size=8, **sizes))
    )
    return _image(model(cfg), outputs, cfg.image_size)


def deit_source(full: bool) -> TorchSource:
    return _vit_like(full, tf.DeiTModel, tf.DeiTConfig, ("pooler_output",))


def clip_vision_source(full: bool) -> TorchSource:
    return _vit_like(full, tf.CLIPVisionModel, tf.CLIPVisionConfig, ("last_hidden_state", "pooler_output"))


def wav2vec2_source(full: bool) -> TorchSource:  # weight_norm (a parametrization): not picklable
    small = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
             "conv_dim": (16, 16), "conv_stride": (5, 2), "conv_kernel": (10, 3),
             "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 2}  # fmt: skip
    module = tf.Wav2Vec2Model(tf.Wav2Vec2Config(**({} if full else small))).eval()
    samples = 16000 if full else 1600
    axes = {"input_values": {1: "samples"}, "last_hidden_state": {1: "frames"}}
    return TorchSource(module, (torch.randn(2, samples),), ("input_values",), ("last_hidden_state",), axes)


def whisper_encoder_source(full: bool) -> TorchSource:  # input_features [batch, 80, 3000]: fixed
    small = {"d_model": 32, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
             "decoder_layers": 1, "decoder_attention_heads": 2, "decoder_ffn_dim": 64}  # fmt: skip
    base = {"d_model": 512, "encoder_layers": 6, "encoder_attention_heads": 8, "encoder_ffn_dim": 2048}
    module = tf.WhisperModel(tf.WhisperConfig(**(base if full else small))).get_encoder().eval()
    return TorchSource(module, (torch.randn(2, 80, 3000),), ("input_features",), ("last_hidden_state",))


class RNNClassifier(nn.Module):
    """Embedding, a batch-first nn.LSTM or nn.GRU, a linear head on the last step."""

    def __init__(self, rnn: type[nn.LSTM] | type[nn.GRU], vocab: int, dim: int, layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.rnn = rnn(dim, dim, num_layers=layers, batch_first=True)
        self.head = nn.Linear(dim, 4)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embedding(input_ids))
        return self.head(out[:, -1])  # type: ignore[no-any-return]


def _rnn(rnn: type[nn.LSTM] | type[nn.GRU]) -> Callable[[bool], TorchSource]:
    def build(full: bool) -> TorchSource:
        module = RNNClassifier(rnn, 30522, 512, 2) if full else RNNClassifier(rnn, 1000, 32, 2)
        return _text(module, ("y",), full, 30522 if full else 1000, mask=False)

    return build


#: family -> (builder, where the architecture comes from)
FAMILIES: dict[str, tuple[Callable[[bool], TorchSource], str]] = {
    "roberta": (roberta_source, "transformers"),
    "albert": (albert_source, "transformers"),
    "electra": (electra_source, "transformers"),
    "gpt2": (gpt2_source, "transformers"),
    "t5_encoder": (t5_encoder_source, "transformers"),
    "swin": (swin_source, "transformers"),
    "deit": (deit_source, "transformers"),
    "clip_vision": (clip_vision_source, "transformers"),
    "wav2vec2": (wav2vec2_source, "transformers"),
    "whisper_encoder": (whisper_encoder_source, "transformers"),
    "lstm": (_rnn(nn.LSTM), "tests/support/torch_zoo_more.py"),
    "gru": (_rnn(nn.GRU), "tests/support/torch_zoo_more.py"),
}


def source(name: str, full: bool = False) -> TorchSource:
    torch.manual_seed(SEED)
    return FAMILIES[name][0](full)


def arrays(built: TorchSource, count: int, seed: int) -> dict[str, np.ndarray]:
    """``count`` samples for every input of ``built``, shaped as its examples: token ids below the
    examples' largest id, attention masks with half the samples padded, noise for float inputs."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, example in zip(built.input_names, built.example_inputs, strict=True):
        shape = (count, *example.shape[1:])
        if example.is_floating_point():
            out[name] = rng.standard_normal(shape).astype(np.float32)
        elif "mask" in name:
            mask = np.ones(shape, dtype=np.int64)
            mask[: count // 2, shape[1] * 3 // 4 :] = 0
            out[name] = mask
        else:
            out[name] = rng.integers(1, int(example.max()) + 1, shape, dtype=np.int64)
    return out


def __getattr__(name: str) -> Callable[[], TorchSource]:
    """`source.torch: "tests.support.torch_zoo_more:<family>"` (test size) or `full_<family>`."""
    family = name.removeprefix("full_")
    if family not in FAMILIES:
        raise AttributeError(name)
    return lambda: source(family, full=name.startswith("full_"))
