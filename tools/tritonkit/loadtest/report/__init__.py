"""Load-test reports: Triton's ``/metrics`` (``metrics``), the summary files (``summary``) and plots (``plots``)."""
