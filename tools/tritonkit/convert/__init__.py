"""Building model versions: build specs, GPU profiles, torch/ONNX export and clean-up, FP16 and INT8
(explicit Q/DQ) precisions, the portable, TensorRT and ONNX Runtime targets, the accuracy gate, and
the flagship models (MiniLM, synthetic ResNet-50).

One pipeline, :func:`tritonkit.convert.pipeline.build_from_spec`, serves every entry point:
``tritonkit build SPEC.yaml``, ``tritonkit build --onnx FILE`` and
:func:`tritonkit.convert.portable.import_onnx` (its as-is import preset), and
:func:`tritonkit.convert.pipeline.build_all` (``make demo``). Heavy libraries (torch, TensorRT,
onnxruntime.quantization, Polygraphy) are imported inside the functions that need them; tritonkit
modules are imported at the top.
"""
