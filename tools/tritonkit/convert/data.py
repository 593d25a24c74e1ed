"""Calibration and evaluation data: the bundled English text corpus, text encoding with a
``tokenizers`` tokenizer, ``.npz`` tensor files, seeded synthetic images, and batching into feed dicts.

Everything here returns plain NumPy feed dicts (``{input name: array}``); the precision and accuracy
modules never see where the data came from. Bad data raises :class:`CalibrationError` in one line.
"""

from __future__ import annotations

import random
import re
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from pydoc_data import topics
from typing import Any

import numpy as np
from numpy.typing import NDArray

from tritonkit.errors import CalibrationError

__all__ = [
    "Feeds",
    "TextEncoder",
    "batch_arrays",
    "corpus_split",
    "english_sentences",
    "load_npz",
    "load_text_lines",
    "synthetic_images",
]

Feeds = dict[str, NDArray[Any]]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def english_sentences() -> list[str]:
    """Distinct English sentences from CPython's language-reference topics, in a seeded order.

    ``pydoc_data.topics`` ships with every CPython, so calibration needs no download. Sentences are
    de-duplicated before shuffling, which is what keeps calibration and evaluation disjoint.
    """

    found: set[str] = set()
    for page in topics.topics.values():
        for paragraph in re.split(r"\n\s*\n", page):
            flat = " ".join(paragraph.split())
            for sentence in _SENTENCE_END.split(flat):
                # Prose only: code listings and tables are mostly punctuation.
                if 30 <= len(sentence) <= 400 and sum(c.isalpha() for c in sentence) > 0.6 * len(sentence):
                    found.add(sentence)
    ordered = sorted(found)
    random.Random(0).shuffle(ordered)
    return ordered


def corpus_split(sentences: Sequence[str], calibration: int, evaluation: int) -> tuple[list[str], list[str]]:
    """First ``calibration`` sentences for calibration, the last ``evaluation`` for evaluation.

    Raises CalibrationError when the corpus cannot give both without overlap.
    """
    unique = list(dict.fromkeys(sentences))
    if calibration + evaluation > len(unique):
        raise CalibrationError(
            f"text corpus too small: expected at least {calibration + evaluation} distinct sentences "
            f"({calibration} calibration + {evaluation} evaluation), got {len(unique)}"
        )
    cal = unique[:calibration]
    ev = unique[len(unique) - evaluation :]
    return cal, ev


def load_text_lines(path: str | Path) -> list[str]:
    """Non-empty lines of a UTF-8 text file (one sample per line)."""
    file = Path(path)
    if not file.is_file():
        raise CalibrationError(
            f"calibration data not found: {str(file)!r}; expected a text file, one sample per line"
        )
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CalibrationError(
            f"calibration data {str(file)!r} is not UTF-8 text; expected one sample per line"
        ) from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def load_npz(path: str | Path, input_names: Sequence[str]) -> dict[str, NDArray[Any]]:
    """Arrays named after the model inputs from an ``.npz`` file, all with the same sample count."""
    file = Path(path)
    if not file.is_file():
        raise CalibrationError(f"calibration data not found: {str(file)!r}; expected an .npz file")
    try:
        # Opened here, not by np.load: it leaks its handle when the archive is corrupt.
        with file.open("rb") as handle, np.load(handle, allow_pickle=False) as archive:
            arrays = {name: np.asarray(archive[name]) for name in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise CalibrationError(
            f"calibration data {str(file)!r} is corrupt ({type(exc).__name__}); expected an .npz archive"
        ) from None
    missing = [name for name in input_names if name not in arrays]
    if missing:
        raise CalibrationError(
            f"calibration data {str(file)!r} lacks inputs {missing}; expected arrays {list(input_names)}, "
            f"got {sorted(arrays)}"
        )
    counts = {name: arrays[name].shape[0] if arrays[name].ndim else 0 for name in input_names}
    if len(set(counts.values())) != 1:
        raise CalibrationError(f"calibration arrays in {str(file)!r} differ in sample count: {counts}")
    return {name: arrays[name] for name in input_names}


def batch_arrays(arrays: dict[str, NDArray[Any]], batch_size: int) -> list[Feeds]:
    """Split sample-major arrays into feed dicts of at most ``batch_size`` samples."""
    count = next(iter(arrays.values())).shape[0]
    return [
        {name: np.ascontiguousarray(value[i : i + batch_size]) for name, value in arrays.items()}
        for i in range(0, count, batch_size)
    ]


def synthetic_images(count: int, shape: Sequence[int], seed: int) -> NDArray[Any]:
    """Seeded, ImageNet-normalised-looking FP32 images (N, C, H, W) for the synthetic classifier."""
    rng = np.random.default_rng(seed)
    # Smooth low-frequency structure plus noise, so activations resemble real images more than white noise.
    base = rng.standard_normal((count, shape[0], 8, 8)).astype(np.float32)
    block = np.ones((1, 1, -(-shape[1] // 8), -(-shape[2] // 8)), dtype=np.float32)
    smooth = np.kron(base, block)[:, :, : shape[1], : shape[2]]
    return (smooth + 0.3 * rng.standard_normal((count, *shape)).astype(np.float32)).astype(np.float32)


@dataclass
class TextEncoder:
    """Tokenizes sentences into the encoder's feeds, as the text-embedding runner does server-side."""

    tokenizer_file: Path
    max_seq_length: int = 256

    def __post_init__(self) -> None:
        from tokenizers import Tokenizer  # noqa: PLC0415 (optional (models extra))

        self._tokenizer: Any = Tokenizer.from_file(str(self.tokenizer_file))
        padding = self._tokenizer.padding or {}
        self._pad_id = int(padding.get("pad_id", 0))
        self._pad_token = str(padding.get("pad_token", "[PAD]"))
        self._tokenizer.enable_truncation(self.max_seq_length)

    def encode(self, sentences: Sequence[str], pad_to: int | None = None) -> Feeds:
        """Feeds for one batch, padded to the longest sentence (or to ``pad_to`` tokens)."""
        self._tokenizer.enable_padding(pad_id=self._pad_id, pad_token=self._pad_token, length=pad_to)
        encodings = self._tokenizer.encode_batch(list(sentences))
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }

    def batches(
        self, sentences: Sequence[str], batch_size: int, pad_to: int | None = None
    ) -> Iterator[Feeds]:
        for i in range(0, len(sentences), batch_size):
            yield self.encode(sentences[i : i + batch_size], pad_to=pad_to)

    def longest(self, sentences: Sequence[str]) -> int:
        """Token count of the longest sentence after truncation."""
        self._tokenizer.no_padding()
        return max((len(e.ids) for e in self._tokenizer.encode_batch(list(sentences))), default=1)
