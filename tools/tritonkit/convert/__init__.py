"""Building model versions: build specs, GPU profiles, torch/ONNX export and clean-up, FP16 and INT8
(explicit Q/DQ) precisions, the portable, TensorRT and ONNX Runtime targets, the accuracy gate, and
the flagship models (MiniLM, synthetic ResNet-50).

The stages are sub-packages, lowest first (each imports only the ones before it, ``tests/test_layers.py``
holds the order): :mod:`.spec` (the build spec, GPU profiles, the serving plan), :mod:`.graph` (the
source as one FP32 ONNX graph, the flagships), :mod:`.inputs` (calibration and evaluation data, the
preflight checks), :mod:`.precisions` (FP16, INT8, the accuracy gate) and :mod:`.targets` (the
build's plan, each precision's graph and what each target serves). Below them all sits the build
worker, :mod:`.isolate`; on top, the orchestration: :mod:`.pipeline`, :mod:`.versions`,
:mod:`.report` and :mod:`.onnx_import`.

One pipeline, :func:`tritonkit.convert.pipeline.build_from_spec`, serves every spec: ``tritonkit build
SPEC.yaml``, ``tritonkit build --onnx FILE`` and :func:`tritonkit.convert.onnx_import.import_onnx` (its
as-is import preset), and :func:`tritonkit.convert.pipeline.build_all` (``make demo``). Its steps are
:mod:`.targets.plan`, :mod:`.graph.source`, :mod:`.inputs.datasets`, :mod:`.targets.conversion`,
:mod:`.targets.targets`, :mod:`.precisions.gates` and :mod:`.versions`; the repository's writer writes
what they make. The one writer of a version from a torch module without a spec,
:func:`tritonkit.convert.targets.torch_program.write_torch_version` (benchmarks), goes through the same
gate and the same writer. Heavy libraries (torch, TensorRT, onnxruntime.quantization, Polygraphy) are
imported inside the functions that need them; tritonkit modules are imported at the top.
"""
