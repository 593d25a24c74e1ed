"""Benchmarks (``tritonkit bench``): the client and load-generator sections and their probe model.

Outside the library layers: nothing in ``client``, ``loadtest`` or below imports from here.
"""
