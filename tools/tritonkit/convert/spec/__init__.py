"""The build spec, the lowest stage of a build: the YAML spec and its overrides, the ``serving``
section's execution plan, the GPU profiles, and the options the spec hands later stages as they are.
It imports no other stage (the build worker, :mod:`tritonkit.convert.isolate`, is below every stage).
"""
