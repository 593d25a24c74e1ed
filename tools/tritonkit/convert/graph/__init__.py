"""The source and its graph: the spec's source (a flagship, a torch module or an ONNX file) exported
to one FP32 ONNX graph and cleaned up (:mod:`.source`), and what a text model needs to take raw strings.
"""
