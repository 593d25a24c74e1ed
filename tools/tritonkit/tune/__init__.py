"""Measuring, tuning and planning: what load a model sustains, which config serves it best, how many replicas.

Owns perf_analyzer's method, kept honest (:mod:`.stats`: µs percentiles, stability over windows, Triton's
server-side split from statistics deltas; :mod:`.generator`: an asyncio load generator on
:class:`~tritonkit.client.AsyncClient` on the process's one load loop (:mod:`.eventloop`) or in worker
processes, closed loop at a concurrency or
open loop at a constant or Poisson request rate, with its own CPU share and late sends; :mod:`.measure`:
a load level measured in windows until stable, sweeps and the search for the highest load within a
latency budget), the config search (:mod:`.space` axes from a model's config and engine profiles,
:mod:`.search` brute force and coordinate ascent, :mod:`.apply` configs through the model-repository API
and the winner written back atomically, :mod:`.tuner` the tune with the model's own config as its
baseline, :mod:`.trial_log` the resumable trial log, :mod:`.verdict` whether the winner beats the
baseline beyond the spread, :mod:`.spec_file` the winner written into the build spec, :mod:`.report`
its files), :mod:`.compare` (interleaved rounds of several models) and :mod:`.plan` (replicas, cost, HPA
target and the kustomize patch of the t4 overlay, refused for a device the tune did not measure unless
translated, and the check of the knee with the tune's own method).

Sits above :mod:`tritonkit.loadtest` (provenance, payloads and percentile intervals come from there) and
below ``commands``.
"""
