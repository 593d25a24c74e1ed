"""``python -m tritonkit`` runs the CLI."""

import sys

from tritonkit.cli import main

sys.exit(main())
