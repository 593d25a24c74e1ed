"""Benchmarks (``tritonkit bench``): the client, load-generator, tune and precision-compare sections, their probe
model, and the GPU benchmark (``python -m tritonkit.bench.gpu``).

Outside the library layers: nothing in ``client``, ``loadtest`` or below imports from here.
"""
