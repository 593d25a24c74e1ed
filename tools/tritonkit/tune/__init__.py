"""Measuring, tuning and planning: what load a model sustains, which config serves it best, how many replicas.

Owns perf_analyzer's method, kept honest (:mod:`.stats`: µs percentiles, stability over windows, Triton's
server-side split from statistics deltas; :mod:`.generator`: an asyncio load generator on
:class:`~tritonkit.client.AsyncClient` on the process's one load loop (:mod:`.eventloop`) or in worker
processes, closed loop at a concurrency or
open loop at a constant or Poisson request rate, with its own CPU share and late sends; :mod:`.measure`:
a load level measured in windows until stable, sweeps and the search for the highest load within a
latency budget), the config search (:mod:`.space` axes from a model's config and engine profiles,
:mod:`.search` brute force and coordinate ascent, :mod:`.apply` configs through the model-repository API
and the winner written back atomically, :mod:`.tuner` the resumable trial log, :mod:`.report` its
files), :mod:`.compare` (interleaved rounds of several models) and :mod:`.plan` (replicas, cost, HPA
target and the kustomize patch of the t4 overlay, and the ramp check of the knee).

Sits above :mod:`tritonkit.loadtest` (the knee check runs its ramp) and below ``commands``.
"""
