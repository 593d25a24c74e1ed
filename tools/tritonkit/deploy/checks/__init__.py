"""The deployment checklist asserted on an overlay's rendered objects, one module per concern.

:func:`checklist` runs the items an overlay owes: for a server overlay the Triton server
(:mod:`.server`: image, flags, restricted APIs), its pod (:mod:`.serving`: ports, probes, volumes,
shutdown, availability, network, start-up gate) and security context (:mod:`.security`), then the
overlay's own items (:mod:`.t4` with :mod:`.jobs` and :mod:`.scaling`, or :mod:`.dev`); for the load-test
overlay :mod:`.loadtest`. Each problem is one line: overlay, object, expected versus found.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from tritonkit.deploy.checks.context import Problems
from tritonkit.deploy.checks.dev import check_dev
from tritonkit.deploy.checks.loadtest import check_loadtest
from tritonkit.deploy.checks.server import check_triton
from tritonkit.deploy.checks.t4 import GPU_PRODUCTS, check_t4
from tritonkit.deploy.manifests import known_overlay
from tritonkit.deploy.objects import Obj
from tritonkit.errors import DeployError

__all__ = ["checklist"]


def checklist(
    objects: Sequence[Obj], overlay: str, *, scenarios: Collection[str] | None = None, gpu: str = "T4"
) -> list[str]:
    """The deployment checklist asserted on an overlay's rendered objects.

    ``scenarios``: the load-test scenario names a ``loadtest`` overlay may run (the caller passes
    ``tritonkit.loadtest.scenarios.SCENARIOS``); needed for that overlay only. ``gpu``: the GPU profile
    a ``t4``-based overlay schedules on (a fleet plan's group may run on another type).
    Returns one line per unmet item; an empty list means every item holds.
    """
    p = Problems(known_overlay(overlay))
    if overlay == "loadtest":
        if scenarios is None:
            raise DeployError("the loadtest overlay's checklist needs the known scenario names; got none")
        check_loadtest(p, objects, scenarios=scenarios)
        return p.lines
    found = check_triton(p, objects)
    if found is not None:
        deployment, container = found
        if overlay == "t4":
            if gpu not in GPU_PRODUCTS:
                raise DeployError(
                    f"unknown GPU `{gpu}` for the checklist; expected one of {', '.join(GPU_PRODUCTS)}"
                )
            check_t4(p, objects, deployment, container, gpu)
        else:
            check_dev(p, objects, deployment, container)
    return p.lines
