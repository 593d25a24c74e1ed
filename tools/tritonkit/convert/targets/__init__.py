"""What each target serves: the build's plan (GPU profile, TensorRT engine plan, max batch), each
precision's graph made for its target (:mod:`.conversion`), and the portable, GPU, ONNX Runtime and
TensorRT versions' files and configs (:mod:`.targets`), shape buckets included.
"""
