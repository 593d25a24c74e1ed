"""Load-test reports: Triton's ``/metrics`` (``metrics``), Locust's CSVs (``locust_csv``), the summary
files (``summary``) and plots (``plots``)."""
