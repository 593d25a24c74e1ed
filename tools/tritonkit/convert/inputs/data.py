"""Calibration and evaluation data: the bundled English text corpus, text encoding with a
``tokenizers`` tokenizer, ``.npz``/``.npy`` tensor files and how they fit a model's inputs (names,
dtypes with value-preserving casts, shapes, sample counts, per-sample digests for overlap checks),
seeded synthetic images, and batching into feed dicts.

Everything here returns plain NumPy feed dicts (``{input name: array}``); the precision and accuracy
modules never see where the data came from. Bad data raises :class:`CalibrationError` in one line.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from pydoc_data import topics
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

from tritonkit.config.dtypes import triton_to_numpy
from tritonkit.config.tensors import TensorSpec
from tritonkit.errors import CalibrationError

__all__ = [
    "Feeds",
    "TextEncoder",
    "batch_arrays",
    "corpus_split",
    "english_sentences",
    "fit_arrays",
    "load_text_lines",
    "read_arrays",
    "sample_digests",
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


_NPZ_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"


def read_arrays(path: str | Path, section: str = "calibration") -> dict[str, NDArray[Any]]:
    """Every array of an ``.npz`` archive (or the one array of an ``.npy`` file, named ``""``).

    CalibrationError in one line naming the file when it is missing, of another kind (a text file
    named ``.npz``: its first bytes are quoted, not numpy's pickle message), or corrupt.
    """
    file = Path(path)
    if not file.is_file():
        raise CalibrationError(f"{section} data not found: {str(file)!r}; expected an .npz file")
    if file.suffix not in (".npz", ".npy"):
        raise CalibrationError(
            f"{section} data {str(file)!r}: expected an .npz file of input arrays (or .npy for one input)"
        )
    with file.open("rb") as handle:
        head = handle.read(16)
    magic = _NPZ_MAGIC if file.suffix == ".npz" else _NPY_MAGIC
    if not head.startswith(magic):
        kind = "an .npz archive (numpy.savez)" if file.suffix == ".npz" else "a .npy array (numpy.save)"
        raise CalibrationError(f"{section} data {str(file)!r} is not {kind}: it starts with {head[:12]!r}")
    try:
        # Opened here, not by np.load: it leaks its handle when the archive is corrupt.
        with file.open("rb") as handle:
            if file.suffix == ".npy":
                _check_declared(handle, file.stat().st_size, section, file, "")
                handle.seek(0)
                return {"": np.load(handle, allow_pickle=False)}
            with zipfile.ZipFile(handle) as members:  # each member's header against its bytes first
                for info in members.infolist():
                    with members.open(info) as member:
                        _check_declared(member, info.file_size, section, file, info.filename)
            handle.seek(0)
            with np.load(handle, allow_pickle=False) as archive:
                return {name: np.asarray(archive[name]) for name in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, MemoryError) as exc:
        raise CalibrationError(
            f"{section} data {str(file)!r} is corrupt ({type(exc).__name__}); expected an .npz archive"
        ) from None


def _check_declared(stream: IO[bytes], size: int, section: str, file: Path, member: str) -> None:
    """An ``.npy`` header (at the start of ``stream``, ``size`` bytes in all) declaring more bytes than
    follow it is refused before anything is allocated (numpy would try: 4 TiB, ``_ArrayMemoryError``)."""
    version = np.lib.format.read_magic(stream)  # type: ignore[no-untyped-call]
    if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)  # type: ignore[no-untyped-call]
    else:
        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)  # type: ignore[no-untyped-call]
    if dtype.hasobject:
        return  # refused by np.load (allow_pickle=False), never unpickled
    declared = math.prod(shape) * dtype.itemsize
    if declared > size - stream.tell():
        where = f" member {member[:60]!r}" if member else ""
        raise CalibrationError(
            f"{section} data {str(file)!r}{where} declares shape {list(shape)[:8]} of {dtype} "
            f"({declared} bytes); the file holds {size - stream.tell()}: expected an array its file holds"
        )


def _cast(value: NDArray[Any], want: np.dtype[Any]) -> NDArray[Any] | None:
    """``value`` as ``want`` when no value changes on the way (None: it would)."""
    kinds = (value.dtype.kind, want.kind)
    if value.dtype.kind not in "fiub" or want.kind not in "fiub" or (kinds[0] == "f" and kinds[1] in "iub"):
        return None
    if (kinds[0] == "b") != (kinds[1] == "b"):
        return None
    if want.kind == "f":
        finite = value[np.isfinite(value)] if value.dtype.kind == "f" else value
        if finite.size and np.abs(finite).max() > np.finfo(want).max:
            return None
        return value.astype(want)
    if want.kind in "iu" and value.size:
        info = np.iinfo(want)
        if value.min() < info.min or value.max() > info.max:
            return None
    return value.astype(want)


def fit_arrays(
    arrays: dict[str, NDArray[Any]], inputs: Sequence[TensorSpec], file: Path, section: str
) -> tuple[dict[str, NDArray[Any]], list[str]]:
    """The model's inputs from ``arrays`` (read from ``file``): names, dtypes, shapes, sample counts.

    Returns the arrays by input name, cast where the cast changes no value (float64 to float32,
    int32 to int64...), and one warning per cast and per array no input takes. CalibrationError in
    one line naming the file and the array for anything else.
    """
    where = f"{section} data {file.name}"
    names = [t.name for t in inputs]
    if set(arrays) == {""}:  # an .npy file: the one input's array
        if len(names) != 1:
            raise CalibrationError(
                f"{where}: an .npy file holds one array; the model has inputs {names}: use an .npz of named arrays"
            )
        arrays = {names[0]: arrays[""]}
    missing = [n for n in names if n not in arrays]
    if missing:
        raise CalibrationError(
            f"{where} lacks inputs {missing}; expected arrays {names}, got {sorted(arrays)}"
        )
    warnings = [
        f"{where}: array `{extra}` is not an input of the model (inputs: {names}); it is not used"
        for extra in sorted(set(arrays) - set(names))
    ]
    fitted: dict[str, NDArray[Any]] = {}
    for spec in inputs:
        value = arrays[spec.name]
        want = triton_to_numpy(spec.datatype)
        if value.ndim != len(spec.shape) or any(
            d > 0 and d != s for d, s in zip(spec.shape[1:], value.shape[1:], strict=False)
        ):
            raise CalibrationError(
                f"{section} array `{spec.name}` has shape {list(value.shape)}; the model expects "
                f"{list(spec.shape)} (-1: any) ({file.name}: the first axis counts samples)"
            )
        if value.dtype != want:
            cast = _cast(value, want)
            if cast is None:
                raise CalibrationError(
                    f"{where}: array `{spec.name}` is {value.dtype}; the model's input is {want} and "
                    f"casting would change values; save it as {want}"
                )
            warnings.append(
                f"{where}: array `{spec.name}` is {value.dtype}; cast to {want}, the model's type"
            )
            value = cast
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            bad = int(np.argwhere(~np.isfinite(value.reshape(value.shape[0], -1)).all(1))[0][0])
            raise CalibrationError(f"{where}: array `{spec.name}` has NaN or Inf values (sample {bad} first)")
        fitted[spec.name] = value
    counts = {name: value.shape[0] for name, value in fitted.items()}
    if len(set(counts.values())) != 1:
        raise CalibrationError(f"{section} arrays in {file.name} differ in sample count: {counts}")
    return fitted, warnings


def sample_digests(arrays: dict[str, NDArray[Any]]) -> list[bytes]:
    """One digest per sample (row 0..N-1 of every array, by name): equal samples, equal digests."""
    count = next(iter(arrays.values())).shape[0] if arrays else 0
    digests = []
    for i in range(count):
        digest = hashlib.blake2b(digest_size=16)
        for name in sorted(arrays):
            row = np.ascontiguousarray(arrays[name][i])
            digest.update(name.encode() + str(row.dtype).encode() + str(row.shape).encode() + row.tobytes())
        digests.append(digest.digest())
    return digests


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
