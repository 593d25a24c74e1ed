"""Entry point for running Locust by hand against Triton.

``tritonkit loadtest`` is the usual way (it writes the run's options and the reports). To drive
Locust yourself, write the options JSON and point ``TRITONKIT_LOADTEST_CONFIG`` at it::

    TRITONKIT_LOADTEST_CONFIG=run.json locust -f loadtests/locustfile.py --headless

or import the user classes into your own locustfile (see ``loadtests/mixed.py``).
"""

from tritonkit.loadtest.locustfile import *  # noqa: F403  (users and shape built from the options)
