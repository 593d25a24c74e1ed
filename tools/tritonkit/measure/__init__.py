"""Measuring a model's load: what is sent, how load is generated, cut into windows and judged, and on what.

The one measurement package: ``profile``, ``compare``, ``tune``, ``plan --check-knee``, a fleet plan's
tunes and ``loadtest`` all measure through it. Owns load generation, windows, statistics, payloads,
input data and provenance; the search, the tuner and its trial log stay in :mod:`tritonkit.tune`,
Locust's users, scenarios and SLO gates in :mod:`tritonkit.loadtest`.

Modules:

- :mod:`.payloads`: model metadata → seeded requests, the one generator of request data (the Locust
  users' and the load generator's); :mod:`.input_data`: requests from a perf_analyzer ``--input-data``
  file; :mod:`.validation`: the checks of an answer (output names, dtypes, shapes, finite values);
- :mod:`.sender`: the generator's target, its requests validated and encoded once, and the connections
  they go on; :mod:`.lone_grpc`: the lone request's gRPC transport (HTTP/2 on a socket of its own);
- :mod:`.loadgen`: the asyncio load generator (closed loop at a concurrency, open loop at a request
  rate), cut into windows, in this process or in worker processes, on the process's one load loop
  (:mod:`.eventloop`); :mod:`.capacity`: how many processes and connections a level gets;
- :mod:`.stats`: µs percentiles, their confidence intervals, Triton's server-side split from statistics
  deltas, the stability rule over windows; :mod:`.levels`: a level measured in windows until stable,
  sweeps, and the highest level within a latency budget;
- :mod:`.perf_analyzer`: NVIDIA's perf_analyzer as a generator of record and a cross-check;
  :mod:`.generators`: which of the two measures a level, chosen in one place;
- :mod:`.provenance`: what a measurement was taken on, carried by every measuring output.

Sits above ``client`` (and what it imports) and below ``loadtest``, ``tune`` and ``fleet``, importing
none of them; nothing here imports Locust (it monkey-patches the process that imports it).
"""
