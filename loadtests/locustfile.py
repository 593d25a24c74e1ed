"""Entry point for running Locust by hand against Triton.

Plain Locust, one HTTP user per Locust user on one model; Locust's ``-u``, ``-r`` and ``-t`` drive it::

    locust -f loadtests/locustfile.py --headless -u 8 -r 8 -t 30s \\
        --host http://127.0.0.1:8000 --triton-model minilm_int8

(``TRITONKIT_MODEL=minilm_int8`` instead of ``--triton-model``; ``--triton-batch-mix 1:0.8,8:0.2``.)
``tritonkit loadtest`` is the usual way (scenarios, SLO gates, the full report): it writes the run's
options as JSON and points ``TRITONKIT_LOADTEST_CONFIG`` at them, and this file then builds those
users and that shape instead. To mix models by hand, import the user classes into your own
locustfile (see ``loadtests/mixed.py``).
"""

from tritonkit.loadtest.locustfile import *  # noqa: F403  (users and shape built from the options)
