"""Conversion and calibration: build specs, GPU profiles, torch/ONNX export and clean-up, FP16 and
INT8 (explicit Q/DQ) precisions, the TensorRT and ONNX Runtime targets, the accuracy gate, and the
flagship models (MiniLM, synthetic ResNet-50).

Entry points: :func:`tritonkit.build.pipeline.build_from_spec` (``tritonkit build SPEC.yaml``) and
:func:`tritonkit.build.flagship.build_all` (``make demo``). Heavy libraries (torch, TensorRT,
onnxruntime.quantization) are imported inside the functions that need them.
"""
