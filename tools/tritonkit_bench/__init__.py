"""Benchmarks, beside the library.

Sections of ``docs/benchmarks.md`` for ``tritonkit bench`` (``--only SECTION``): ``client`` (what the client
layer costs over raw tritonclient), ``loadtest`` (the Locust users' load against wrk), ``tune`` (quick search
against brute force), ``compare`` (FP32 / FP16 / INT8 of the flagships, served) and ``users_ab`` (this tree's
Locust users against an earlier commit's); their probe model (``probe_model``). The GPU benchmark
(``python -m tritonkit_bench.gpu``, ``docs/benchmarks-gpu.md``): ``gpu`` (the parts and the run),
``gpu_models`` (models and versions), ``gpu_measure`` (in-process, accuracy, and served levels measured
by the product's generator of record: perf_analyzer where installed, else ``tritonkit.measure.levels``),
``gpu_tune`` (tune, then profile), ``gpu_render`` (the page); ``gpu_ab`` (the python torch runner against
the native backend, variant by variant).
``faults`` renders ``docs/reliability.md`` from the fault suite's records; ``fleet`` is the fleet plan's
worked example, end to end.

A package of its own beside ``tritonkit``, outside the library: no ``tritonkit`` module imports from here
(``tests/test_layers.py`` holds that); the ``bench`` command loads the sections by name at run time.
"""
