"""Fleet plans: many models, one fleet. ``tritonkit plan --fleet FLEET.yaml``.

Modules, lowest first: :mod:`.devices` (GPU types, their published memory, this machine's type),
:mod:`.spec` (the fleet file, strictly), :mod:`.capacity` (a model's tuned config and capacity on a type,
read back from ``tune.json``), :mod:`.memory` (host and GPU memory per instance, measured),
:mod:`.openloop` (several models at their rates at once, open loop, client-side p99 per model),
:mod:`.colocate` (a group served together, its share of the targets found by measurement),
:mod:`.packing` (groups and GPUs, pure arithmetic), :mod:`.planner` (measuring lazily until the best
packing stands on measured groups), :mod:`.overlays` (a kustomize overlay per group, HPA or KEDA,
validated), :mod:`.verify` (each group served at its planned rates by a separate Locust mixed load test),
:mod:`.report` and :mod:`.plots` (markdown, JSON, the packing picture).
"""
