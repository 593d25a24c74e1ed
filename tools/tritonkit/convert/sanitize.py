"""Graph clean-up through Polygraphy before any precision work: constant folding (with shape
folding), ONNX checker, and the opset check."""

from __future__ import annotations

from pathlib import Path

import onnx

from tritonkit.errors import ModelImportError

__all__ = ["opset_of", "sanitize_onnx"]


def opset_of(model: object) -> int:
    """The default-domain opset of an ``onnx.ModelProto``."""
    for entry in getattr(model, "opset_import", []):
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 0


def sanitize_onnx(source: str | Path, dest: str | Path, *, min_opset: int = 13) -> dict[str, int]:
    """Fold constants in ``source`` with Polygraphy and save the result to ``dest``.

    Returns node counts before and after, for the manifest. Raises ModelImportError when the file
    is missing, not ONNX, or older than ``min_opset``.
    """
    import onnxruntime  # noqa: PLC0415 (onnxruntime is heavy; loaded when a session is made)
    from polygraphy.backend.onnx import fold_constants  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)
    from polygraphy.logger import G_LOGGER  # noqa: PLC0415 (Polygraphy loads TensorRT bindings lazily; keep CLI start-up light)

    src = Path(source)
    if not src.is_file():
        raise ModelImportError(f"ONNX source not found: {str(src)!r}; expected an existing .onnx file")
    try:
        model = onnx.load(str(src))
    except Exception as exc:  # DecodeError and friends from protobuf
        raise ModelImportError(f"{str(src)!r} is not a valid ONNX model ({type(exc).__name__})") from None
    opset = opset_of(model)
    if opset < min_opset:
        raise ModelImportError(f"`{src.name}` uses opset {opset}; expected opset >= {min_opset}")
    before = len(model.graph.node)
    G_LOGGER.module_severity = G_LOGGER.ERROR  # Polygraphy's per-pass chatter is not the user's business
    onnxruntime.set_default_logger_severity(3)  # ORT's optimizer warnings during folding, likewise
    try:
        folded = fold_constants(model, num_passes=3, error_ok=False)
        onnx.checker.check_model(folded)
    except Exception as exc:
        raise ModelImportError(f"graph clean-up of `{src.name}` failed: {str(exc).splitlines()[0]}") from None
    onnx.save(folded, str(dest))
    return {"nodes_before": before, "nodes_after": len(folded.graph.node), "opset": opset}
