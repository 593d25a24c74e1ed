"""Building model versions: build specs, GPU profiles, torch/ONNX export and clean-up, FP16 and INT8
(explicit Q/DQ) precisions, the portable, TensorRT and ONNX Runtime targets, the accuracy gate, and
the flagship models (MiniLM, synthetic ResNet-50).

One pipeline, :func:`tritonkit.convert.pipeline.build_from_spec`, serves every spec: ``tritonkit build
SPEC.yaml``, ``tritonkit build --onnx FILE`` and :func:`tritonkit.convert.onnx_import.import_onnx` (its
as-is import preset), and :func:`tritonkit.convert.pipeline.build_all` (``make demo``). Its steps are
:mod:`.plan`, :mod:`.source`, :mod:`.datasets`, :mod:`.conversion`, :mod:`.targets`, :mod:`.gates` and
:mod:`.versions`; the repository's writer writes what they make. The one writer of a version from a
torch module without a spec, :func:`tritonkit.convert.torch_program.write_torch_version` (benchmarks),
goes through the same gate and the same writer. Heavy libraries (torch, TensorRT,
onnxruntime.quantization, Polygraphy) are imported inside the functions that need them; tritonkit
modules are imported at the top.
"""
