"""Deployment on Kubernetes: rendering the ``k8s/`` overlays, schema validation, the checklist, checkov."""
