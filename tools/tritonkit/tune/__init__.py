"""Tuning and planning: which config serves a model best, and how many replicas it needs.

Owns the config search (:mod:`.space` axes from a model's config and engine profiles, :mod:`.search`
brute force and coordinate ascent, :mod:`.synthetic` a deterministic response surface that checks the searches without a
server, :mod:`.apply` configs through the model-repository API and the winner written back
atomically, :mod:`.tuner` the tune with the model's own config as its baseline, :mod:`.trial` and
:mod:`.trial_log` one trial and the resumable trial log, :mod:`.verdict` whether the winner beats the
baseline beyond the spread, :mod:`.spec_file` the winner written into the build spec, :mod:`.traffic` a
measurement's lengths on shape-bucketed axes and the edges tried from them, :mod:`.report` its files),
:mod:`.export` (``profile``'s level results as CSV and JSON), :mod:`.compare` (interleaved rounds of several models) and :mod:`.plan` (replicas, cost, HPA
target and the kustomize patch of the t4 overlay, refused for a device the tune did not measure unless
translated, and the check of the knee with the tune's own method).

Sits above :mod:`tritonkit.measure` (every level is measured there: load generation, windows,
statistics, payloads, provenance) and below ``fleet`` and ``commands``.
"""
