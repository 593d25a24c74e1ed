"""Precisions and the accuracy gate: an ONNX graph made FP16 or Q/DQ INT8, judged against its FP32
reference on held-out inputs (:mod:`.gates`), and the per-sample memory a graph takes.
"""
