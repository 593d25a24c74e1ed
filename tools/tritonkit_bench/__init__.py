"""Benchmarks (``tritonkit bench``): the client, load-generator, tune and precision-compare sections, their
probe model, and the GPU benchmark (``python -m tritonkit_bench.gpu``).

A package of its own beside ``tritonkit``, outside the library: no ``tritonkit`` module imports from here
(``tests/test_layers.py`` holds that); the ``bench`` command loads the sections by name at run time.
"""
